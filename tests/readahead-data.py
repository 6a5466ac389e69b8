#!/usr/bin/python3
# gmblock-readahead data correctness with concurrent writers.
#   readahead-data.py URI SEED SECONDS
# The script reads the export once as the model, then runs, on
# separate connections:
#   - 3 sequential readers at QD1 with mixed request sizes, each
#     scanning the export, so the filter prefetches ahead of them;
#   - 1 reader at QD8 (out-of-order completion) scanning as well;
#   - 2 writers that write, zero or trim 4K..256K just ahead of a
#     reader, inside ranges that are being prefetched.
# Every 64K region has a lock: a writer holds it while its change is in
# flight and until the model is updated; a reader holds it while its
# read is in flight and compares the bytes with the model.  Prefetch is
# not locked: it races with the writes, which is the point.  At the
# end the whole export is read again and compared.
import random
import sys
import threading
import time

import nbd

uri, seed, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
K, M = 1024, 1024 * 1024
REGION = 64 * K


def connect():
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


main = connect()
size = main.get_size()
model = bytearray(main.pread(size, 0) if size <= 64 * M else b"")
if len(model) != size:
    sys.exit("export too large for the model")
locks = [threading.Lock() for _ in range((size + REGION - 1) // REGION)]
positions = [0, 0, 0, 0]         # where each reader is
errors = []
stop = time.monotonic() + seconds
bytes_read = [0]
writes = [0]


def lock_range(off, n):
    ls = locks[off // REGION:(off + n - 1) // REGION + 1]
    for lk in ls:
        lk.acquire()
    return ls


def unlock(ls):
    for lk in reversed(ls):
        lk.release()


def check(off, data, who):
    if data != model[off:off + len(data)]:
        for i in range(len(data)):
            if data[i] != model[off + i]:
                errors.append(f"{who}: byte {off + i} is {data[i]}, expected {model[off + i]}")
                return


def reader(idx, rng):
    h = connect()
    off = rng.randrange(size // (4 * K)) * 4 * K
    while time.monotonic() < stop and not errors:
        n = rng.choice([4 * K, 16 * K, 64 * K, 128 * K])
        n = min(n, size - off)
        ls = lock_range(off, n)
        try:
            data = h.pread(n, off)
            check(off, data, f"reader {idx}")
        finally:
            unlock(ls)
        bytes_read[0] += n
        off = (off + n) % size
        positions[idx] = off
    h.shutdown()


def reader_qd(idx, rng):
    """QD8: 8 reads of 16K in flight, completing in any order."""
    h = connect()
    off = 0
    while time.monotonic() < stop and not errors:
        span = min(8 * 16 * K, size - off)
        ls = lock_range(off, span)
        batch = []
        for o in range(off, off + span, 16 * K):
            buf = nbd.Buffer(min(16 * K, off + span - o))
            batch.append((h.aio_pread(buf, o), buf, o))
        for cookie, buf, o in batch:
            while not h.aio_command_completed(cookie):
                h.poll(-1)
            data = buf.to_bytearray()
            check(o, data, f"reader {idx} (QD8)")
            bytes_read[0] += len(data)
        unlock(ls)
        off = (off + span) % size
        positions[idx] = off
    h.shutdown()


def writer(idx, rng):
    h = connect()
    while time.monotonic() < stop and not errors:
        ahead = positions[rng.randrange(len(positions))]
        off = (ahead + rng.randrange(2 * M)) % size // 4096 * 4096
        n = min(rng.choice([4 * K, 16 * K, 64 * K, 256 * K]), size - off)
        op = rng.choice(["write", "write", "zero", "trim"])
        ls = lock_range(off, n)
        try:
            if op == "write":
                data = bytes([rng.randrange(1, 256)]) * 7 + rng.randbytes(n - 7)
                h.pwrite(data, off)
                model[off:off + n] = data
            elif op == "zero":
                h.zero(n, off)
                model[off:off + n] = bytes(n)
            else:
                # Trim contents are unspecified: follow with a write so
                # the model stays exact (the trim still invalidates).
                h.trim(n, off)
                data = rng.randbytes(n)
                h.pwrite(data, off)
                model[off:off + n] = data
        finally:
            unlock(ls)
        writes[0] += 1
        time.sleep(rng.random() * 0.002)
    h.shutdown()


rng = random.Random(seed)
threads = [threading.Thread(target=reader, args=(i, random.Random(rng.random()))) for i in range(3)]
threads.append(threading.Thread(target=reader_qd, args=(3, random.Random(rng.random()))))
threads += [threading.Thread(target=writer, args=(i, random.Random(rng.random()))) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if errors:
    sys.exit("\n".join(errors[:5]))
final = main.pread(size, 0) if size <= 32 * M else b"".join(
    main.pread(min(32 * M, size - o), o) for o in range(0, size, 32 * M))
if final != model:
    sys.exit("the export differs from the model at the end")
print(f"ok: {bytes_read[0] // M} MiB read, {writes[0]} writes/zeroes/trims, no mismatch")
