#!/usr/bin/python3
# Compare a device or file with the model stress.py --dump wrote.
# SPDX-License-Identifier: BSD-3-Clause
#   cmpdump.py PREFIX FILE
# FILE (the backing device of the export stress.py drove in external
# mode, read after the server stopped) must hold at PREFIX.json's offset
# what PREFIX.data says, byte for byte where PREFIX.mask says EXACT (0),
# the same or zero where it says OLD_OR_ZERO (1, trimmed), anything
# where it says ANY (2, a write that failed).  Exit 0 if it does, 1
# with the first wrong byte if not.
import json, os, sys

EXACT, OLD_OR_ZERO, ANY = 0, 1, 2
M = 1024 * 1024
_ANY_T = bytes(0xff if v == ANY else 0 for v in range(256))
_OZ_T = bytes(0xff if v == OLD_OR_ZERO else 0 for v in range(256))
_ZERO_T = bytes([0xff]) + bytes(255)


def first_bad(got, want, mask):
    """As stress.py's: the first index breaking the model, or -1."""
    if got == want:
        return -1
    g = int.from_bytes(got, "big")
    allowed = int.from_bytes(mask.translate(_ANY_T), "big") | (
        int.from_bytes(mask.translate(_OZ_T), "big")
        & int.from_bytes(got.translate(_ZERO_T), "big"))
    bad = (g ^ int.from_bytes(want, "big")) & ~allowed
    return -1 if not bad else len(got) - 1 - (bad.bit_length() - 1) // 8


def main():
    prefix, path = sys.argv[1], sys.argv[2]
    meta = json.load(open(prefix + ".json"))
    data = open(prefix + ".data", "rb").read()
    mask = open(prefix + ".mask", "rb").read()
    off, size = meta["offset"], meta["size"]
    if len(data) != size or len(mask) != size:
        sys.exit(f"{prefix}: model of {len(data)} bytes, mask {len(mask)}, size {size}")
    fd = os.open(path, os.O_RDONLY)
    counts = [mask.count(v) for v in (EXACT, OLD_OR_ZERO, ANY)]
    for o in range(0, size, M):
        got = os.pread(fd, min(M, size - o), off + o)
        if len(got) != min(M, size - o):
            print(f"{path}: short read at {off + o}")
            return 1
        i = first_bad(got, data[o:o + M], mask[o:o + M])
        if i >= 0:
            print(f"WRONG DATA on {path} (seed {meta['seed']}): byte {off + o + i} "
                  f"(model byte {o + i}) got {got[i]:#04x} want {data[o + i]:#04x} "
                  f"mask {mask[o + i]}")
            return 1
    print(f"{path} [{off},{off + size}) matches the model of seed {meta['seed']} "
          f"(exact {counts[0]}, trimmed {counts[1]}, unknown {counts[2]} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
