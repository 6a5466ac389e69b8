#!/bin/bash
# gmblock-cache: a block that a reader brings into the cache while a
# zero of it is still running below holds the old contents, and the
# zero must drop it when it finishes; else every later read is served
# the stale data from the cache.  Made deterministic with nbdkit's delay
# filter under the cache (each zero below takes 2 s): connection 1
# zeroes a block that is not cached; while that waits below, connection
# 2 reads the block (filled from below, old data); once the zero is
# acknowledged, a read on either connection must see zeros.  In every
# caching mode; the block is read twice after, so the second read is a
# cache hit if the stale block was kept.
. "$(dirname "$0")/functions.sh"
require cmp

size=$((4 * 1024 * 1024))
for mode in writethrough read writeback; do
    randfile "$T/disk.img" $size
    start_server "$mode" --filter=gmblock-cache --filter=delay gmblock \
        file="$T/disk.img" cache-mode=$mode delay-zero=2000ms
    timeout 60 /usr/bin/python3 - "$(uri "$mode")" "$T/disk.img" <<'PY' ||
import nbd, sys, time
uri, disk = sys.argv[1], sys.argv[2]
h1 = nbd.NBD(); h1.connect_uri(uri)
h2 = nbd.NBD(); h2.connect_uri(uri)
blk, n = 1 << 20, 256 * 1024            # inside one cache block at most
old = open(disk, "rb").read()[blk:blk + n]
assert old != bytes(n)

cookie = h1.aio_zero(n, blk)            # waits 2 s below the cache
time.sleep(0.2)
if h1.aio_command_completed(cookie):
    sys.exit("FAIL: the zero finished at once: the delay filter is not below")
during = h2.pread(n, blk)               # fills the block from below
if during != old:
    print("note: the read during the zero did not see the old data")
if h1.aio_command_completed(cookie):
    sys.exit("FAIL: the zero finished before the racing read: no race made")
deadline = time.monotonic() + 20
while not h1.aio_command_completed(cookie):
    if time.monotonic() > deadline:
        sys.exit("FAIL: the zero did not finish")
    h1.poll(1000)
bad = []
for name, h in (("connection 2", h2), ("connection 1", h1),
                ("connection 2 again", h2)):
    if h.pread(n, blk) != bytes(n):
        bad.append(name)
if bad:
    sys.exit("FAIL: after the zero was acknowledged, reads on %s still see "
             "the old data (stale cached block)" % ", ".join(bad))
h1.flush()
PY
        fail "cache-mode=$mode: stale data after a zero raced with a read"
    stop_server "$mode"
    cmp -s -n $((256 * 1024)) -i $((1 << 20)):0 "$T/disk.img" /dev/zero ||
        fail "cache-mode=$mode: the zero did not reach the disk"
    info "cache-mode=$mode: a block read in during a zero is dropped when it ends"
done
