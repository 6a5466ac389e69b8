#!/usr/bin/python3
# gmblock-cache tests: many connections racing on shared cache blocks.
#   cache-race.py URI DISK PIDFILE SECONDS SEED [kill]
# The last 3 MiB of the export are cut into ranges of 1 byte to 70K,
# owned round-robin by OWNERS threads, so that most cache blocks hold
# ranges of several owners.  Each owner writes, zeroes, trims, flushes
# and prefetches its own ranges over two connections of its own (not
# strict: unaligned), and after every acknowledged write or zero reads
# the range back through one of them: nobody else changes those bytes,
# so anything else is stale data.  READERS threads meanwhile read,
# prefetch (NBD_CMD_CACHE) and flush anywhere, to make fills race with
# the writes.  A failed write or zero (error filter) and a trim leave
# their range unknown until the next write.
# With "kill": after SECONDS, one more connection flushes (until a
# flush succeeds) while the others go on, and the server is killed
# with SIGKILL as soon as it replies.  Every byte on the disk must then
# be the value of the last write acknowledged before that flush was
# sent, or of a later write of its range.
import os
import random
import signal
import sys
import threading
import time

import nbd

uri, disk, pidfile = sys.argv[1], sys.argv[2], sys.argv[3]
secs, seed = float(sys.argv[4]), int(sys.argv[5])
kill = len(sys.argv) > 6 and sys.argv[6] == "kill"
OWNERS, READERS = 6, 4
K, M = 1024, 1024 * 1024


def connect():
    h = nbd.NBD()
    h.set_strict_mode(0)
    h.connect_uri(uri)
    return h


main = connect()
size = main.get_size()
init = open(disk, "rb").read()
assert len(init) == size
rng = random.Random(seed)
lo = max(0, size - 3 * M)
ranges = []                     # (offset, length, owner)
off = lo
while off < size:
    n = min(rng.choice((rng.randint(1, 5000), rng.randint(1, 70 * K),
                        64 * K, 4 * K)), size - off)
    ranges.append((off, n, len(ranges) % OWNERS))
    off += n
# Per range, every operation: (sent, answered, ok, data); data None for
# a trim (anything may be read after it).  A failed one may have
# reached the disk in part, or not at all.
hist = [[(0.0, 0.0, True, init[o:o + n])] for (o, n, _) in ranges]
lock = threading.Lock()
stop = False
errors = []


def owner(me):
    r = random.Random(seed * 100 + me)
    hs = [connect(), connect()]
    mine = [k for k, x in enumerate(ranges) if x[2] == me]
    while not stop and not errors:
        k = r.choice(mine)
        o, n, _ = ranges[k]
        h = r.choice(hs)
        op = r.random()
        sent = time.monotonic()
        try:
            if op < 0.55:
                data = r.randbytes(n)
                h.pwrite(data, o, nbd.CMD_FLAG_FUA if r.random() < 0.1 else 0)
            elif op < 0.75:
                data = bytes(n)
                flags = nbd.CMD_FLAG_NO_HOLE if r.random() < 0.5 else 0
                if r.random() < 0.1:
                    flags |= nbd.CMD_FLAG_FUA
                h.zero(n, o, flags)
            elif op < 0.8:
                data = None
                h.trim(n, o)
            elif op < 0.9:
                h.flush()
                continue
            else:
                h.cache(n, o)
                continue
        except nbd.Error as e:
            if op < 0.8:
                with lock:
                    hist[k].append((sent, time.monotonic(), False, data))
            elif op >= 0.9:             # a prefetch: nothing fails it below
                errors.append(f"owner {me}: prefetch {o}+{n} failed: {e}")
            continue
        with lock:
            hist[k].append((sent, time.monotonic(), True, data))
        if data is None:
            continue
        got = r.choice(hs).pread(n, o)
        if got != data:
            j = next(j for j in range(n) if got[j] != data[j])
            errors.append(f"owner {me}: {o}+{n} read after its write was "
                          f"acknowledged differs at byte {o + j} "
                          f"(got {got[j]:#x}, want {data[j]:#x}): stale data")


def reader(me):
    r = random.Random(seed * 1000 + me)
    h = connect()
    while not stop and not errors:
        o = r.randrange(lo, size)
        n = min(r.choice((512, 4 * K, 64 * K, 200 * K, M)), size - o)
        op = r.random()
        try:
            if op < 0.7:
                h.pread(n, o)
            elif op < 0.9:
                h.cache(n, o)
            else:
                h.flush()
        except nbd.Error as e:
            # Flushes may fail (write-backs fail below); reads and
            # prefetches never do: nothing fails them below.
            if op < 0.9:
                errors.append(f"reader {me}: {'read' if op < 0.7 else 'prefetch'}"
                              f" {o}+{n} failed: {e}")


def guarded(f):
    def run(i):
        try:
            f(i)
        except Exception as e:          # a hang-up, a crash of the server
            errors.append(f"{f.__name__} {i}: {e!r}")
    return run


threads = [threading.Thread(target=guarded(owner), args=(i,))
           for i in range(OWNERS)]
threads += [threading.Thread(target=guarded(reader), args=(i,))
            for i in range(READERS)]
for t in threads:
    t.start()
end = time.monotonic() + secs
while time.monotonic() < end and not errors:
    time.sleep(0.1)

if not kill:
    stop = True
    for t in threads:
        t.join()
    if errors:
        sys.exit("FAIL: " + "\n".join(errors[:5]))
    for k, (o, n, _) in enumerate(ranges):
        _, _, ok, want = hist[k][-1]
        if ok and want is not None and main.pread(n, o) != want:
            sys.exit(f"FAIL: {o}+{n}: the final read differs from the last write")
    writes = sum(len(x) - 1 for x in hist)
    print(f"{writes} writes, zeros and trims on {len(ranges)} ranges, no stale read")
    sys.exit(0)

for attempt in range(50):
    flush_sent = time.monotonic()
    try:
        main.flush()
        break
    except nbd.Error:                   # a write-back failed: try again
        pass
else:
    sys.exit("FAIL: 50 flushes failed in a row")
os.kill(int(open(pidfile).read()), signal.SIGKILL)
killed = time.monotonic()
stop = True
for t in threads:
    t.join()
errors = [e for e in errors if "owner" in e and "stale" in e]
if errors:
    sys.exit("FAIL: " + "\n".join(errors[:5]))
got = open(disk, "rb").read()
checked = 0
for k, (o, n, _) in enumerate(ranges):
    h = hist[k]
    base = max(i for i, (s, a, ok, d) in enumerate(h) if a < flush_sent)
    later = [x for x in h[base:] if x[0] < killed]
    if not h[base][2] or any(d is None for (s, a, ok, d) in later):
        continue                        # failed before the flush, or trimmed
    allowed = [d for (s, a, ok, d) in later]
    for j in range(n):
        if all(got[o + j] != d[j] for d in allowed):
            sys.exit(f"FAIL: byte {o + j} on the disk after a flush and "
                     f"kill -9 is {got[o + j]:#x}: neither the write "
                     f"acknowledged before the flush nor a later one")
    checked += 1
print(f"kill -9 on a flush reply: {checked} of {len(ranges)} ranges checked, "
      "every one holds what was acknowledged before the flush (or newer)")
