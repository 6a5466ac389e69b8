#!/bin/bash
# gmblock-readahead: the calls the layer below sees.  The filter runs
# over an sh plugin (1 GiB of zeros, preferred block 64K, native cache)
# that logs every pread, cache and pwrite, as nbdkit's own readahead
# test does.  Checked (tests/readahead-calls.py): sequential 4K reads
# give aligned windows 64K, 128K, 256K, 512K, 1M, 1M that cover exactly
# [64K, 3M); the plugin sees no read but the client's; 500 random
# reads give no prefetch; two interleaved streams are both prefetched;
# a write inside a prefetched window makes its block prefetched again,
# after the write, and one behind the reader does not; four more writes
# to that block make one refill each.  The counters agree.
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"

cat >"$T/disk.sh" <<'SH'
#!/bin/bash
log=${0%.sh}.log
case "$1" in
    thread_model) echo parallel ;;
    get_size) echo 1073741824 ;;
    block_size) echo 512 65536 33554432 ;;
    can_cache) echo native ;;
    can_write) exit 0 ;;
    pread) echo "pread $3 $4" >>"$log"; head -c "$3" /dev/zero ;;
    pwrite) cat >/dev/null; echo "pwrite $3 $4" >>"$log" ;;
    cache) echo "cache $3 $4" >>"$log" ;;
    *) exit 2 ;;
esac
SH
chmod +x "$T/disk.sh"

rcounter () { awk -v k="gmblock-readahead.$2" '$1 == k { print $2 }' "$1"; }
expect () {     # expect STATS NAME VALUE
    local v; v=$(rcounter "$1" "$2")
    [[ $v == "$3" ]] || { cat "$1" >&2; fail "$(basename "$1"): $2 is ${v:-missing}, expected $3"; }
}

scenario () {
    local name=$1
    : >"$T/disk.log"
    start_server "$name" --filter=gmblock-readahead sh "$T/disk.sh" \
        ra-min=64K ra-max=1M ra-stats="$T/$name.stats"
    /usr/bin/python3 "$top/tests/readahead-calls.py" "$(uri "$name")" \
        "$T/disk.log" "$name" || { tail -n 30 "$T/disk.log" >&2; fail "$name"; }
    stop_server "$name"
}

scenario sequential
expect sequential.stats streams_detected 1
expect sequential.stats window_64K 1
expect sequential.stats window_128K 1
expect sequential.stats window_256K 1
expect sequential.stats window_512K 1
expect sequential.stats window_1024K 2
expect sequential.stats prefetch_bytes $((3 * 1048576 - 65536))
expect sequential.stats prefetch_errors 0
# The last 1M window is ahead of the reader when it stops: wasted; the
# rest was read.
expect sequential.stats useful_bytes $((2 * 1048576 - 65536))
expect sequential.stats wasted_bytes 1048576

scenario random
expect random.stats streams_detected 0
expect random.stats windows 0
expect random.stats queued_bytes 0

scenario interleaved
expect interleaved.stats streams_detected 2

scenario invalidate
expect invalidate.stats writes_invalidating 5
expect invalidate.stats invalidated_bytes $((5 * 65536))
expect invalidate.stats refills 5
