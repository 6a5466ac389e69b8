#!/bin/bash
# gmblock-cache: many connections racing on the same cache blocks
# (tests/cache-race.py): six owners write, zero, trim, flush and
# prefetch byte ranges of their own that share blocks with the others'
# (unaligned, not strict), each reading its range back after every
# acknowledged write, while four more connections read, prefetch and
# flush anywhere.  A tiny cache (16 slots of 4K) makes fills, dirty
# evictions and write-backs race with every operation; nbdkit's delay
# filter below widens the windows and its error filter fails some
# writes, zeros and trims below.  In every caching mode.  In write-back
# mode (and with stripes) also kill -9 on a flush reply while the others
# go on: what was acknowledged before the flush must be on the disk.
# An odd export size puts a short block at the end.  RACE_SECONDS sets
# how long each run lasts (3 s).
. "$(dirname "$0")/functions.sh"
cd "$T"

size=$((4 * 1024 * 1024 + 1536))
slow="delay-read=1ms delay-write=2ms delay-zero=2ms delay-trim=2ms"
fails="error-pwrite-rate=5% error-zero-rate=5% error-trim-rate=5%"
secs=${RACE_SECONDS:-3}
seed=$RANDOM
info "seed $seed"

# race NAME kill|run FILTER... -- [options...]
race () {
    local name=$1 how=$2 filters=() out; shift 2
    while [[ $1 != -- ]]; do filters+=("--filter=$1"); shift; done
    shift
    randfile "$T/$name.img" $size
    start_server "$name" --filter=gmblock-cache "${filters[@]}" gmblock \
        file="$T/$name.img" cache-size=64K cache-block-size=4K "$@"
    out=$(timeout $((secs + 120)) /usr/bin/python3 "$top/tests/cache-race.py" \
        "$(uri "$name")" "$T/$name.img" "$T/$name.pid" "$secs" "$seed" "$how" 2>&1) ||
        { cat "$T/$name.log" >&2; fail "$name: $out"; }
    if [[ $how == kill ]]; then
        wait "$(server_pid "$name")" 2>/dev/null || true
        eval "_pid_$name="
    else
        stop_server "$name"     # status 1 is fine: write-backs may have failed
    fi
    info "$name: $out"
}

for mode in read writethrough adaptive writeback; do
    race "$mode" run error delay -- cache-mode=$mode $fails $slow
done
race back run error delay -- cache-mode=adaptive adaptive-writes=back $fails $slow
race stripe run gmblock-stripe error delay -- cache-mode=writeback \
    stripe-chunk=4K stripe-data-disks=3 stripe-parity=1 writeback-hold=1 \
    $fails $slow
# Durability: no delay filter here (it gives up its sleeps when nbdkit
# is told to stop); failing write-backs (error filter) only make the
# flush fail, and it is sent again.  A cache that holds every range
# with the flusher asleep (only flushes and FUA write back), then a
# tiny one (evictions and the flusher race with the flush).
race wbkill kill error -- cache-mode=writeback cache-size=16M \
    writeback-interval=3600 $fails
race wbkill2 kill error -- cache-mode=writeback cache-size=128K $fails
race stripekill kill gmblock-stripe error -- cache-mode=writeback \
    cache-size=16M writeback-interval=3600 stripe-chunk=4K \
    stripe-data-disks=3 stripe-parity=1 $fails
