#!/bin/bash
# gmblock-cache in the write-back modes: block status writes the dirty
# blocks of its range back first (test-cache-extents-dirty), so that
# the layer below describes them truthfully.  When that write-back
# fails, block status fails with its error: answering from below would
# call acknowledged data a hole.  The blocks stay dirty: after the
# trigger is gone a flush writes them, and the file has them before
# nbdkit stops.  nbdkit's error filter between the cache and the plugin
# fails every write below (and only writes) while $T/trigger exists.
# Controls: block status of a range with no dirty block succeeds
# meanwhile (the error filter does not fail block status itself), and
# the file does not have the data before the flush.  nbdinfo --map, a
# second client, fails the same way.  Counters at exit: each dirty
# block's failed write-back is counted once (errors), and the flush
# writes both (writebacks).
. "$(dirname "$0")/functions.sh"
require nbdkit nbdinfo
cd "$T"

M=1048576 blk=65536
for mode in writeback "adaptive adaptive-writes=back"; do
    name=m${mode%% *}
    truncate -s $((4 * M)) "$T/$name.img"
    rm -f "$T/trigger"
    # shellcheck disable=SC2086
    start_server "$name" --filter=gmblock-cache --filter=error gmblock \
        file="$T/$name.img" cache-mode=$mode cache-block-size=64K \
        cache-size=8M writeback-interval=3600 cache-stats="$T/$name.stats" \
        error-pwrite-rate=100% error-file="$T/trigger"
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$name")" "$T/trigger" \
              "$T/$name.img" <<'PY'
import errno, nbd, os, sys
uri, trigger, img = sys.argv[1:]
M, blk = 1 << 20, 64 * 1024
h = nbd.NBD()
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(uri)

def kinds(n, off):
    # The flags of the extents block status returns (each ends past off).
    seen = []
    h.block_status(n, off, lambda ctx, start, ents, err: seen.extend(ents[1::2]) or 0)
    return seen

def on_disk(n, off):
    with open(img, "rb") as f:
        f.seek(off)
        return f.read(n)

data = os.urandom(2 * blk)
h.pwrite(data, M)                       # blocks 16 and 17, dirty
open(trigger, "w").close()
try:
    kinds(4 * blk, M - blk)
    sys.exit("block status succeeded though writing back its dirty blocks failed")
except nbd.Error as e:
    if e.errnum != errno.EIO:
        sys.exit(f"block status failed with {e.errnum} ({e}), not EIO")
if not kinds(4 * blk, 2 * M) or any(f & nbd.STATE_HOLE == 0 for f in kinds(4 * blk, 2 * M)):
    sys.exit("control: block status without dirty blocks failed, or saw no hole")
if h.pread(2 * blk, M) != data:
    sys.exit("after the failed write-back the cache reads other bytes")
if on_disk(2 * blk, M) != bytes(2 * blk):
    sys.exit("control: the data reached the file though every write below fails")
print("block status fails with EIO while the write-back fails")
h.shutdown()
PY
) || fail "cache-mode=$mode: $out"
    # nbdinfo --map asks for the whole disk: the same write-back fails.
    if nbdinfo --map "$(uri "$name")" >"$T/$name.map" 2>&1; then
        cat "$T/$name.map" >&2; fail "cache-mode=$mode: nbdinfo --map succeeded while the write-back fails"
    fi
    rm -f "$T/trigger"
    # Still dirty: a flush writes them, and the file has them at once.
    nbdsh -u "$(uri "$name")" -c 'h.flush()' || fail "cache-mode=$mode: the flush failed after the trigger"
    /usr/bin/python3 - "$T/$name.img" <<'PY' || fail "cache-mode=$mode: after the flush the file lacks the data"
import sys
M, blk = 1 << 20, 64 * 1024
with open(sys.argv[1], "rb") as f:
    f.seek(M)
    sys.exit(f.read(2 * blk) == bytes(2 * blk))
PY
    nbdinfo --map "$(uri "$name")" >"$T/$name.map" || fail "cache-mode=$mode: nbdinfo --map failed after the trigger"
    awk -v s=$M '$1 <= s && $1 + $2 > s && $3 == 0 { ok = 1 } END { exit !ok }' "$T/$name.map" ||
        { cat "$T/$name.map" >&2; fail "cache-mode=$mode: after the flush the map does not say data at 1M"; }
    stop_server "$name"
    s=$T/$name.stats
    got="errors=$(ccounter "$s" errors) writebacks=$(ccounter "$s" writebacks) dirty_bytes=$(ccounter "$s" dirty_bytes)"
    # Failed: blocks 16 and 17 at the block status, again at nbdinfo's.
    # Then the flush writes both.
    [[ $got == "errors=4 writebacks=2 dirty_bytes=0" ]] ||
        fail "cache-mode=$mode: counters $got, want errors=4 writebacks=2 dirty_bytes=0"
    info "cache-mode=$mode: $out; so does nbdinfo --map; a flush after writes them; $got"
done
echo PASS
