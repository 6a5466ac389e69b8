#!/bin/bash
# gmblock-readahead: data stays right, byte for byte, with real clients.
#  - nbdcopy (4 connections, and --synchronous) copies a random image
#    through readahead + gmblock-cache + gmblock and through readahead
#    over gmblock direct=false; the copies equal the source.
#  - tests/readahead-data.py: sequential readers (QD1 and QD8) while two
#    writers write, zero and trim just ahead of them, in ranges being
#    prefetched; every read is checked against a model, and the whole
#    export at the end; then the backing file equals the model too.
#  - The counters show the filter really prefetched and invalidated.
# Negative control: the data check catches a byte changed behind the
# server's back.
. "$(dirname "$0")/functions.sh"
require nbdkit nbdcopy
cd "$T"

rcounter () { awk -v k="gmblock-readahead.$2" '$1 == k { print $2 }' "$1"; }
SIZE=$((24 * 1048576 + 4096))
randfile "$T/src.img" $SIZE
SECS=${READAHEAD_DATA_SECONDS:-8}

copy_check () {     # copy_check NAME [server args...]
    local name=$1; shift
    cp "$T/src.img" "$T/$name.img"
    start_server "$name" "$@" file="$T/$name.img" ra-stats="$T/$name.stats"
    nbdcopy "$(uri "$name")" "$T/$name.out"
    cmp "$T/src.img" "$T/$name.out" || fail "$name: nbdcopy copy differs"
    nbdcopy --synchronous "$(uri "$name")" "$T/$name.out2"
    cmp "$T/src.img" "$T/$name.out2" || fail "$name: nbdcopy --synchronous copy differs"
    stop_server "$name"
    [[ $(rcounter "$T/$name.stats" prefetch_bytes) -gt 0 ]] || fail "$name: nothing was prefetched"
    [[ $(rcounter "$T/$name.stats" prefetch_errors) == 0 ]] || fail "$name: prefetch errors"
    info "$name: copies equal; prefetched $(rcounter "$T/$name.stats" prefetch_bytes) bytes, useful $(rcounter "$T/$name.stats" useful_bytes), wasted $(rcounter "$T/$name.stats" wasted_bytes)"
}

writers_check () {  # writers_check NAME SEED [server args...]
    local name=$1 seed=$2; shift 2
    cp "$T/src.img" "$T/$name.img"
    start_server "$name" "$@" file="$T/$name.img" ra-stats="$T/$name.stats"
    /usr/bin/python3 "$top/tests/readahead-data.py" "$(uri "$name")" "$seed" "$SECS" \
        || fail "$name: data mismatch with concurrent writers"
    nbdcopy "$(uri "$name")" "$T/$name.final"
    stop_server "$name"
    cmp "$T/$name.img" "$T/$name.final" || fail "$name: backing file differs from what the server served"
    [[ $(rcounter "$T/$name.stats" prefetch_bytes) -gt 0 ]] || fail "$name: nothing was prefetched"
    [[ $(rcounter "$T/$name.stats" writes_invalidating) -gt 0 ]] || fail "$name: no write invalidated a window"
    info "$name: prefetched $(rcounter "$T/$name.stats" prefetch_bytes), invalidated $(rcounter "$T/$name.stats" invalidated_bytes) bytes by $(rcounter "$T/$name.stats" writes_invalidating) writes"
}

stack=(--filter=gmblock-readahead --filter=gmblock-cache gmblock)
copy_check cache "${stack[@]}"
copy_check pagecache --filter=gmblock-readahead gmblock direct=false
copy_check small "${stack[@]}" cache-size=2M cache-block-size=64K ra-max=4M ra-max-inflight=8

writers_check w_adaptive 1 "${stack[@]}"
writers_check w_writeback 2 "${stack[@]}" cache-mode=writeback cache-size=4M
writers_check w_pagecache 3 --filter=gmblock-readahead gmblock direct=false

# Negative control: a byte changed in the backing file behind the
# server is caught by the comparison the test relies on.
cp "$T/src.img" "$T/neg.img"
start_server neg --filter=gmblock-readahead gmblock direct=false file="$T/neg.img"
# The byte's complement, so it always differs (a fixed 0x5a was
# already there in 1 run of 256).
byte=$(od -An -tu1 -j 12345 -N 1 "$T/src.img" | tr -d ' ')
printf "\\$(printf %o $((255 - byte)))" | dd of="$T/neg.img" bs=1 seek=12345 conv=notrunc status=none
nbdcopy "$(uri neg)" "$T/neg.out"
stop_server neg
if cmp -s "$T/src.img" "$T/neg.out"; then fail "negative control: a changed byte went unnoticed"; fi
info "negative control: a changed byte is noticed"
