#!/usr/bin/python3
# gmblock-cache tests: a random sequence of reads, writes, trims, zeros
# (with and without MAY_TRIM and FUA), flushes and prefetches, aligned
# and not, sent alternately over two connections to the cached export
# and in the same order to a reference export (nbdkit memory), with
# the touched range compared byte for byte after every step and the
# whole export every 50 steps.
#   cache-ops.py CACHE_URI REF_URI SEED STEPS [OUT]
# OUT: the final contents are written there (to compare with the
# backing file after the server has stopped).
import random
import sys

import nbd

uri, ref_uri, seed, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
out = sys.argv[5] if len(sys.argv) > 5 else None
rng = random.Random(seed)
K, M = 1024, 1024 * 1024


def connect(u):
    h = nbd.NBD()
    h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
    h.connect_uri(u)
    return h


a, b, ref = connect(uri), connect(uri), connect(ref_uri)
size = a.get_size()
assert ref.get_size() == size, "reference size differs"
can_fua = a.can_fua()
can_cache = a.can_cache()      # bypass over O_DIRECT honestly says no
fails = []


def read_all(h, off, n):
    parts = []
    while n > 0:
        c = min(n, 8 * M)
        parts.append(h.pread(c, off))
        off += c
        n -= c
    return b"".join(parts)


def compare(what, off, n):
    h = rng.choice((a, b))
    got, want = read_all(h, off, n), read_all(ref, off, n)
    if got != want:
        i = next(i for i in range(n) if got[i] != want[i])
        fails.append(f"{what}: first difference at byte {off + i} "
                     f"(got {got[i]:#x}, want {want[i]:#x})")
        print("FAIL", fails[-1], flush=True)
        sys.exit(1)


def rand_range():
    kind = rng.random()
    if kind < 0.3:                      # small, unaligned
        n = rng.randint(1, 9000)
        off = rng.randrange(0, size - n + 1)
    elif kind < 0.6:                    # aligned 4K multiples
        n = 4 * K * rng.randint(1, 32)
        off = 4 * K * rng.randrange(0, (size - n) // (4 * K) + 1)
    elif kind < 0.9:                    # larger, crossing many blocks
        n = rng.randint(1, 3 * M)
        off = rng.randrange(0, size - n + 1)
    else:                               # at the end of the export
        n = rng.randint(1, 200 * K)
        off = size - n
    return off, n


# Same start on both sides.
init = rng.randbytes(size)
for off in range(0, size, 8 * M):
    a.pwrite(init[off:off + 8 * M], off)
    ref.pwrite(init[off:off + 8 * M], off)
a.flush()
compare("initial contents", 0, size)

for step in range(steps):
    h = a if step % 2 == 0 else b
    op = rng.random()
    off, n = rand_range()
    fua = nbd.CMD_FLAG_FUA if can_fua and rng.random() < 0.2 else 0
    if op < 0.35:
        what = f"step {step}: pread {off}+{n}"
        compare(what, off, n)
        continue
    if op < 0.70:
        what = f"step {step}: pwrite {off}+{n} fua={bool(fua)}"
        data = rng.randbytes(n)
        h.pwrite(data, off, fua)
        ref.pwrite(data, off)
    elif op < 0.78:
        what = f"step {step}: trim {off}+{n}"
        h.trim(n, off, fua)
        ref.trim(n, off)
    elif op < 0.88:
        flags = fua | (nbd.CMD_FLAG_NO_HOLE if rng.random() < 0.5 else 0)
        what = f"step {step}: zero {off}+{n} flags={flags}"
        h.zero(n, off, flags)
        ref.zero(n, off)
    elif op < 0.94:
        what = f"step {step}: flush"
        h.flush()
    else:
        what = f"step {step}: cache {off}+{n}"
        if can_cache:
            h.cache(n, off)
    lo = max(0, off - 128 * K)
    hi = min(size, off + n + 128 * K)
    compare(what, lo, hi - lo)
    if step % 50 == 49:
        compare(f"after step {step}: whole export", 0, size)

a.flush()
compare("end: whole export", 0, size)
if out:
    with open(out, "wb") as f:
        f.write(read_all(ref, 0, size))
for h in (a, b, ref):
    h.shutdown()
print(f"{steps} steps, seed {seed}: cached export equals the reference")
