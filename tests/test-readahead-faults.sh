#!/bin/bash
# gmblock-readahead: prefetches that fail below are counted and dropped;
# no client request fails, the data stays right, the server survives.
# nbdkit's error filter injects the failures:
#  - pagecache: error-cache-rate=100% over gmblock direct=false;
#  - cache:     error-cache-rate=100% over gmblock-cache;
#  - half:      error-cache-rate=50% over gmblock-cache (both outcomes);
#  - below:     under gmblock-cache, failing its fills (pread) while a
#               trigger file exists.  The client's range is put in the
#               cache first (NBD_CMD_CACHE from the client, which the
#               filter does not see), so the client only hits, while
#               the prefetches past its range miss and fail.  With the
#               trigger gone, the blocks whose fills failed read right.
# Clients: nbdcopy (4 connections, and --synchronous) and
# tests/readahead-faults.py (interleaved streams on one connection,
# queue depth 8, a scan split over two connections).
# Controls: without injected errors prefetch_errors stays 0, and the
# helper notices one changed byte.
. "$(dirname "$0")/functions.sh"
require nbdkit nbdcopy
cd "$T"

rcounter () { awk -v k="gmblock-readahead.$2" '$1 == k { print $2 }' "$1"; }
SIZE=$((24 * 1048576 + 4096))   # the last window is cut at the end
randfile "$T/src.img" $SIZE
helper () { /usr/bin/python3 "$top/tests/readahead-faults.py" "$@"; }

# Every queued byte is classified exactly once, failures included.
check_ledger () {
    local s=$1 q sum=0 k
    q=$(rcounter "$s" queued_bytes)
    for k in useful wasted cancelled invalidated failed; do
        sum=$((sum + $(rcounter "$s" ${k}_bytes)))
    done
    [[ $q -gt 0 && $q -eq $sum ]] || fail "$s: queued_bytes $q != sum of outcomes $sum"
}

# Server log: the injected errors and nothing worse.
check_log () {
    local log=$T/$1.log
    if grep -vE '^nbdkit: error: injecting EIO error into (cache|pread)$' "$log" |
            grep -iE 'error|assert|abort|signal|crash|sanitizer'; then
        fail "$1: unexpected messages in the server log"
    fi
}

clients () {        # clients NAME: every client, every byte compared
    local name=$1
    nbdcopy "$(uri "$name")" "$T/$name.out" || fail "$name: nbdcopy failed"
    cmp "$T/src.img" "$T/$name.out" || fail "$name: nbdcopy copy differs"
    nbdcopy --synchronous "$(uri "$name")" "$T/$name.out" ||
        fail "$name: nbdcopy --synchronous failed"
    cmp "$T/src.img" "$T/$name.out" || fail "$name: nbdcopy --synchronous copy differs"
    helper "$(uri "$name")" "$T/src.img" || fail "$name: a client read failed or was wrong"
}

inject () {         # inject NAME [server args...]
    local name=$1; shift
    start_server "$name" "$@" file="$T/src.img" ra-stats="$T/$name.stats"
    clients "$name"
    stop_server "$name"
    check_log "$name"
    check_ledger "$T/$name.stats"
    [[ $(rcounter "$T/$name.stats" prefetch_errors) -gt 0 ]] ||
        fail "$name: no prefetch error counted"
    info "$name: $(rcounter "$T/$name.stats" prefetch_requests) prefetches, $(rcounter "$T/$name.stats" prefetch_errors) failed ($(rcounter "$T/$name.stats" failed_bytes) bytes), $(rcounter "$T/$name.stats" prefetch_bytes) bytes prefetched"
}

cstack=(--filter=gmblock-readahead --filter=error --filter=gmblock-cache gmblock)
inject pagecache --filter=gmblock-readahead --filter=error gmblock direct=false \
    error-cache-rate=100%
[[ $(rcounter "$T/pagecache.stats" prefetch_bytes) == 0 ]] ||
    fail "pagecache: a prefetch succeeded through error-cache-rate=100%"
inject cache "${cstack[@]}" error-cache-rate=100%
inject half "${cstack[@]}" error-cache-rate=50%
[[ $(rcounter "$T/half.stats" prefetch_bytes) -gt 0 ]] ||
    fail "half: no prefetch succeeded at error-cache-rate=50%"

# below: fills under gmblock-cache fail while $T/trigger exists.
X=$((8 * 1048576))
start_server below --filter=gmblock-readahead --filter=gmblock-cache \
    --filter=error gmblock cache-mode=read cache-size=64M \
    error-pread-rate=100% error-pread-file="$T/trigger" \
    file="$T/src.img" ra-stats="$T/below.stats"
nbdsh -u "$(uri below)" -c "
for off in range(0, $X, 1 << 20):
    h.cache(1 << 20, off)
"
touch "$T/trigger"
helper "$(uri below)" "$T/src.img" 0 $X ||
    fail "below: a client read of cached data failed or was wrong"
sleep 1                         # let the prefetches past the range fail
rm "$T/trigger"
nbdcopy "$(uri below)" "$T/below.out" || fail "below: nbdcopy failed"
cmp "$T/src.img" "$T/below.out" || fail "below: data differs after failed fills"
stop_server below
check_log below
check_ledger "$T/below.stats"
grep -q 'injecting EIO error into pread' "$T/below.log" ||
    fail "below: no fill failed (the test did not test)"
[[ $(rcounter "$T/below.stats" prefetch_errors) -gt 0 ]] ||
    fail "below: no prefetch error counted"
info "below: $(rcounter "$T/below.stats" prefetch_errors) prefetches failed in fills, then every byte read right"

# Controls: no injection, no errors counted; a wrong byte is noticed.
start_server control "${cstack[@]}" file="$T/src.img" ra-stats="$T/control.stats"
cp "$T/src.img" "$T/changed.img"
# The byte's complement: a fixed value would match random data 1 time in 256.
off=$((SIZE / 2 + 12345))
b=$(od -An -tu1 -j "$off" -N1 "$T/src.img" | tr -d ' ')
printf "\\x$(printf %02x $((b ^ 0xff)))" | dd of="$T/changed.img" bs=1 seek="$off" conv=notrunc status=none
cmp -s "$T/src.img" "$T/changed.img" && fail "control: the byte did not change"
if helper "$(uri control)" "$T/changed.img" 2>/dev/null; then
    fail "control: the helper missed a changed byte"
fi
stop_server control
[[ $(rcounter "$T/control.stats" prefetch_errors) == 0 ]] ||
    fail "control: prefetch errors without injection"
[[ $(rcounter "$T/control.stats" prefetch_bytes) -gt 0 ]] ||
    fail "control: nothing prefetched"
info "controls: no errors counted without injection; a changed byte is noticed"
