#!/bin/bash
# gmblock-cache: a flush waits for every write acknowledged before it,
# whatever else is in flight.  Write A (4K, no FUA) into a 64K cache
# block and get the reply; send a FUA write B into another part of the
# same block, which takes 3 s below (delay filter); 0.3 s later flush
# on a second connection; kill -9 the server when the flush replies.
# A must be on the disk.  (The flush used to return at once while the
# block was under B's write-back, neither dirty nor marked in flight.)
# The same with the write-back of A itself in flight outside any flush
# pass: a block status request (extents) writes A back first, 3 s
# below, and the flush sent 0.3 s later must wait for that write (its
# pass alone would find A clean: flushes take turns, extents do not).
# Run for writeback and for adaptive with adaptive-writes=back.
. "$(dirname "$0")/functions.sh"
cd "$T"

M=1048576
for run in "writeback fua" "writeback extents" "adaptive fua" "adaptive extents"; do
    read -r mode how <<<"$run"
    extra=()
    [[ $mode == adaptive ]] && extra=(adaptive-writes=back)
    head -c $((4 * M)) /dev/zero >"$T/disk.img"
    start_server fl --filter=gmblock-cache --filter=delay gmblock \
        file="$T/disk.img" cache-mode=$mode "${extra[@]}" \
        cache-block-size=64K writeback-interval=3600 delay-write=3
    pid=$(server_pid fl)
    /usr/bin/python3 - "$(uri fl)" "$pid" "$T/disk.img" $how <<'PY' || fail "$mode ($how): flush lost an acknowledged write"
import nbd, os, signal, sys, time
uri, pid, img, how = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
A, B = b"A" * 4096, b"B" * 4096
c1, c2 = nbd.NBD(), nbd.NBD()
c1.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
c1.connect_uri(uri)
c2.connect_uri(uri)
c1.pwrite(A, 0)                                   # acknowledged, dirty
if how == "fua":
    c1.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(B)), 8192,
                  flags=nbd.CMD_FLAG_FUA)         # 3 s below
else:
    if not c1.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION):
        sys.exit("no block status: no test")
    c1.aio_block_status(65536, 0, lambda *a: 0)   # A's write-back: 3 s below
time.sleep(0.3)
t = time.monotonic()
c2.flush()
took = time.monotonic() - t
os.kill(pid, signal.SIGKILL)
with open(img, "rb") as f:
    got = f.read(4096)
print(f"flush took {took:.2f} s; A on disk: {got == A}")
sys.exit(0 if got == A else 1)
PY
    wait "$pid" 2>/dev/null || true
    eval "_pid_fl="
    info "$mode ($how): the flush waited for the write-back in flight"
done
