#!/bin/bash
# gmblock-cache: a client read whose data must come from below, when the
# read below fails, fails with EIO: it never returns zeros, or whatever
# the slot held before, and a failed fill leaves no block in the cache.
# nbdkit's error filter sits between the cache and the plugin and fails
# every read below (and only reads) while $T/trigger exists.
#  - writethrough, writeback: a miss is admitted, its fill fails (the
#    read fails at the first block that cannot be filled, after a hit
#    before it).  A resident block (and in writeback a dirty one) is
#    still served from the cache meanwhile.
#  - adaptive: a block read once bypasses the cache and is read below
#    together with the bypassed blocks after it, up to the next hit
#    (ops.c gathers the run): a read of a bypassed block then a
#    prefetched (resident) one must fail when the run's read below
#    fails, though the hit succeeded.
# After the trigger is gone every read returns the file's bytes, and
# the block whose fill failed is filled anew (a miss, not a hit): the
# counters at exit are checked exactly.  qemu-io, a second client,
# must see the same EIO.
. "$(dirname "$0")/functions.sh"
require nbdkit qemu-io
cd "$T"

blk=65536
for mode in writethrough writeback adaptive; do
    randfile "$T/$mode.img" $((16 * blk))
    cp "$T/$mode.img" "$T/$mode.orig"
    rm -f "$T/trigger"
    start_server "$mode" --filter=gmblock-cache --filter=error gmblock \
        file="$T/$mode.img" cache-mode=$mode cache-block-size=64K \
        cache-size=4M writeback-interval=3600 cache-stats="$T/$mode.stats" \
        error-pread-rate=100% error-file="$T/trigger"
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$mode")" "$T/trigger" \
              "$T/$mode.orig" "$mode" <<'PY'
import errno, nbd, os, sys
uri, trigger, orig, mode = sys.argv[1:]
blk = 64 * 1024
disk = bytearray(open(orig, "rb").read())
h = nbd.NBD()
h.connect_uri(uri)

def eio(what, f, *a):
    try:
        got = f(*a)
    except nbd.Error as e:
        if e.errnum != errno.EIO:
            sys.exit(f"{what}: failed with {e.errnum} ({e}), not EIO")
        return
    kind = ("zeros" if got == bytes(len(got)) else
            "the file's bytes" if got == disk[a[1]:a[1] + a[0]] else "other bytes")
    sys.exit(f"{what}: the read below failed, yet it returned {kind}")

def same(what, n, off):
    if h.pread(n, off) != disk[off:off + n]:
        sys.exit(f"{what}: the bytes differ from the file")

if mode != "adaptive":
    same("block 0, filled", blk, 0)
    if mode == "writeback":
        data = os.urandom(blk)
        h.pwrite(data, 3 * blk)          # dirty: the file does not have it
        disk[3 * blk:4 * blk] = data
    open(trigger, "w").close()
    same("block 0, resident, while reads below fail", blk, 0)
    if mode == "writeback":
        same("block 3, dirty, while reads below fail", blk, 3 * blk)
    eio("blocks 0-2 (block 1's fill fails after a hit)", h.pread, 3 * blk, 0)
    eio("block 1 again", h.pread, blk, blk)
    eio("a piece of block 5", h.pread, 4096, 5 * blk + 512)
    os.unlink(trigger)
    same("block 1 after the trigger", blk, blk)
    same("blocks 0-2 after the trigger", 3 * blk, 0)
    same("block 5 after the trigger", blk, 5 * blk)
else:
    for b in (5, 9):                     # resident: a prefetch admits
        h.aio_cache(blk, b * blk)
    while h.aio_in_flight() > 0:
        h.poll(-1)
    open(trigger, "w").close()
    same("block 5, prefetched, while reads below fail", blk, 5 * blk)
    # Blocks 3 and 4 bypass (read once), then block 5 hits: the run of
    # 3-4 is read below when the hit ends it.
    eio("blocks 3-5 (a bypassed run, then a hit)", h.pread, 3 * blk, 3 * blk)
    eio("a piece of block 8 (bypassed), then block 9 (a hit)", h.pread,
        2 * blk - 4096, 8 * blk + 4096)
    os.unlink(trigger)
    same("blocks 3-5 after the trigger", 3 * blk, 3 * blk)
    same("blocks 4-5 after the trigger", 2 * blk, 4 * blk)
    same("blocks 8-9 after the trigger", 2 * blk, 8 * blk)
h.shutdown()
open(orig, "wb").write(disk)
print("reads whose data must come from below fail with EIO, and read the file's bytes after")
PY
) || fail "cache-mode=$mode: $out"
    # A second client: qemu-io's read fails the same way.
    touch "$T/trigger"
    qemu-io -f raw -r -c "read $((7 * blk)) $blk" "$(uri "$mode")" >"$T/$mode.qio" 2>&1 || true
    grep -q 'read failed: Input/output error' "$T/$mode.qio" ||
        { cat "$T/$mode.qio" >&2; fail "cache-mode=$mode: qemu-io's read did not fail with EIO"; }
    rm -f "$T/trigger"
    qemu-io -f raw -r -c "read $((7 * blk)) $blk" "$(uri "$mode")" \
        >"$T/$mode.qio" 2>&1 || fail "cache-mode=$mode: qemu-io failed after the trigger"
    grep -q 'failed' "$T/$mode.qio" && { cat "$T/$mode.qio" >&2; fail "cache-mode=$mode: qemu-io's read failed after the trigger"; }
    stop_server "$mode"
    cmp "$T/$mode.img" "$T/$mode.orig" || fail "cache-mode=$mode: the file differs after shutdown"
    s=$T/$mode.stats
    got="hits=$(ccounter "$s" hits) misses=$(ccounter "$s" misses) fills=$(ccounter "$s" fills)"
    got+=" dirty_bytes=$(ccounter "$s" dirty_bytes) stale_fills=$(ccounter "$s" stale_fills)"
    # Hits and misses count block lookups; fills, blocks read into the
    # cache (a failed fill is not counted, and a block left behind by
    # one would be a hit after the trigger).
    case $mode in
        # nbdsh: 0 (miss, fill) | 0 hit; 0-2: 0 hit, 1 miss (fails); 1
        # miss; 5 miss | 1 miss, fill; 0 hit, 1 hit, 2 miss, fill; 5
        # miss, fill.  qemu-io: 7 miss (fails); 7 miss, fill.
        # writeback: 3 written (no lookup), then one hit.
        writethrough) want="hits=4 misses=9 fills=5" ;;
        writeback)    want="hits=5 misses=9 fills=5" ;;
        # adaptive: prefetch fills 5 and 9 (no lookups); 5 hit; 3 miss,
        # 4 miss (both bypass), 5 hit: the run fails; 8 miss (bypass), 9
        # hit: fails | 3, 4 miss (read before: fill), 5 hit; 4, 5 hit; 8
        # miss (fill), 9 hit.  qemu-io: 7 miss (bypass, fails); 7 miss
        # (another connection read it: fill).
        adaptive)     want="hits=7 misses=8 fills=6" ;;
    esac
    [[ $got == "$want dirty_bytes=0 stale_fills=0" ]] ||
        fail "cache-mode=$mode: counters $got, want $want dirty_bytes=0 stale_fills=0"
    info "cache-mode=$mode: $out; qemu-io saw EIO too; counters $got"
done
echo PASS
