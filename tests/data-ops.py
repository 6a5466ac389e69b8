#!/usr/bin/python3
# gmblock tests: flush, FUA, trim, zero, fast zero and extents through
# libnbd, checked byte for byte against a model of the export.
#   data-ops.py URI OUT KEY=VALUE...
# Keys:
#   trim=zero|advisory|keep   what a trimmed range reads back as: zeros
#                             (a file: punch hole), unspecified (a device:
#                             only bytes outside the range are checked),
#                             or unchanged (discard=ignore)
#   fast_no_hole=ok|enotsup   FAST_ZERO|NO_HOLE succeeds or fails ENOTSUP
#   fast_trim=ok|enotsup      FAST_ZERO alone (MAY_TRIM) likewise
#   holes=yes|no              trimmed and may-trim-zeroed aligned ranges
#                             show as holes in base:allocation (a file
#                             with discard=unmap), or everything is data;
#             |any            or no check of where the holes are
# Unaligned requests are sent as they are (libnbd's alignment check is
# off), so they reach the plugin's read-modify-write path.  At the end
# the whole export is compared with the model, which is written to OUT
# for the caller to compare with the backing store.
import random
import sys

import nbd

uri, out = sys.argv[1], sys.argv[2]
opt = dict(a.split("=", 1) for a in sys.argv[3:])
rng = random.Random(7)
K, M = 1024, 1024 * 1024

h = nbd.NBD()
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(uri)
size = h.get_size()
MAXREQ = min(h.get_block_size(nbd.SIZE_MAXIMUM) or 32 * M, 32 * M)


def pread_all(off, n):
    parts = []
    while n > 0:
        c = min(n, MAXREQ)
        parts.append(h.pread(c, off))
        off += c
        n -= c
    return b"".join(parts)


model = bytearray(pread_all(0, size))
errors = []


def check(what, off=0, n=None):
    """Compare [off, off+n) of the export with the model."""
    n = size - off if n is None else n
    got = pread_all(off, n)
    want = bytes(model[off:off + n])
    if got != want:
        i = next(i for i in range(n) if got[i] != want[i])
        errors.append(f"{what}: first difference at byte {off + i} "
                      f"(got {got[i]:#x}, want {want[i]:#x})")
        model[off:off + n] = got     # resync so later checks stay useful
        return False
    return True


def near(off, n):
    """Check a range and 8 KiB either side of it."""
    lo = max(0, off - 8 * K)
    hi = min(size, off + n + 8 * K)
    return lo, hi - lo


def expect_errno(what, name, fn):
    try:
        fn()
    except nbd.Error as e:
        if e.errno != name:
            errors.append(f"{what}: failed with {e.errno} ({e}), "
                          f"expected {name}")
        return
    errors.append(f"{what}: succeeded, expected {name}")


def extents(off, n):
    """base:allocation over [off, off+n) as merged [(start, end, flags)]."""
    ext = []
    pos, end = off, off + n
    while pos < end:
        got = []

        def cb(meta, start, entries, err):
            if meta == nbd.CONTEXT_BASE_ALLOCATION:
                got.extend(entries)
        h.block_status(end - pos, pos, cb)
        if not got:
            raise RuntimeError(f"no extents at {pos}")
        for i in range(0, len(got), 2):
            ln, fl = got[i], got[i + 1]
            ln = min(ln, end - pos)
            if ext and ext[-1][2] == fl and ext[-1][1] == pos:
                ext[-1] = (ext[-1][0], pos + ln, fl)
            else:
                ext.append((pos, pos + ln, fl))
            pos += ln
            if pos >= end:
                break
    return ext


def flags_at(ext, off, n):
    """Set of flags covering [off, off+n)."""
    return {fl for s, e, fl in ext if s < off + n and e > off}


# --- flush
h.flush()

# --- writes, unaligned, with and without FUA, then flush
writes = [(1, 1), (511, 2), (513, 1000), (4095, 2), (4097, 4000),
          (3 * 4096 - 5, 12000), (M - 1, 3), (size - 1, 1),
          (size - 4097, 4097), (5 * M + 77, 300 * K)]
for i, (off, n) in enumerate(writes):
    data = rng.randbytes(n)
    h.pwrite(data, off, flags=nbd.CMD_FLAG_FUA if i % 2 else 0)
    model[off:off + n] = data
    check(f"pwrite{' FUA' if i % 2 else ''} at {off}+{n}", *near(off, n))
h.flush()

# --- zero: may-trim (default), NO_HOLE, FUA; aligned and unaligned
zeros = [(M, M, 0), (2 * M + 1, 4096, 0), (3 * M + 511, 10000, nbd.CMD_FLAG_NO_HOLE),
         (4 * M - 1, 2, nbd.CMD_FLAG_NO_HOLE), (4 * M + 4095, 5 * 4096 + 3,
                                                nbd.CMD_FLAG_FUA),
         (6 * M, 2 * M, nbd.CMD_FLAG_NO_HOLE | nbd.CMD_FLAG_FUA),
         (size - 3000, 3000, 0), (9 * M + 100, 100, 0)]
for off, n, fl in zeros:
    h.zero(n, off, flags=fl)
    model[off:off + n] = bytes(n)
    check(f"zero flags {fl} at {off}+{n}", *near(off, n))

# --- fast zero
for key, fl in (("fast_no_hole", nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE),
                ("fast_trim", nbd.CMD_FLAG_FAST_ZERO)):
    want = opt.get(key, "ok")
    for off, n in ((10 * M, M), (11 * M + 333, 5000)):
        # Fresh data first, so that zeroing (or not) is visible.
        data = rng.randbytes(n)
        h.pwrite(data, off)
        model[off:off + n] = data
        if want == "ok":
            h.zero(n, off, flags=fl)
            model[off:off + n] = bytes(n)
        else:
            # A refused fast zero must leave the data alone.
            expect_errno(f"{key} at {off}+{n}", "ENOTSUP",
                         lambda: h.zero(n, off, flags=fl))
            # ...and the same zero without FAST_ZERO must work.
            h.zero(n, off, flags=fl & ~nbd.CMD_FLAG_FAST_ZERO)
            model[off:off + n] = bytes(n)
        check(f"{key} ({want}) at {off}+{n}", *near(off, n))

# --- trim
trim = opt.get("trim", "zero")
for off, n, fl in ((12 * M, M, 0), (13 * M + 1, 8192 + 2, 0),
                   (14 * M + 4095, 3, nbd.CMD_FLAG_FUA), (size - 2 * M - 5, M + 9, 0)):
    data = rng.randbytes(n + 2)             # fresh data, one byte either side
    h.pwrite(data, off - 1)
    model[off - 1:off + n + 1] = data
    h.trim(n, off, flags=fl)
    if trim == "zero":
        model[off:off + n] = bytes(n)
    elif trim == "advisory":
        # Each trimmed byte may read as before or as zero; bytes
        # outside the range must not change.
        got = pread_all(off, n)
        for i in range(n):
            if got[i] != model[off + i] and got[i] != 0:
                errors.append(f"trim at {off}+{n}: byte {off + i} became "
                              f"{got[i]:#x}, neither old nor zero")
                break
        model[off:off + n] = got
    check(f"trim ({trim}) at {off}+{n}", *near(off, n))

# --- extents
ext = extents(0, size)
if opt.get("holes") == "yes":
    # Fully aligned trimmed and may-trim-zeroed ranges are holes.
    for off, n in ((M, M), (12 * M, M)):
        if flags_at(ext, off, n) != {nbd.STATE_HOLE | nbd.STATE_ZERO}:
            errors.append(f"extents: {off}+{n} should be a hole, got {ext}")
    # Freshly written data is data.
    if flags_at(ext, 5 * M + 77, 300 * K) != {0}:
        errors.append(f"extents: written range is not all data: {ext}")
elif opt.get("holes") == "no":
    if ext != [(0, size, 0)]:
        errors.append(f"extents: expected all data, got {ext}")
# Everything reported as zero must read as zero.
for s, e, fl in ext:
    if fl & nbd.STATE_ZERO and any(model[s:e]):
        errors.append(f"extents: {s}..{e} reported zero but holds data")

# --- whole export
h.flush()
check("whole export")
h.shutdown()
with open(out, "wb") as f:
    f.write(model)

if errors:
    print("\n".join(errors), file=sys.stderr)
    sys.exit(1)
print(f"ok: {size} bytes, all operations checked")
