#!/bin/bash
# Failures the plugin must pass on to the client, made on cue by
# tests/fault-syscalls.c (ring=none: the plugin's own system calls),
# where test-fault-eio's failing disk cannot reach:
#  1. a read or write larger than one pool buffer (pool-size=1M:
#     batches of 256K) whose first batch fails: it must fail, even
#     though the batches after it succeed (a read would return the
#     first batch's bytes unread);
#  2. a write into the buffered tail of an odd-sized file (its last 64K
#     go through the page cache, another descriptor) that fails, alone
#     or after an O_DIRECT part that succeeded: it must fail; so must a
#     read of the tail that fails, alone or with an O_DIRECT part,
#     while reads beside it (O_DIRECT, and the tail's other bytes) get
#     the file's bytes;
#  3. a zero whose fallocate fails with EIO (plain, NO_HOLE, FUA): it
#     must fail, not be answered as zeroed;
#  4. a file that shrank underneath the server: a read past its new end
#     (inside the export) must fail, not return whatever the buffer
#     held.
# After each, the same connection goes on working.
. "$(dirname "$0")/functions.sh"
cd "$T"
fault_shim

M=1048576
size=$((4 * M + 1000))          # the last 1000 bytes past 4M: buffered
randfile disk.img $size
FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so \
    start_server s gmblock file="$T/disk.img" ring=none pool-size=1M stats="$T/s.stats"
/usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri s)" "$T/faults" "$T/disk.img" <<'PY' || fail "a failure was answered as success"
uri, FAULTS, disk = sys.argv[1], sys.argv[2], sys.argv[3]
h = connect(uri, strict=0)                      # unaligned too
M = 1 << 20
size = h.get_size()
EIO = (errno.EIO,)

def works(off, n=4096):
    d = os.urandom(n)
    expect_ok(h, "pwrite", d, off)
    if expect_ok(h, "pread", n, off) != d:
        die("write at %d reads back wrong" % off)

# 1. The first of four batches fails.
fault("pwrite-eio", text="65536 69632")
expect_err(h, "pwrite", os.urandom(M), 1, errnos=EIO)
expect_err(h, "pwrite", os.urandom(M + 4096), 0, errnos=EIO)
fault("pwrite-eio", False)
works(1, M)
fault("pread-eio", text="65536 69632")
expect_err(h, "pread", M, 1, errnos=EIO)
expect_err(h, "pread", M + 4096, 0, errnos=EIO)
fault("pread-eio", False)
expect_ok(h, "pread", M, 1)
print("--- 1: a read or write whose first batch fails fails")

# 2. The buffered tail.
fault("pwrite-eio", text="%d %d" % (4 * M + 100, 4 * M + 200))
expect_err(h, "pwrite", os.urandom(500), 4 * M + 50, errnos=EIO)
expect_err(h, "pwrite", os.urandom(4596), 4 * M - 4096, errnos=EIO)
expect_err(h, "pwrite", os.urandom(1000), size - 1000, errnos=EIO,
           flags=nbd.CMD_FLAG_FUA)
fault("pwrite-eio", False)
works(4 * M - 4096, 5096)
fault("pread-eio", text="%d %d" % (4 * M + 100, 4 * M + 200))
for n, off in ((100, 4 * M + 150), (1000, 4 * M), (4596, 4 * M - 4096),
               (M + 1000, 3 * M)):
    expect_err(h, "pread", n, off, errnos=EIO)
want = open(disk, "rb").read()
for n, off in ((4096, 4 * M - 4096), (100, 4 * M + 500), (300, size - 300),
               (M, 0)):
    if expect_ok(h, "pread", n, off) != want[off:off + n]:
        die("pread(%d, %d) beside a failing tail read: wrong data" % (n, off))
fault("pread-eio", False)
if expect_ok(h, "pread", 8192, size - 8192) != want[-8192:]:
    die("the tail reads back wrong once it reads again")
print("--- 2: a failed write or read of the buffered tail fails")

# 3. fallocate fails.
fault("fallocate-eio")
for fl in (0, nbd.CMD_FLAG_NO_HOLE, nbd.CMD_FLAG_FUA):
    expect_err(h, "zero", 65536, M, errnos=EIO, flags=fl)
    expect_err(h, "zero", 5000, 2 * M + 3, errnos=EIO, flags=fl)
fault("fallocate-eio", False)
expect_ok(h, "zero", 65536, M)
if expect_ok(h, "pread", 65536, M) != bytes(65536):
    die("zero does not read back as zeros")
print("--- 3: a zero whose fallocate fails fails")

# 4. The file shrinks to 2M underneath.
os.truncate(disk, 2 * M)
for n, off in ((4096, 3 * M), (100, 3 * M + 1), (65536, 2 * M - 4096),
               (M, 3 * M)):
    expect_err(h, "pread", n, off, errnos=EIO)
want = open(disk, "rb").read(4096)
if expect_ok(h, "pread", 4096, 0) != want:
    die("a read below the new end is wrong")
print("--- 4: a read past the end of a shrunk file fails")
h.shutdown()
PY
stop_server s
[[ $(counter "$T/s.stats" pool_in_use) == 0 ]] || fail "pool buffers leaked"
[[ $(counter "$T/s.stats" fail_stop) == 0 ]] || fail "fail-stop without a lost write-back"
