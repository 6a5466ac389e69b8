#!/bin/bash
# Requests past the end of the export and zero-length requests: past
# the end gets an NBD error (EINVAL, or ENOSPC for writes) and changes
# nothing; zero-length gets a clean reply or an error; the server and
# the same connection keep working afterwards; the file is unchanged.
# Both modes (direct=true, direct=false: there cache is advertised).
. "$(dirname "$0")/functions.sh"

size=$((4 * 1024 * 1024 + 1000))        # a partial last block too
randfile "$T/disk.img" $size
cp "$T/disk.img" "$T/orig.img"

for d in true false; do
    start_server s_$d gmblock file="$T/disk.img" direct=$d stats="$T/stats.$d"
    /usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri s_$d)" "$T/orig.img" <<'PY'
uri, orig = sys.argv[1], open(sys.argv[2], "rb").read()
size = len(orig)
E = (errno.EINVAL, errno.ENOSPC)
h = connect(uri, strict=0)     # let libnbd send what it would refuse
if h.get_size() != size:
    die("size %d, expected %d" % (h.get_size(), size))

def alive():
    # The same connection still works and the data is intact.
    if expect_ok(h, "pread", 4096, 0) != orig[:4096]:
        die("data at 0 changed")
    if expect_ok(h, "pread", 1000, size - 1000) != orig[-1000:]:
        die("data at the end changed")

# In range up to the last byte: fine.
if expect_ok(h, "pread", 5000, size - 5000) != orig[-5000:]:
    die("read to the exact end is wrong")
junk = b"\xa5" * 4096
for off, n in [(size - 1, 2), (size - 1000, 4096), (size, 1), (size, 4096),
               (size + 1, 512), (size + 4096, 4096), (1 << 40, 4096),
               ((1 << 63) - 4096, 4096), ((1 << 64) - 512, 512)]:
    expect_err(h, "pread", n, off, errnos=E)
    expect_err(h, "pwrite", junk[:n] if n <= 4096 else bytes(n), off, errnos=E)
    expect_err(h, "zero", n, off, errnos=E)
    expect_err(h, "trim", n, off, errnos=E)
    if h.can_cache():
        expect_err(h, "cache", n, off, errnos=E)
    alive()
# Huge counts from inside the export.
expect_err(h, "zero", 0xffffffff, size - 4096, errnos=E)
expect_err(h, "trim", 0xffffffff, 0, errnos=E)
alive()

# Zero-length requests: a reply either way, never a crash.
for off in (0, 4096, size - 1, size, size + 4096):
    outcome(h, "pread", 0, off)
    outcome(h, "pwrite", b"", off)
    outcome(h, "zero", 0, off)
    outcome(h, "trim", 0, off)
    outcome(h, "cache", 0, off)
    alive()
expect_ok(h, "flush")
# A whole read still matches.
data = b"".join(expect_ok(h, "pread", min(1 << 20, size - o), o)
                for o in range(0, size, 1 << 20))
if data != orig:
    die("full read differs")
h.shutdown()
PY
    stop_server s_$d
    cmp "$T/disk.img" "$T/orig.img" || fail "direct=$d: the file changed"
    [[ $(stat -c %s "$T/disk.img") == "$size" ]] || fail "direct=$d: the file size changed"
    [[ $(counter "$T/stats.$d" pool_in_use) == 0 ]] || fail "direct=$d: pool buffers leaked"
done
