#!/bin/bash
# gmblock-readahead: bad options are refused with a message naming the
# value and what is accepted; a layer below that cannot cache gets one
# warning (whatever the number of connections) naming the stack to use,
# and readahead stays off; with a caching layer below there is no
# warning and readahead is on; a plugin that serialises all requests,
# or per connection (under gmblock-cache), turns it off with a warning.
. "$(dirname "$0")/functions.sh"
require nbdkit nbdinfo
cd "$T"

ra=(--filter=gmblock-readahead memory 1M)
start_fails min_word 'ra-min=banana' 'power of two from 4K to 64M' -- "${ra[@]}" ra-min=banana
# Named twice, both instances would share one set of prefetch workers.
start_fails twice 'gmblock-readahead: --filter=gmblock-readahead is given twice' 'hold it once' \
    -- --filter=gmblock-readahead "${ra[@]}"
start_fails min_odd 'ra-min=3K' 'not a power of two' -- "${ra[@]}" ra-min=3K
start_fails min_small 'ra-min=2K' 'out of range' -- "${ra[@]}" ra-min=2K
start_fails max_big 'ra-max=128M' 'out of range.*64K to 64M' -- "${ra[@]}" ra-max=128M
start_fails max_small 'ra-max=32K' 'out of range' -- "${ra[@]}" ra-max=32K
start_fails min_gt_max 'ra-min=1M is larger than ra-max=256K' -- "${ra[@]}" ra-min=1M ra-max=256K
start_fails inflight_zero 'ra-max-inflight=0' 'whole number from 1 to 64' -- "${ra[@]}" ra-max-inflight=0
start_fails inflight_big 'ra-max-inflight=65' 'from 1 to 64' -- "${ra[@]}" ra-max-inflight=65
start_fails inflight_word 'ra-max-inflight=four' 'whole number' -- "${ra[@]}" ra-max-inflight=four
start_fails inflight_neg 'ra-max-inflight=-1' 'whole number' -- "${ra[@]}" ra-max-inflight=-1
start_fails inflight_hex 'ra-max-inflight=0x8' 'whole number' -- "${ra[@]}" ra-max-inflight=0x8
# Counts take what nbdkit's own number parsers take (and sizes here):
# blanks and a "+" before the digits (common/sizes.h, gm_parse_count).
start_server inflight_plus "${ra[@]}" ra-max-inflight=+3
stop_server inflight_plus

rcounter () { awk -v k="gmblock-readahead.$2" '$1 == k { print $2 }' "$1"; }
truncate -s 16M "$T/disk.img"

# serve NAME [args...]: start, connect three times, read a little
# sequentially, stop; leaves NAME.log and NAME.stats.
serve () {
    local name=$1; shift
    start_server "$name" "$@" ra-stats="$T/$name.stats"
    for i in 1 2 3; do
        nbdsh -u "$(uri "$name")" -c 'for o in range(0, 1 << 20, 65536): h.pread(65536, o)'
    done
    stop_server "$name"
}

serve direct --filter=gmblock-readahead gmblock file="$T/disk.img"
n=$(grep -c 'cannot cache' "$T/direct.log" || true)
[[ $n == 1 ]] || { cat "$T/direct.log" >&2; fail "direct: the missing-cache warning appeared $n times, expected once"; }
grep -q -- '--filter=gmblock-readahead --filter=gmblock-cache gmblock file=' "$T/direct.log" ||
    fail "direct: the warning does not give the stack to use"
[[ $(rcounter "$T/direct.stats" active) == 0 ]] || fail "direct: readahead is active over a layer that cannot cache"
[[ $(rcounter "$T/direct.stats" windows) == 0 ]] || fail "direct: windows were queued"
info "direct: warned once: $(grep -m1 'cannot cache' "$T/direct.log")"

serve cached --filter=gmblock-readahead --filter=gmblock-cache gmblock file="$T/disk.img"
if grep -q 'cannot cache' "$T/cached.log"; then fail "cached: warned although gmblock-cache caches"; fi
[[ $(rcounter "$T/cached.stats" active) == 1 ]] || fail "cached: readahead is not active"
[[ $(rcounter "$T/cached.stats" streams_detected) -ge 1 ]] || fail "cached: no stream detected"

serve pagecache --filter=gmblock-readahead gmblock file="$T/disk.img" direct=false
if grep -q 'cannot cache' "$T/pagecache.log"; then fail "pagecache: warned although direct=false caches"; fi
[[ $(rcounter "$T/pagecache.stats" active) == 1 ]] || fail "pagecache: readahead is not active"

# A plugin that serialises all requests: prefetch would block clients.
cat >"$T/serial.sh" <<'SH'
#!/bin/bash
case "$1" in
    get_size) echo 1048576 ;;
    can_cache) echo native ;;
    pread) head -c "$3" /dev/zero ;;
    cache) ;;
    *) exit 2 ;;
esac
SH
chmod +x "$T/serial.sh"
serve serial --filter=gmblock-readahead sh "$T/serial.sh"
grep -q 'serialises all requests' "$T/serial.log" || fail "serial: no warning"
[[ $(rcounter "$T/serial.stats" active) == 0 ]] || fail "serial: readahead is active"
info "serial: $(grep -m1 'serialises' "$T/serial.log")"

# One that serialises per connection, under gmblock-cache: the cache
# sends every call below through one lock, so prefetch fills held up
# client reads on other connections (a 50 ms read: 115 ms median
# beside a sequential reader without readahead, 510 ms with it).
sed -i 's/^case "$1" in$/&\n    thread_model) echo serialize_requests ;;/' "$T/serial.sh"
serve perconn --filter=gmblock-readahead --filter=gmblock-cache sh "$T/serial.sh"
grep -q 'serialises requests (gmblock-cache below then serialises them all)' "$T/perconn.log" ||
    { cat "$T/perconn.log" >&2; fail "perconn: no warning"; }
[[ $(rcounter "$T/perconn.stats" active) == 0 ]] || fail "perconn: readahead is active"
info "perconn: $(grep -m1 'serialises' "$T/perconn.log")"

# A cache block larger than ra-max: windows would be cut to ra-max and
# prefetch little: a warning says to raise ra-max.
serve bigblock --filter=gmblock-readahead --filter=gmblock-cache gmblock \
    file="$T/disk.img" cache-block-size=4M
grep -q 'larger than ra-max=2M' "$T/bigblock.log" ||
    { cat "$T/bigblock.log" >&2; fail "bigblock: no warning about ra-max"; }
serve bigblock_ok --filter=gmblock-readahead --filter=gmblock-cache gmblock \
    file="$T/disk.img" cache-block-size=4M ra-max=4M
! grep -q 'larger than ra-max' "$T/bigblock_ok.log" || fail "bigblock_ok: a warning with ra-max=4M"
info "bigblock: $(grep -m1 'larger than ra-max' "$T/bigblock.log")"
