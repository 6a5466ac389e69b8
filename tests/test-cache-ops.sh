#!/bin/bash
# gmblock-cache: a random sequence of reads, writes, trims, zeros,
# flushes and prefetches over two connections, compared after every
# step with the same sequence on a reference export (nbdkit memory), in
# every mode, with a cache small enough to evict constantly (and with a
# bigger one).  After a clean shutdown the backing file must equal the
# reference: the shutdown write-back works.  Negative control: one byte
# changed in the backing file is caught.
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"

SIZE=$((24 * 1048576 + 12345))          # not a multiple of any block size
ccounter () { awk -v k="gmblock-cache.$2" '$1 == k { print $2 }' "$1"; }

run () {
    local name=$1 seed=$2; shift 2
    truncate -s 0 "$T/$name.img"; truncate -s $SIZE "$T/$name.img"
    start_server "${name}_ref" memory $SIZE
    start_server "$name" --filter=gmblock-cache gmblock file="$T/$name.img" \
        cache-stats="$T/$name.stats" "$@"
    /usr/bin/python3 "$top/tests/cache-ops.py" "$(uri "$name")" "$(uri "${name}_ref")" \
        "$seed" 300 "$T/$name.want" || fail "$name: the cached export differs from the reference"
    stop_server "$name"
    stop_server "${name}_ref"
    cmp "$T/$name.img" "$T/$name.want" || fail "$name: backing file differs from the reference after shutdown"
    [[ $(ccounter "$T/$name.stats" errors) == 0 ]] || fail "$name: errors counted"
    info "$name: ok ($(ccounter "$T/$name.stats" hits) hits, $(ccounter "$T/$name.stats" misses) misses, $(ccounter "$T/$name.stats" writebacks) write-backs, $(ccounter "$T/$name.stats" invalidations) invalidations)"
}

small=(cache-size=1M cache-block-size=16K adaptive-scan=256K)
run bypass 1 cache-mode=bypass
run read 2 cache-mode=read "${small[@]}"
run wt 3 cache-mode=writethrough "${small[@]}"
run wb 4 cache-mode=writeback "${small[@]}"
run unsafe 5 cache-mode=unsafe "${small[@]}"
run adaptive 6 cache-mode=adaptive "${small[@]}"
run adback 7 cache-mode=adaptive adaptive-writes=back "${small[@]}"
run wb_big 8 cache-mode=writeback cache-size=64M
run read_4k 9 cache-mode=read cache-size=256K cache-block-size=4K

# The caching modes really cached and wrote back.
[[ $(ccounter "$T/read.stats" hits) -gt 0 ]] || fail "read: no hits"
[[ $(ccounter "$T/wb.stats" writebacks) -gt 0 ]] || fail "wb: no write-backs"
[[ $(ccounter "$T/wb_big.stats" evictions) == 0 ]] || fail "wb_big: evicted although everything fits"

# Negative control: the comparison notices one changed byte.
printf '\x5a' | dd of="$T/wb.img" bs=1 seek=4097 conv=notrunc status=none
if cmp -s "$T/wb.img" "$T/wb.want"; then
    printf '\xa5' | dd of="$T/wb.img" bs=1 seek=4097 conv=notrunc status=none
    cmp -s "$T/wb.img" "$T/wb.want" && fail "negative control: a changed byte was not noticed"
fi
info "negative control: a changed byte is noticed"

# A trim that the layer below ignores (discard=ignore) over blocks dirty
# in the cache: a read may see zeros or the newest data, never the older
# data the disk still holds.
for mode in writeback unsafe "adaptive adaptive-writes=back"; do
    truncate -s 0 "$T/trim.img"; truncate -s 4M "$T/trim.img"
    # shellcheck disable=SC2086
    start_server trim --filter=gmblock-cache gmblock file="$T/trim.img" \
        discard=ignore writeback-interval=3600 cache-mode=$mode
    /usr/bin/python3 - "$(uri trim)" "$mode" <<'PY' || fail "trim over dirty blocks ($mode)"
import sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(b"A" * 1048576, 0)
h.flush()
h.pwrite(b"B" * 1048576, 0)      # acknowledged, dirty in the cache
h.trim(1048576, 0)
seen = set(h.pread(1048576, 0))
if seen - {0, ord("B")}:
    sys.exit("%s: after the trim the read returns %s: older data" %
             (sys.argv[2], sorted(seen)))
PY
    wait_idle trim
    stop_server trim
done
info "a trim ignored below never brings back older data"
