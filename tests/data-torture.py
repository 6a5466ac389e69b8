#!/usr/bin/python3
# gmblock tests: concurrent unaligned writers sharing blocks.
#   data-torture.py URI OFFSET LENGTH [WRITERS [PASSES [SEED]]]
# OFFSET may be negative: counted from the end of the export.
#
# [OFFSET, OFFSET+LENGTH) is cut into chunks of 1 to 300 bytes; chunk i
# belongs to writer i % WRITERS, so every 512- or 4096-byte block holds
# bytes of every writer.  Each writer has its own connection and, in
# each pass, writes all its chunks with fresh random data in random
# order, up to 16 requests in flight (some with FUA), then reads them
# all back.  Only the owner ever writes a chunk, so its contents are
# always known: any lost update (a read-modify-write of a shared block
# that wrote back stale bytes of another writer) shows as a mismatch.
# At the end the whole range, and 64 KiB either side, is checked.
import random
import sys
import threading

import nbd

uri = sys.argv[1]
offset, length = int(sys.argv[2]), int(sys.argv[3])
writers = int(sys.argv[4]) if len(sys.argv) > 4 else 4
passes = int(sys.argv[5]) if len(sys.argv) > 5 else 30
seed = int(sys.argv[6]) if len(sys.argv) > 6 else 1
DEPTH = 16


def connect():
    h = nbd.NBD()
    h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
    h.connect_uri(uri)
    return h


main = connect()
size = main.get_size()
if offset < 0:
    offset += size
assert 0 <= offset and offset + length <= size, "range outside the export"
ctx_lo = max(0, offset - 65536)
ctx_hi = min(size, offset + length + 65536)
before = main.pread(ctx_hi - ctx_lo, ctx_lo)

rng = random.Random(seed)
chunks = []                             # (offset, length)
pos = offset
while pos < offset + length:
    n = min(rng.randrange(1, 301), offset + length - pos)
    chunks.append((pos, n))
    pos += n

final = {}                              # chunk index -> last data written
errors = []
lock = threading.Lock()


class Flight:
    """Commands in flight on one handle; a failed one raises nbd.Error."""

    def __init__(self, h):
        self.h, self.cookies = h, []

    def wait(self, limit):
        while len(self.cookies) > limit:
            self.h.poll(-1)
            self.cookies = [c for c in self.cookies
                            if not self.h.aio_command_completed(c)]


def writer(k):
    try:
        h = connect()
        fl = Flight(h)
        r = random.Random(seed * 1000 + k)
        mine = [i for i in range(len(chunks)) if i % writers == k]
        for p in range(passes):
            data = {i: r.randbytes(chunks[i][1]) for i in mine}
            order = mine[:]
            r.shuffle(order)
            for i in order:
                fl.wait(DEPTH - 1)
                off, _ = chunks[i]
                fl.cookies.append(h.aio_pwrite(
                    data[i], off,
                    flags=nbd.CMD_FLAG_FUA if r.random() < 0.05 else 0))
            fl.wait(0)
            # Read back all of mine.
            bufs = {}
            for i in order:
                fl.wait(DEPTH - 1)
                off, n = chunks[i]
                bufs[i] = nbd.Buffer(n)
                fl.cookies.append(h.aio_pread(bufs[i], off))
            fl.wait(0)
            for i in mine:
                got = bufs[i].to_bytearray()
                if got != data[i]:
                    with lock:
                        errors.append(f"writer {k} pass {p}: chunk at "
                                      f"{chunks[i][0]}+{chunks[i][1]} lost "
                                      f"its data")
                    return
        for i in mine:
            final[i] = data[i]
        h.shutdown()
    except Exception as e:                       # noqa: BLE001
        with lock:
            errors.append(f"writer {k}: {e}")


threads = [threading.Thread(target=writer, args=(k,)) for k in range(writers)]
for t in threads:
    t.start()
for t in threads:
    t.join()

if not errors:
    got = main.pread(ctx_hi - ctx_lo, ctx_lo)
    want = bytearray(before)
    for i, (off, n) in enumerate(chunks):
        want[off - ctx_lo:off - ctx_lo + n] = final[i]
    if got != want:
        bad = [i for i in range(len(want)) if got[i] != want[i]]
        errors.append(f"final check: {len(bad)} bytes differ, first at "
                      f"{ctx_lo + bad[0]}")
main.shutdown()

if errors:
    print("\n".join(errors[:20]), file=sys.stderr)
    sys.exit(1)
print(f"ok: {writers} writers x {passes} passes over {length} bytes at "
      f"{offset} ({len(chunks)} chunks, "
      f"{writers and len(chunks) * passes} writes)")
