"""A power failure, simulated exactly with dm-log-writes.

dm-log-writes logs a write to its log device only once it is on stable
storage: a plain write when a later flush covers it, a FUA write when it
completes (see the kernel's drivers/md/dm-log-writes.c). So the log,
replayed up to a mark, is what a disk that lost power at the mark holds.
A kill -9 cannot show that: the page cache, and a disk's volatile cache,
survive a process.

    python3 -S powerfail.py client SOCKET OP DEVICE STATE
        writes 32 blocks of 4K (each acknowledged before the next is
        sent), then does OP: fua (a FUA write), fuazero (a FUA zero),
        flush, fua-other (the FUA write on a second connection),
        flushes (four at once on four connections; the first answered
        marks), none.
        Right after OP's reply it marks the log of dm device DEVICE
        "pf-done". Then 4 more plain writes (acknowledged after OP, so
        OP need not cover them). What was written goes to STATE.

    python3 -S powerfail.py check LOGDEV STATE EXPECT
        replays LOGDEV up to the mark "pf-done" and checks the blocks:
        EXPECT=covered: every write acknowledged before OP was sent, and
        OP's own block, must be there; EXPECT=lost (the control, OP
        none): not one of them may be (nothing made them durable).

Run with -S (no site import: under TCG that alone costs about 1 s).
"""
import json
import os
import random
import struct
import subprocess
import sys
sys.path.append("/usr/lib/python3/dist-packages")
import nbd

BLOCK = 4096
SLOTS = 2048            # blocks used: the first 8 MiB of the export
MARK = "pf-done"
FLUSH, FUA, DISCARD, MARKED = 1, 2, 4, 8
MAGIC = 0x6a736677736872


def mark(device):
    subprocess.run(["dmsetup", "message", device, "0", "mark", MARK],
                   check=True)


def client(sock, op, device, state):
    rng = random.Random(op)
    slots = rng.sample(range(SLOTS), 40)
    h = nbd.NBD()
    h.connect_unix(sock)
    other = None
    if op == "fua-other":
        other = nbd.NBD()
        other.connect_unix(sock)
    before, after, own = [], [], None
    for s in slots[:32]:
        data = rng.randbytes(BLOCK)
        h.pwrite(data, s * BLOCK)
        before.append((s * BLOCK, data.hex()))
    s = slots[32]
    if op in ("fua", "fua-other"):
        data = rng.randbytes(BLOCK)
        (other or h).pwrite(data, s * BLOCK, nbd.CMD_FLAG_FUA)
        own = (s * BLOCK, data.hex())
    elif op == "fuazero":
        h.zero(BLOCK, s * BLOCK, nbd.CMD_FLAG_FUA)
        own = (s * BLOCK, bytes(BLOCK).hex())
    elif op == "flush":
        h.flush()
    elif op == "flushes":
        # Four flushes at once, on four connections: whichever is
        # answered first (it may share another's fdatasync) marks.
        import threading
        hs = [h] + [nbd.NBD() for _ in range(3)]
        for x in hs[1:]:
            x.connect_unix(sock)
        first = threading.Lock()

        def flush(x):
            x.flush()
            if first.acquire(blocking=False):
                mark(device)
        ts = [threading.Thread(target=flush, args=(x,)) for x in hs]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    elif op != "none":
        sys.exit("unknown OP " + op)
    if op != "flushes":
        mark(device)
    for s in slots[33:37]:
        data = rng.randbytes(BLOCK)
        h.pwrite(data, s * BLOCK)
        after.append((s * BLOCK, data.hex()))
    with open(state, "w") as f:
        json.dump({"op": op, "before": before, "own": own, "after": after}, f)
    # No shutdown: the server is killed next, as by a power failure.


def replay(logdev):
    """The first SLOTS blocks of the device as the log has them at the
    mark (zero where the log wrote nothing; a discard reads as zero)."""
    img = bytearray(SLOTS * BLOCK)
    with open(logdev, "rb") as f:
        magic, version, entries, ssize = struct.unpack("<QQQI", f.read(28))
        if magic != MAGIC or version != 1:
            sys.exit("%s: not a dm-log-writes log" % logdev)
        pos = ssize
        for _ in range(entries):
            f.seek(pos)
            sector, count, flags, dlen = struct.unpack("<QQQQ", f.read(32))
            pos += ssize
            if flags & MARKED:
                if f.read(dlen).decode() == MARK:
                    return img
                continue
            start, length = sector * ssize, count * ssize
            if flags & DISCARD:
                data = bytes(length)
            else:
                f.seek(pos)
                data = f.read(length)
                pos += length
            end = min(start + length, len(img))
            if start < end:
                img[start:end] = data[:end - start]
    sys.exit("%s: no mark %s in %d entries" % (logdev, MARK, entries))


def check(logdev, state, expect):
    with open(state) as f:
        st = json.load(f)
    img = replay(logdev)
    want = st["before"] + ([st["own"]] if st["own"] else [])
    there = [off for off, hexdata in want
             if img[off:off + BLOCK] == bytes.fromhex(hexdata)]
    print("%s: %d of %d blocks acknowledged before it are in the log at "
          "the mark" % (st["op"], len(there), len(want)))
    if expect == "covered" and len(there) != len(want):
        missing = sorted(set(off for off, _ in want) - set(there))
        sys.exit("%s: lost at a power failure after its reply: %d "
                 "acknowledged blocks, at %s" %
                 (st["op"], len(missing), ", ".join(map(str, missing[:6]))))
    if expect == "lost" and there:
        sys.exit("control: %d unflushed blocks found in the log: the "
                 "replay does not show what a power failure loses" % len(there))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "client":
        client(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "check":
        check(*sys.argv[2:])
    else:
        sys.exit(__doc__)
