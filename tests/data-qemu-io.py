#!/usr/bin/python3
# gmblock tests: qemu-io write patterns at unaligned offsets and lengths.
#   data-qemu-io.py URI REFERENCE SEED
# REFERENCE holds what the export holds now.  Writes patterns (and a
# few write-zeroes) at offsets and lengths that start and end inside
# 512- and 4096-byte blocks, cross block boundaries and touch the last
# bytes of the export, each followed by a read -P of the same range;
# applies every write to REFERENCE the same way.  Exits 1 if qemu-io
# reports an error or a pattern mismatch.  The caller then compares the
# whole export with REFERENCE.
import os
import random
import subprocess
import sys

uri, ref, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
size = os.path.getsize(ref)
rng = random.Random(seed)
M = 1024 * 1024

ops = []                                # (offset, length, pattern or None)
fixed = [(1, 1), (511, 2), (513, 100), (1023, 1026), (4095, 2), (4097, 4000),
         (0, 1), (8191, 8194), (3 * 4096 - 7, 8192 + 14), (M + 333, 70000),
         (2 * M - 1, 1), (size - 1, 1), (size - 3, 3), (size - 5000, 4999),
         (size - 4097, 4097), (size // 2 + 17, 131072 + 5)]
for off, n in fixed:
    ops.append((off, n, rng.randrange(1, 256)))
for _ in range(40):
    n = rng.choice([1, 2, 7, 100, 511, 512, 513, 4095, 4096, 4097,
                    rng.randrange(1, 200000)])
    off = rng.randrange(0, size - n + 1)
    if rng.random() < 0.3:
        off = off // 512 * 512 + rng.choice([0, 1, 255, 511])
        off = min(off, size - n)
    pat = None if rng.random() < 0.15 else rng.randrange(1, 256)
    ops.append((off, n, pat))

args = ["qemu-io", "-f", "raw"]
with open(ref, "r+b") as f:
    for off, n, pat in ops:
        assert 0 <= off and off + n <= size
        if pat is None:
            args += ["-c", f"write -z {off} {n}", "-c", f"read -P 0 {off} {n}"]
            data = bytes(n)
        else:
            args += ["-c", f"write -P {pat} {off} {n}",
                     "-c", f"read -P {pat} {off} {n}"]
            data = bytes([pat]) * n
        f.seek(off)
        f.write(data)
args.append(uri)

p = subprocess.run(args, capture_output=True, text=True)
out = p.stdout + p.stderr
bad = [l for l in out.splitlines()
       if "fail" in l.lower() or "error" in l.lower() or "mismatch" in l.lower()]
writes = sum(1 for l in out.splitlines() if l.startswith("wrote "))
reads = sum(1 for l in out.splitlines() if l.startswith("read "))
if p.returncode != 0 or bad or writes != len(ops) or reads != len(ops):
    print(out, file=sys.stderr)
    print(f"qemu-io: exit {p.returncode}, {writes}/{len(ops)} writes, "
          f"{reads}/{len(ops)} reads, problems: {bad}", file=sys.stderr)
    sys.exit(1)
print(f"{len(ops)} writes and pattern reads ok")
