#!/bin/bash
# gmblock-cache makes a difference: with nbdkit's delay filter below the
# cache (every read below costs RDELAY), a repeated read is fast in the
# caching modes and slow in bypass mode.  In adaptive mode a hot set
# read twice survives a full sequential scan by another connection;
# plain 2Q admission (read mode) loses it, as LRU would.
. "$(dirname "$0")/functions.sh"
cd "$T"

M=1048576
truncate -s $((16 * M)) "$T/disk.img"
randfile "$T/disk.img" $((16 * M))
ccounter () { awk -v k="gmblock-cache.$2" '$1 == k { print $2 }' "$1"; }

# repeat NAME: prints "FIRST SECOND" seconds for reading the same 1 MiB twice.
repeat () {
    /usr/bin/python3 - "$(uri "$1")" <<'PY'
import sys, time, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1])
t = []
for i in range(2):
    t0 = time.monotonic(); d = h.pread(1 << 20, 3 << 20); t.append(time.monotonic() - t0)
    if i == 0: first = d
    elif d != first: sys.exit("second read returned different data")
print(f"{t[0]:.3f} {t[1]:.3f}")
PY
}

for mode in read writeback adaptive bypass; do
    start_server "$mode" --filter=gmblock-cache --filter=delay \
        gmblock file="$T/disk.img" rdelay=300ms cache-mode=$mode cache-size=16M \
        cache-block-size=1M cache-stats="$T/$mode.stats"
    read -r t1 t2 < <(repeat "$mode")
    stop_server "$mode"
    info "$mode: first read ${t1}s, second ${t2}s"
    awk -v t="$t1" 'BEGIN { exit !(t >= 0.3) }' || fail "$mode: the first read did not go below (${t1}s)"
    if [[ $mode == bypass ]]; then
        awk -v t="$t2" 'BEGIN { exit !(t >= 0.3) }' || fail "bypass: the second read was fast (${t2}s): something cached"
    elif [[ $mode == adaptive ]]; then
        # Adaptive admits on the second read: that one is a fill.
        [[ $(ccounter "$T/$mode.stats" admit_repeat) -ge 1 ]] || fail "adaptive: repeated read not admitted"
    else
        # Counters, not the time: a hit can be slow on a loaded machine
        # (0.308 s was seen), a miss never beats the delay.
        [[ $(ccounter "$T/$mode.stats" hits) -ge 1 ]] || fail "$mode: no hits counted"
        [[ $(ccounter "$T/$mode.stats" fill_bytes) == "$M" ]] ||
            fail "$mode: the second read went below: $(ccounter "$T/$mode.stats" fill_bytes) bytes filled, expected $M"
    fi
done

# hotscan NAME: read a hot set of 8 blocks twice on one connection, scan
# the whole export on another, then time re-reading the hot set.
hotscan () {
    /usr/bin/python3 - "$(uri "$1")" <<'PY'
import sys, time, nbd
hot = nbd.NBD(); hot.connect_uri(sys.argv[1])
scan = nbd.NBD(); scan.connect_uri(sys.argv[1])
blocks = [3, 17, 40, 41, 100, 150, 200, 230]
want = {}
for rnd in range(2):
    for b in blocks:
        want[b] = hot.pread(4096, b * 65536 + 8192)
size = scan.get_size()
for off in range(0, size, 256 * 1024):
    scan.pread(256 * 1024, off)
t0 = time.monotonic()
for b in blocks:
    if hot.pread(4096, b * 65536 + 8192) != want[b]:
        sys.exit("hot block changed")
print(f"{time.monotonic() - t0:.3f}")
PY
}

for mode in adaptive read; do
    name=hot_$mode
    start_server "$name" --filter=gmblock-cache --filter=delay \
        gmblock file="$T/disk.img" rdelay=40ms cache-mode=$mode cache-size=2M \
        adaptive-scan=1M cache-stats="$T/$name.stats"
    t=$(hotscan "$name")
    stop_server "$name"
    info "$mode: hot set re-read after a full scan took ${t}s (8 misses would take >= 0.32s); $(ccounter "$T/$name.stats" nonscan_hit_ratio) non-scan hit ratio, $(ccounter "$T/$name.stats" bypass_bytes) bytes bypassed"
    if [[ $mode == adaptive ]]; then
        awk -v t="$t" 'BEGIN { exit !(t < 0.16) }' || fail "adaptive: the hot set did not survive the scan (${t}s)"
    else
        awk -v t="$t" 'BEGIN { exit !(t >= 0.1) }' || fail "read: expected the scan to flush (part of) the hot set (${t}s): the test cannot tell"
    fi
done
