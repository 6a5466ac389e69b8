#!/bin/bash
# The exclusive range lock of a read-modify-write, made deterministic:
# tests/fault-syscalls.c holds the read of block 0 for 1 s (pread-slow;
# ring=none, direct=true), so a write of bytes 100-109 is between its
# read and its write when a second request on another connection
# touches other bytes of the same block:
#  - a zero of bytes 0-49 (fallocate on the file, which must take the
#    block's lock too: else the write puts the old bytes 0-49 back over
#    the zero, and an acknowledged zero is lost);
#  - a write of bytes 200-209 (another read-modify-write: else one of
#    the two writes is lost).
# Neither request overlaps the other, so both must show.
# (test-concurrency-rmw finds a lost update by chance, under load; this
# finds it every time, and covers zero.)
. "$(dirname "$0")/functions.sh"
cd "$T"
fault_shim

randfile disk.img 1M
FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so \
    start_server s gmblock file="$T/disk.img" ring=none stats="$T/s.stats"
/usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri s)" "$T/faults" <<'PY' || fail "a request was lost in another's read-modify-write"
uri, faults = sys.argv[1], sys.argv[2]
h1, h2 = connect(uri, strict=0), connect(uri, strict=0)     # unaligned too
slow = os.path.join(faults, "pread-slow")
log = os.path.join(faults, "log")

for second in ("zero", "write"):
    want = bytearray(call(h1, "pread", 4096, 0))
    mine = os.urandom(10)
    other = os.urandom(10)
    with open(slow, "w") as f:
        f.write("0 1")                  # reads of block 0 wait 1 s
    buf1 = nbd.Buffer.from_bytearray(bytearray(mine))
    c1 = h1.aio_pwrite(buf1, 100)
    time.sleep(0.3)                     # h1 is inside its read-modify-write
    if second == "zero":
        c2 = h2.aio_zero(50, 0)
        want[0:50] = bytes(50)
    else:
        buf2 = nbd.Buffer.from_bytearray(bytearray(other))
        c2 = h2.aio_pwrite(buf2, 200)
        want[200:210] = other
    want[100:110] = mine
    time.sleep(0.1)
    os.unlink(slow)
    for h, c in ((h1, c1), (h2, c2)):
        try:
            _wait(h, c, second)
        except nbd.Error as e:
            die("%s: a request failed: %s" % (second, e))
    if not any(l.rstrip().endswith(" slow") for l in open(log)):
        die("%s: the read was not held: no test" % second)
    got = call(h1, "pread", 4096, 0)
    if got != bytes(want):
        i = next(i for i in range(4096) if got[i] != want[i])
        die("%s of other bytes of the block during a read-modify-write: "
            "byte %d is %#x, expected %#x" % (second, i, got[i], want[i]))
    os.unlink(log)
    print("--- a %s beside a read-modify-write of the same block: both kept" % second)
PY
stop_server s
[[ $(counter "$T/s.stats" rmw_bytes) -gt 0 ]] || fail "no read-modify-write: no test"
