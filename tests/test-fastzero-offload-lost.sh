#!/bin/bash
# A block device that advertises a write-zeroes offload it cannot do: a
# loop device over a tmpfs file (tmpfs has no ZERO_RANGE).  The first
# write-zeroes fails below, the kernel turns the offload off (sysfs
# write_zeroes_max_bytes becomes 0) and from then on zeroes such a range
# by writing zero pages.  FAST_ZERO|NO_HOLE must then fail at once with
# ENOTSUP, as NBD requires of a zero that would not be fast: the plugin
# read the offload once, at start-up, and kept answering "done" while
# the kernel wrote every byte (the tmpfs file grew by each request).
# The first request may still be slow (the kernel falls back inside that
# very call: nothing tells the plugin beforehand); the data stays right.
. "$(dirname "$0")/functions.sh"
require losetup
M=1048576

mkdir "$T/tmpfs"
mount -t tmpfs -o size=160M gmblock-test "$T/tmpfs" || skip "cannot mount tmpfs (not root?)"
track_mount "$T/tmpfs"
truncate -s $((128 * M)) "$T/tmpfs/back.img"
loopdev "$T/tmpfs/back.img"
wz=/sys/block/${LOOP#/dev/}/queue/write_zeroes_max_bytes
[[ -r $wz && $(cat "$wz") -gt 0 ]] || skip "$LOOP advertises no write-zeroes offload"
info "$LOOP over tmpfs: write_zeroes_max_bytes $(cat "$wz")"

start_server s gmblock file="$LOOP" stats="$T/s.stats"
/usr/bin/python3 - "$(uri s)" "$T/tmpfs/back.img" "$wz" <<'PY'
import errno, os, sys, nbd
uri, back, wz = sys.argv[1:]
M = 1 << 20
FAST = nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE

def used():                      # bytes the tmpfs file holds
    return os.stat(back).st_blocks * 512

def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)

h = nbd.NBD()
h.connect_uri(uri)
assert h.can_fast_zero()
h.pwrite(b"\xaa" * 4096, 40 * M - 4096)
h.pwrite(b"\xbb" * 4096, 72 * M)
# The first: the kernel tries the offload, loses it, maybe writes zeros.
try:
    h.zero(8 * M, 0, FAST)
    print("--- first FAST_ZERO|NO_HOLE: done")
except nbd.Error as e:
    if e.errnum != errno.ENOTSUP:
        fail("first FAST_ZERO|NO_HOLE: %s" % e)
    print("--- first FAST_ZERO|NO_HOLE: ENOTSUP")
print("--- write_zeroes_max_bytes now %s" % open(wz).read().strip())
for off in (8 * M, 40 * M):
    before = used()
    try:
        h.zero(32 * M, off, FAST)
        fail("FAST_ZERO|NO_HOLE of 32M at %d succeeded with the offload "
             "gone: the tmpfs file grew by %d bytes (zeros written)"
             % (off, used() - before))
    except nbd.Error as e:
        if e.errnum != errno.ENOTSUP:
            fail("FAST_ZERO|NO_HOLE at %d: %s, expected ENOTSUP" % (off, e))
    if used() != before:
        fail("a refused fast zero changed the file (%d -> %d bytes)"
             % (before, used()))
# Refused means untouched; a plain zero still works (slowly: allowed).
if h.pread(4096, 40 * M - 4096) != b"\xaa" * 4096:
    fail("data before the refused range changed")
if h.pread(4096, 72 * M) != b"\xbb" * 4096:
    fail("data inside a refused range changed")
h.zero(4 * M, 70 * M, nbd.CMD_FLAG_NO_HOLE)
if h.pread(4 * M, 70 * M) != bytes(4 * M):
    fail("plain zero did not zero")
print("--- refused with ENOTSUP once the offload was gone; plain zero works")
h.shutdown()
PY
stop_server s
[[ $(counter "$T/s.stats" fast_zero_refused) -ge 2 ]] ||
    fail "fast_zero_refused is $(counter "$T/s.stats" fast_zero_refused), expected 2 or more"
