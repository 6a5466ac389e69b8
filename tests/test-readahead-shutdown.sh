#!/bin/bash
# A prefetch cut short because nbdkit is shutting down is cancelled, not
# failed: layers that wait with nbdkit_nanosleep (here nbdkit's delay
# filter, a slow disk) give up with ESHUTDOWN at SIGTERM.  Before, those
# pieces counted as prefetch_errors and failed_bytes, which read as a
# failing disk.  The ledger still balances: every byte queued is
# useful, wasted, cancelled, invalidated or failed exactly once.
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"

rcounter () { awk -v k="gmblock-readahead.$1" '$1 == k { print $2 }' "$T/ra.stats"; }
truncate -s 64M "$T/disk.img"
start_server ra --filter=gmblock-readahead --filter=gmblock-cache \
    --filter=delay gmblock file="$T/disk.img" delay-read=400ms \
    ra-max=8M ra-stats="$T/ra.stats"
# A sequential reader starts a stream; prefetches of 400 ms each are
# still in flight, and more queued, when it leaves.
timeout 60 /usr/bin/python3 - "$(uri ra)" <<'PY' || fail "the sequential reader failed"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
for off in range(0, 1 << 20, 65536):
    h.pread(65536, off)
h.shutdown()
PY
stop_server ra
grep -q "aborting sleep because of server shut down" "$T/ra.log" ||
    fail "no prefetch was in flight at SIGTERM (the delay filter never gave up): no test"
for c in prefetch_errors failed_bytes; do
    [[ $(rcounter $c) == 0 ]] ||
        fail "$c is $(rcounter $c) after a clean shutdown (nothing failed below)"
done
[[ $(rcounter cancelled_bytes) -gt 0 ]] || fail "nothing counted as cancelled"
sum=0
for c in useful_bytes wasted_bytes cancelled_bytes invalidated_bytes failed_bytes; do
    sum=$((sum + $(rcounter $c)))
done
[[ $sum == $(rcounter queued_bytes) ]] ||
    fail "the ledger does not balance: $sum classified of $(rcounter queued_bytes) queued"
info "prefetches cut short at shutdown: $(rcounter cancelled_bytes) bytes cancelled, none failed"
