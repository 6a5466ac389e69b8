#!/bin/bash
# A block device that never had a write-zeroes offload (a loop device
# over a ramfs file: ramfs has no fallocate, so the loop device says
# write_zeroes_max_bytes 0 and discard_max_bytes 0 from the start).
# Every FAST_ZERO that reaches the device (with or without NO_HOLE,
# aligned or with unaligned edges) must be refused at once with
# ENOTSUP, counted (fast_zero_refused) and leave the data as it was: the
# kernel would zero such a range by writing zeros, which is not fast.
# A plain zero still works (nbdkit writes the zeros) and reads back as
# zeros.  (test-fastzero-offload-lost: an offload the kernel turns off
# at run time.)
. "$(dirname "$0")/functions.sh"
require losetup
[[ $(id -u) == 0 ]] || skip "needs root (ramfs and a loop device)"
M=1048576

mkdir "$T/ramfs"
mount -t ramfs gmblock-test "$T/ramfs" || skip "cannot mount ramfs"
track_mount "$T/ramfs"
randfile "$T/ramfs/back.img" $((16 * M))
loopdev "$T/ramfs/back.img"
wz=/sys/block/${LOOP#/dev/}/queue/write_zeroes_max_bytes
[[ $(cat "$wz") == 0 ]] || skip "$LOOP has a write-zeroes offload ($(cat "$wz") bytes)"
info "$LOOP over ramfs: write_zeroes_max_bytes 0"

start_server s gmblock file="$LOOP" stats="$T/s.stats"
/usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri s)" <<'PY' || fail "wrong outcome"
h = connect(sys.argv[1], strict=0)              # unaligned too
M = 1 << 20
FAST, NO_HOLE = nbd.CMD_FLAG_FAST_ZERO, nbd.CMD_FLAG_NO_HOLE
if not h.can_fast_zero():
    die("the server does not offer fast zero")
want = expect_ok(h, "pread", 16 * M, 0)
n = 0
for flags in (FAST, FAST | NO_HOLE, FAST | nbd.CMD_FLAG_FUA):
    for count, off in ((4 * M, 4 * M), (M + 1000, 2 * M - 500)):
        expect_err(h, "zero", count, off, flags=flags, errnos=(errno.ENOTSUP,))
        n += 1
if expect_ok(h, "pread", 16 * M, 0) != want:
    die("a refused fast zero changed the data")
for flags in (0, NO_HOLE):
    expect_ok(h, "zero", M + 1000, 8 * M + 3 + flags, flags=flags)
    if expect_ok(h, "pread", M + 1000, 8 * M + 3 + flags) != bytes(M + 1000):
        die("a plain zero did not zero")
print("--- %d fast zeros refused with ENOTSUP, data untouched; plain zeros work" % n)
PY
stop_server s
v=$(counter "$T/s.stats" fast_zero_refused)
[[ $v == 6 ]] || fail "fast_zero_refused is '$v', expected 6"
echo PASS
