#!/bin/bash
# gmblock-cache in the write-back modes: block status (extents) must
# describe data written and acknowledged but still dirty in the cache.
# The layer below knows only the disk, where that range may still be a
# hole: a client that trusts the map (nbdcopy, qemu-img convert) would
# skip the data and copy zeros.  So the cache writes the range back
# before asking below.  A sparse file; a write into its hole; then the
# map must say data there, and nbdcopy (which reads the map itself)
# must copy the bytes of another such write.
# Control: before the write the map says hole (so the plugin does
# report holes and the check can fail).
. "$(dirname "$0")/functions.sh"
require nbdcopy
cd "$T"

M=1048576
for mode in writeback unsafe "adaptive adaptive-writes=back"; do
    name=m${mode%% *}
    truncate -s $((4 * M)) "$T/$name.img"
    # shellcheck disable=SC2086
    start_server "$name" --filter=gmblock-cache gmblock file="$T/$name.img" \
        cache-mode=$mode cache-size=8M writeback-interval=3600
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$name")" "$T/$name.want" <<'PY'
import nbd, os, sys
M = 1 << 20
h = nbd.NBD()
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(sys.argv[1])

def kinds(off, n):
    # The extent flags covering [off, off+n).
    seen = []
    def cb(ctx, start, ents, err):
        pos = start
        for i in range(0, len(ents), 2):
            if pos < off + n and pos + ents[i] > off:
                seen.append(ents[i + 1])
            pos += ents[i]
        return 0
    h.block_status(n, off, cb)
    return seen

if not kinds(M, 65536) or any(f & nbd.STATE_HOLE == 0 for f in kinds(M, 65536)):
    sys.exit("control: the hole is not reported as a hole (no test)")
data = os.urandom(65536)
h.pwrite(data, M)               # acknowledged, dirty in the cache only
flags = kinds(M, 65536)
if any(f & (nbd.STATE_HOLE | nbd.STATE_ZERO) for f in flags):
    sys.exit(f"after a write, block status says hole/zero there: {flags}")
# Another dirty write, for nbdcopy's own block status to find.
data2 = os.urandom(65536)
h.pwrite(data2, 2 * M + 4096)
want = bytearray(4 * M)
want[M:M + 65536] = data
want[2 * M + 4096:2 * M + 4096 + 65536] = data2
open(sys.argv[2], "wb").write(want)
print("block status says data where the dirty write is")
PY
) || fail "cache-mode=$mode: $out"
    nbdcopy "$(uri "$name")" "$T/$name.copy" || fail "cache-mode=$mode: nbdcopy failed"
    cmp "$T/$name.copy" "$T/$name.want" ||
        fail "cache-mode=$mode: nbdcopy's copy lacks the written data"
    stop_server "$name"
    info "cache-mode=$mode: $out; nbdcopy copies it"
done
