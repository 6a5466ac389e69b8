#!/bin/bash
# Block status of a sparse file when lseek fails (tests/fault-syscalls.c:
# SEEK_DATA or SEEK_HOLE fails with EIO): the client must get EIO,
# never extents that are wrong (a hole where there is data, or data
# reported as a hole), through libnbd and through nbdinfo --map.  A
# REQ_ONE request answered before the failing lseek is right.  Once
# lseek works again, the extents are exactly the file's.
. "$(dirname "$0")/functions.sh"
require nbdinfo
cd "$T"
fault_shim

K=1024 M=1048576
# Data [0, 64K) and [1M, 1M+64K), holes elsewhere.
truncate -s $((4 * M)) sparse.img
dd if=/dev/urandom of=sparse.img bs=64K count=1 conv=notrunc status=none
dd if=/dev/urandom of=sparse.img bs=64K count=1 seek=16 conv=notrunc status=none
# nbdinfo --map's lines for it: offset, length, type.
want_map="0 65536 0
65536 983040 3
1048576 65536 0
1114112 3080192 3"
map () { nbdinfo --map "$(uri s)" | awk '{ print $1, $2, $3 }'; }

serve_faults s "$T/sparse.img"
[[ $(map) == "$want_map" ]] || { map >&2; fail "the extents are not the file's"; }
/usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri s)" "$T/faults" <<'PY' || fail "wrong outcome"
uri, FAULTS = sys.argv[1:3]
h = connect(uri, allocation=True)
K, M = 1 << 10, 1 << 20
EIO, ONE = (errno.EIO,), nbd.CMD_FLAG_REQ_ONE
DATA, HOLE = 0, nbd.STATE_HOLE | nbd.STATE_ZERO
want = [(64 * K, DATA), (M - 64 * K, HOLE), (64 * K, DATA), (3 * M - 64 * K, HOLE)]

def seeks():
    """The shim's lseek calls since the last look."""
    log = shim_log()
    got = [l for l in log[seeks.seen:] if l.startswith("seek")]
    seeks.seen = len(log)
    return got
seeks.seen = 0

def extents(n, off, flags=0):
    return expect_ok(h, "block_status", n, off, flags=flags)

if extents(4 * M, 0) != want:
    die("extents %s, expected %s" % (extents(4 * M, 0), want))
seeks()

fault("seek-data-eio")
for n, off, flags in ((4 * M, 0, 0), (4 * M, 0, ONE), (M, 64 * K, ONE),
                      (M, 2 * M, 0)):
    expect_err(h, "block_status", n, off, flags=flags, errnos=EIO)
fault("seek-data-eio", False)
if seeks() != ["seek data 0 EIO"] * 2 + ["seek data 65536 EIO", "seek data 2097152 EIO"]:
    die("the failing block status requests did not each call SEEK_DATA")

fault("seek-hole-eio")
# Data first: SEEK_HOLE says where it ends.  A hole first, then data:
# the hole is known, where the data ends is not.
for n, off, flags in ((4 * M, 0, 0), (4 * M, 0, ONE), (2 * M, 64 * K, 0)):
    expect_err(h, "block_status", n, off, flags=flags, errnos=EIO)
got = extents(2 * M, 64 * K, ONE)
if got != [(M - 64 * K, HOLE)]:
    die("REQ_ONE at a hole: %s, expected the hole" % got)
fault("seek-hole-eio", False)
if seeks() != ["seek data 0", "seek hole 0 EIO"] * 2 + \
   ["seek data 65536", "seek hole 1048576 EIO", "seek data 65536"]:
    die("the failing block status requests did not call SEEK_HOLE as expected")

if extents(4 * M, 0) != want:
    die("after the failures: extents %s, expected %s" % (extents(4 * M, 0), want))
print("--- lseek failing: EIO, never wrong extents; REQ_ONE before it right")
h.shutdown()
PY
touch faults/seek-data-eio
rc=0; nbdinfo --map "$(uri s)" >map.out 2>map.err || rc=$?
[[ $rc != 0 ]] || { cat map.out >&2; fail "nbdinfo --map succeeded while SEEK_DATA failed"; }
grep -qi "input/output error" map.err || { cat map.err >&2; fail "nbdinfo --map did not report EIO"; }
info "nbdinfo --map: $(head -n1 map.err)"
rm faults/seek-data-eio
[[ $(map) == "$want_map" ]] || { map >&2; fail "the extents are not the file's after the failures"; }
grep -q "gmblock: $T/sparse.img: lseek SEEK_DATA at offset 0 length [0-9]*: Input/output error" s.log ||
    { cat s.log >&2; fail "no error message for the failed SEEK_DATA"; }
grep -q "gmblock: $T/sparse.img: lseek SEEK_HOLE at offset 0 length [0-9]*: Input/output error" s.log ||
    { cat s.log >&2; fail "no error message for the failed SEEK_HOLE"; }
stop_server s
echo PASS
