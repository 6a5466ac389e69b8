#!/bin/bash
# Server killed (SIGKILL) with writes in flight: what was acknowledged
# before a flush (or with FUA) must be intact after a restart, including
# bytes sharing a block with an unaligned write that was in flight (a
# read-modify-write must not put back stale bytes); the region written
# in flight holds, sector by sector, either the old or the new data,
# never anything else.  direct=true and direct=false.  A kill cannot
# lose what the kernel took, so this checks that acknowledgements come
# after the write reached the kernel, not the flush's or FUA's sync:
# test-fua, test-fua-covers and test-fault-writeback check those (a
# test audit finding: the header claimed more).
. "$(dirname "$0")/functions.sh"

size=$((48 * 1024 * 1024))
randfile "$T/disk.img" $size
cp "$T/disk.img" "$T/orig.img"

for d in true false; do
    start_server k_$d gmblock file="$T/disk.img" direct=$d
    pid=$(server_pid k_$d)
    /usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri k_$d)" "$T/orig.img" \
        "$pid" "$T/expect.img" "$T/new.img" <<'PY'
import signal
uri, orig = sys.argv[1], bytearray(open(sys.argv[2], "rb").read())
pid, expect_file, new_file = int(sys.argv[3]), sys.argv[4], sys.argv[5]
M = 1 << 20
h = connect(uri)
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
# 1. Flushed: 8 MiB in 1 MiB writes, plus unaligned bits, then flush.
expect = bytearray(orig)
def w(data, off, **kw):
    expect_ok(h, "pwrite", data, off, **kw)
    expect[off:off + len(data)] = data
for off in range(0, 8 * M, M):
    w(os.urandom(M), off)
w(os.urandom(1000), 8 * M + 100)
w(os.urandom(3), 9 * M - 1)
expect_ok(h, "flush")
# 2. FUA, no flush.
w(os.urandom(65536), 10 * M, flags=nbd.CMD_FLAG_FUA)
w(os.urandom(777), 11 * M + 5, flags=nbd.CMD_FLAG_FUA)
# 3. In flight when the server dies: 32 MiB of writes to [12M, 44M),
#    and unaligned writes sharing blocks with the flushed bytes.
new = bytearray(expect)
inflight = []
def aw(data, off):
    buf = nbd.Buffer.from_bytearray(bytearray(data))
    inflight.append((h.aio_pwrite(buf, off), buf))
    new[off:off + len(data)] = data
aw(os.urandom(50), 8 * M + 1100)          # same block as flushed bytes
aw(os.urandom(90), 8 * M + 10)
aw(os.urandom(100), 11 * M + 800)         # next to the FUA bytes
for off in range(12 * M, 44 * M, 256 * 1024):
    aw(os.urandom(256 * 1024), off)
# Kill once a few of them have completed: the server is busy writing.
deadline = time.monotonic() + TIMEOUT
completed = 0
while completed < 12:
    if time.monotonic() > deadline:
        die("writes do not complete")
    h.poll(100)
    for item in list(inflight):
        if h.aio_command_completed(item[0]):
            inflight.remove(item)
            completed += 1
os.kill(pid, signal.SIGKILL)
print("--- killed the server after %d writes completed, %d in flight"
      % (completed, len(inflight)))
open(expect_file, "wb").write(expect)
open(new_file, "wb").write(new)
PY
    # The server must be gone (killed, not exited cleanly).
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$pid" 2>/dev/null && fail "direct=$d: server survived SIGKILL"
    wait "$pid" 2>/dev/null || true
    eval "_pid_k_$d="

    start_server r_$d gmblock file="$T/disk.img" direct=$d
    nbdcopy "$(uri r_$d)" "$T/after.img"
    stop_server r_$d
    cmp "$T/after.img" "$T/disk.img" || fail "direct=$d: the export differs from the file"
    /usr/bin/python3 - "$T/after.img" "$T/expect.img" "$T/new.img" "$d" <<'PY'
import sys
after, expect, new = (open(f, "rb").read() for f in sys.argv[1:4])
M = 1 << 20
def die(m):
    print("FAIL: direct=%s: %s" % (sys.argv[4], m), file=sys.stderr); sys.exit(1)
# Flushed and FUA data: exactly as written (the in-flight writes near
# them may or may not have landed: compare around them).
for lo, hi in ((0, 8 * M + 10), (8 * M + 100, 8 * M + 1100), (9 * M - 1, 9 * M + 2),
               (10 * M, 10 * M + 65536), (11 * M + 5, 11 * M + 782)):
    if after[lo:hi] != expect[lo:hi]:
        bad = next(i for i in range(lo, hi) if after[i] != expect[i])
        die("flushed/FUA data lost or corrupted at byte %d" % bad)
# Everything else: each sector is the old or the new data.
landed = lost = 0
for off in range(0, len(after), 512):
    a, e, n = (x[off:off + 512] for x in (after, expect, new))
    if a == n and n != e:
        landed += 1
    elif a == e and n != e:
        lost += 1
    elif a != e and a != n:
        die("sector at %d is neither the old nor the new data" % off)
print("--- direct=%s: flushed data intact; in-flight sectors: %d landed, %d not"
      % (sys.argv[4], landed, lost))
PY
    cp "$T/disk.img" "$T/orig.img"
done
