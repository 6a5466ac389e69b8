#!/bin/bash
# gmblock-cache in the write-back modes: a request that fails below must
# fail, and must not lose or corrupt acknowledged data outside its own
# range.  nbdkit's error filter fails every request below while
# $T/trigger exists.
#  - A write that covers only part of a block the cache does not hold
#    must first read the rest of the block from below (the block is
#    written back whole).  When that read fails, the write fails:
#    acknowledging it would put the new bytes in a slot whose other
#    bytes are whatever the slot held before, and the write-back would
#    then overwrite the rest of the block on the disk.
#  - A write over several blocks fails when one piece fails (the first:
#    a partial block whose fill fails), even if the pieces after it
#    succeed in the cache.
#  - A zero or trim that fails below, over part of a dirty block: the
#    block's other bytes, acknowledged and not yet written back, exist
#    only in the cache and must stay there.
# After the trigger is gone: reads, a flush and the file after shutdown
# show every byte outside the failed requests as it was acknowledged.
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"

for mode in writeback "adaptive adaptive-writes=back"; do
    name=m${mode%% *}
    randfile "$T/$name.img" $((4 * 1048576))
    cp "$T/$name.img" "$T/$name.want"
    rm -f "$T/trigger"
    # shellcheck disable=SC2086
    start_server "$name" --filter=gmblock-cache --filter=error gmblock \
        file="$T/$name.img" cache-mode=$mode cache-block-size=64K \
        writeback-interval=3600 error-rate=100% error-file="$T/trigger"
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$name")" "$T/trigger" "$T/$name.want" <<'PY'
import nbd, os, sys
uri, trigger, want = sys.argv[1:]
h = nbd.NBD()
h.connect_uri(uri)
blk = 64 * 1024
disk = bytearray(open(want, "rb").read())
failed = []                     # ranges whose contents are undefined

def fails(what, f, *a):
    open(trigger, "w").close()
    try:
        f(*a)
        sys.exit(f"{what} failed below and was acknowledged")
    except nbd.Error:
        pass
    finally:
        os.unlink(trigger)

# A partial write into block 1, not resident: its fill fails.
fails("a partial write whose fill", h.pwrite, b"W" * 4096, blk + 4096)
failed.append((blk + 4096, 4096))
# Block 2 dirty, then a zero and a trim over parts of it fail.
data = os.urandom(blk)
h.pwrite(data, 2 * blk)
disk[2 * blk:3 * blk] = data
fails("a zero over part of a dirty block", h.zero, 4096, 2 * blk + 8192)
fails("a trim over part of a dirty block", h.trim, 4096, 2 * blk + 16384)
failed += [(2 * blk + 8192, 4096), (2 * blk + 16384, 4096)]
# A write over blocks 4 (partly: its fill fails) and 5 (whole: no read
# below): the first piece's failure fails the write, whatever the
# later pieces do.
fails("a write whose first block's fill", h.pwrite, b"V" * (blk + blk // 2),
      4 * blk + blk // 2)
failed.append((4 * blk + blk // 2, blk + blk // 2))

def outside(b):
    b = bytearray(b)
    for off, n in failed:
        b[off:off + n] = bytes(n)
    return bytes(b)

got = h.pread(6 * blk, 0)
if outside(got) != outside(disk[:6 * blk]):
    sys.exit("after the failed requests, bytes outside them read differently")
h.flush()
h.shutdown()
open(want, "wb").write(outside(disk))
open(want + ".failed", "w").write(repr(failed))
print("they fail, and every byte outside them reads as acknowledged")
PY
) || fail "cache-mode=$mode: $out"
    stop_server "$name"
    /usr/bin/python3 - "$T/$name.img" "$T/$name.want" <<'PY' ||
import ast, sys
d, w = (bytearray(open(f, "rb").read()) for f in sys.argv[1:])
for off, n in ast.literal_eval(open(sys.argv[2] + ".failed").read()):
    d[off:off + n] = bytes(n)           # the failed requests' ranges
sys.exit(d != w)
PY
        fail "cache-mode=$mode: after shutdown the file differs outside the failed requests"
    info "cache-mode=$mode: $out"
done
