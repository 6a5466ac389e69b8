#!/bin/bash
# A disk that returns EIO on a known range, served by gmblock:
#   nbdkit --filter=error sh <RAM disk with a bad range>   (the "disk")
#   -> nbdfuse -> losetup --direct-io=on -> gmblock direct=true
# Reads touching the bad range get an NBD EIO error, exactly at the
# loop device's block granularity (probed block by block around both
# edges); everything else keeps working (reads, writes, zero, flush,
# many requests in parallel); the server never crashes or hangs (each
# client call has a timeout); at exit no pool buffer is in use and the
# errors counter is > 0.  The error filter's trigger file also makes
# the whole disk fail for a while: the server must recover when it is
# removed.  Page-cache mode (direct=false) on the same disk: reads of
# the bad range fail with EIO there too.
# (The error filter has no per-range knob; the exact bad range comes
# from a tiny sh plugin under it.)
. "$(dirname "$0")/functions.sh"
require nbdfuse fusermount3 losetup nbdcopy
[[ -c /dev/fuse ]] || skip "no /dev/fuse"

size=$((16 * 1024 * 1024))
badlo=$((5 * 1024 * 1024 + 12 * 1024 + 512))    # not 4K-aligned: the
badhi=$((5 * 1024 * 1024 + 20 * 1024 - 512))    # granularity shows

shm=$T/shm                      # the disk lives in RAM
mkdir "$shm"
mount -t tmpfs -o size=64M none "$shm" || skip "cannot mount a tmpfs"
track_mount "$shm"
randfile "$shm/back.img" $size
cp "$shm/back.img" "$T/orig.img"

cat >"$T/disk.sh" <<'SH'
#!/bin/bash
# nbdkit sh plugin: the file $BACK with a bad range [BADLO, BADHI):
# reads and writes touching it fail with EIO.
case $1 in
    get_size) stat -c %s "$BACK" ;;
    can_write|can_flush|can_multi_conn) exit 0 ;;
    thread_model) echo parallel ;;
    flush) sync "$BACK" ;;
    pread)
        if (( $4 < BADHI && $4 + $3 > BADLO )); then
            echo "EIO bad sectors: read at $4 length $3" >&2; exit 1
        fi
        dd if="$BACK" bs=64K iflag=skip_bytes,count_bytes skip="$4" \
           count="$3" status=none ;;
    pwrite)
        if (( $4 < BADHI && $4 + $3 > BADLO )); then
            cat >/dev/null
            echo "EIO bad sectors: write at $4 length $3" >&2; exit 1
        fi
        dd of="$BACK" bs=64K iflag=fullblock oflag=seek_bytes seek="$4" \
           conv=notrunc status=none ;;
    *) exit 2 ;;
esac
SH
chmod +x "$T/disk.sh"

# The system nbdkit, never with the sanitizer preload (it would follow
# into bash and dd).
BACK=$shm/back.img BADLO=$badlo BADHI=$badhi NBDKIT=/usr/bin/nbdkit \
    start_server disk --filter=error sh "$T/disk.sh" \
    error=EIO error-pread-rate=100% error-pread-file="$T/trigger"

mkdir "$T/mnt"
nbdfuse -C 1 -P "$T/fuse.pid" "$T/mnt/disk" "$(uri disk)" >"$T/fuse.log" 2>&1 &
track_pid $!
track_mount "$T/mnt"
for i in $(seq 100); do [[ -s $T/fuse.pid ]] && break; sleep 0.1; done
[[ $(stat -c %s "$T/mnt/disk" 2>/dev/null) == "$size" ]] ||
    { cat "$T/fuse.log"; fail "nbdfuse did not come up"; }

loopdev "$T/mnt/disk" --direct-io=on
dev=${LOOP#/dev/}
[[ $(cat /sys/block/$dev/loop/dio) == 1 ]] ||
    fail "the loop device is not in direct I/O mode (the page cache would widen errors)"
lbs=$(cat /sys/block/$dev/queue/logical_block_size)
info "disk: $LOOP over FUSE, logical block $lbs, bad range [$badlo, $badhi)"

# The disk itself, below gmblock: the blocks just outside read fine.
ddblk () { dd if="$LOOP" of=/dev/null bs=$lbs skip=$(($1 / lbs)) count=1 iflag=direct status=none 2>/dev/null; }
ddblk $((badlo - lbs)) || fail "the disk fails before the bad range"
ddblk $badlo && fail "the disk reads its bad range"
ddblk $((badhi - lbs)) && fail "the disk reads its bad range"
ddblk $badhi || fail "the disk fails after the bad range"

start_server g gmblock file="$LOOP" direct=true stats="$T/stats"

/usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri g)" "$T/orig.img" \
    $badlo $badhi $lbs "$T/trigger" "$T/expect.img" <<'PY'
import random
uri, orig = sys.argv[1], bytearray(open(sys.argv[2], "rb").read())
lo, hi, lbs = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
trigger, expect_file = sys.argv[6], sys.argv[7]
size = len(orig)
EIO = (errno.EIO,)
h = connect(uri)
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)   # send unaligned too

def good(n, off):
    if expect_ok(h, "pread", n, off) != orig[off:off + n]:
        die("pread(%d, %d): wrong data" % (n, off))

def bad(n, off):
    expect_err(h, "pread", n, off, errnos=EIO)

# 1. Block-by-block probe around both edges: exactly the bad blocks fail.
win = 16 * lbs
failed = []
for off in range(lo - win, hi + win, lbs):
    try:
        data = call(h, "pread", lbs, off)
        if data != orig[off:off + lbs]:
            die("block at %d: wrong data" % off)
    except nbd.Error as e:
        if e.errnum != errno.EIO:
            die("block at %d: errno %d, expected EIO" % (off, e.errnum))
        failed.append(off)
want = list(range(lo - lo % lbs, hi, lbs))
print("--- failing %d-byte blocks: [%d, %d), %d blocks; bad range [%d, %d)" %
      (lbs, failed[0] if failed else -1, failed[-1] + lbs if failed else -1,
       len(failed), lo, hi))
if failed != want:
    die("failing blocks %s, expected exactly %s" % (failed, want))
print("--- granularity: %d bytes (the loop device's logical block)" % lbs)

# 2. Larger and unaligned reads at the edges.
good(4096, lo - 4096); good(100, lo - 100); good(4096, hi); good(10, hi + 1)
bad(101, lo - 100); bad(2, hi - 1); bad(1, lo); bad(1, hi - 1)
bad(1 << 20, lo - (1 << 19)); bad(hi - lo, lo); bad(8 << 20, 4 << 20)
good(lo, 0) if lo <= (32 << 20) else None

# 3. Every other byte reads correctly, in large requests.
for a, b in ((0, lo), (hi, size)):
    for off in range(a, b, 1 << 20):
        good(min(1 << 20, b - off), off)

# 4. Many requests in flight at once, bad and good mixed.
bufs = []
for i in range(24):
    off = lo - 2048 if i % 3 == 0 else random.randrange(0, lo - 65536)
    n = 4096 if i % 3 == 0 else 65536
    buf = nbd.Buffer(n)
    bufs.append((h.aio_pread(buf, off), buf, off, n, i % 3 == 0))
deadline = time.monotonic() + TIMEOUT
pending = list(bufs)
while pending:
    if time.monotonic() > deadline:
        die("parallel reads: no reply within %gs" % TIMEOUT)
    h.poll(1000)
    for item in list(pending):
        cookie, buf, off, n, isbad = item
        try:
            if not h.aio_command_completed(cookie):
                continue
            if isbad:
                die("parallel bad read at %d succeeded" % off)
            if bytes(buf.to_bytearray()) != orig[off:off + n]:
                die("parallel read at %d: wrong data" % off)
        except nbd.Error as e:
            if not isbad or e.errnum != errno.EIO:
                die("parallel read at %d: %s" % (off, e.string))
        pending.remove(item)
print("--- 24 parallel reads (8 bad) answered correctly")

# 5. Writes elsewhere work, right up to the edges; writes into the bad
#    range fail (aligned: the disk refuses; unaligned: the read of
#    read-modify-write fails).
def write(data, off):
    expect_ok(h, "pwrite", data, off)
    orig[off:off + len(data)] = data
for off, n in ((1 << 20, 65536), (lo - 4096, 4096), (hi, 4096),
               (lo - 1000, 1000), (hi + 7, 333), (size - 4096, 4096)):
    write(os.urandom(n), off)
expect_ok(h, "pwrite", os.urandom(4096), 8 << 20, flags=nbd.CMD_FLAG_FUA)
orig[8 << 20:(8 << 20) + 4096] = call(h, "pread", 4096, 8 << 20)
expect_err(h, "pwrite", os.urandom(lbs), lo - lo % lbs, errnos=EIO)
expect_err(h, "pwrite", b"x" * 10, lo + 3, errnos=EIO)
expect_err(h, "pwrite", os.urandom(8192), lo - 4096, errnos=EIO)
expect_ok(h, "zero", 65536, 2 << 20)
orig[2 << 20:(2 << 20) + 65536] = bytes(65536)
expect_ok(h, "flush")
for a, b in ((0, lo), (hi, size)):
    for off in range(a, b, 1 << 20):
        good(min(1 << 20, b - off), off)
bad(lbs, lo - lo % lbs)

# 6. The error filter's trigger: the whole disk fails, then recovers.
open(trigger, "w").close()
expect_err(h, "pread", 4096, 0, errnos=EIO)
expect_err(h, "pread", 65536, 12 << 20, errnos=EIO)
os.unlink(trigger)
good(4096, 0); good(65536, 12 << 20)
print("--- recovered after the whole disk failed")
h.shutdown()
open(expect_file, "wb").write(orig)
PY

# A real client over the whole disk: nbdcopy must fail (not hang), and
# the server must still serve afterwards.  One request at a time:
# nbdkit 1.32.5 itself aborts (connections.c:402 raw_send_socket:
# Assertion `sock >= 0') when a client hangs up with several replies
# still to send, as nbdcopy does on its first error; nbdkit's own file
# plugin under --filter=error does the same.
# (Its status kept here: after "if ...; fi" $? is the if's own, 0.)
rc=0
timeout 60 nbdcopy --connections=1 --threads=1 --requests=1 \
    "$(uri g)" "$T/copy.img" 2>"$T/nbdcopy.err" || rc=$?
[[ $rc != 0 ]] || fail "nbdcopy of a disk with a bad range succeeded"
[[ $rc != 124 ]] || fail "nbdcopy hung"
grep -qi "input/output error" "$T/nbdcopy.err" ||
    { cat "$T/nbdcopy.err"; fail "nbdcopy did not report EIO"; }
info "nbdcopy: $(head -n1 "$T/nbdcopy.err")"
kill -0 "$(server_pid g)" || fail "gmblock died"
grep -q "gmblock: $LOOP: pread at offset [0-9]* length [0-9]*: Input/output error" "$T/g.log" ||
    { cat "$T/g.log"; fail "no gmblock: error message for the failed reads"; }

stop_server g
[[ $(counter "$T/stats" pool_in_use) == 0 ]] || fail "pool buffers leaked: $(counter "$T/stats" pool_in_use) in use"
errors=$(counter "$T/stats" errors)
[[ $errors -gt 0 ]] || fail "errors counter is $errors"
info "stats: errors $errors, pool_in_use 0, pool_gets $(counter "$T/stats" pool_gets)"

# Page-cache mode (direct=false) reads through another path: its read
# errors must reach the client as EIO too, not as a success with
# whatever the buffer held.
start_server pc gmblock file="$LOOP" direct=false
/usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri pc)" "$T/expect.img" \
    $badlo $badhi $lbs <<'PY'
uri, want = sys.argv[1], open(sys.argv[2], "rb").read()
lo, hi, lbs = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
h = connect(uri)
for n, off in ((lbs, lo - lo % lbs), (hi - lo, lo), (1 << 20, lo - (1 << 19))):
    expect_err(h, "pread", n, off, errnos=(errno.EIO,))
for n, off in ((65536, 0), (65536, 12 << 20)):
    if expect_ok(h, "pread", n, off) != want[off:off + n]:
        die("direct=false: pread(%d, %d): wrong data" % (n, off))
print("--- direct=false: reads of the bad range fail with EIO, others succeed")
h.shutdown()
PY
stop_server pc

# What reached the disk: all the writes, nothing else.
loopdev_detach "$LOOP"
fusermount3 -u "$T/mnt"
stop_server disk
cmp <(head -c $badlo "$shm/back.img") <(head -c $badlo "$T/expect.img") ||
    fail "the disk before the bad range differs from what was written"
cmp <(tail -c +$((badhi + 1)) "$shm/back.img") <(tail -c +$((badhi + 1)) "$T/expect.img") ||
    fail "the disk after the bad range differs from what was written"
cmp <(head -c $badhi "$shm/back.img" | tail -c +$((badlo + 1))) \
    <(head -c $badhi "$T/orig.img" | tail -c +$((badlo + 1))) ||
    fail "the bad range was written to"
