#!/bin/bash
# Trims that fail, made on cue by tests/fault-syscalls.c (ring=none):
#  unmap     discard=unmap on a file: a trim whose fallocate (punch
#            hole) fails with EIO fails with EIO, plain, FUA and
#            unaligned, and changes nothing; it is no lost write-back
#            (fail_stop 0); once fallocate works, a trim reads back as
#            zeros.
#  unmapfua a FUA trim whose fallocate succeeds but whose fdatasync
#            fails: EIO, and fail-stop (fail_stop 1: flush, write, trim
#            refused with EIO afterwards, although the disk works
#            again; reads go on).
#  ignore    discard=ignore: a trim never calls fallocate (a failing
#            one cannot fail it) and changes nothing; a FUA trim still
#            syncs the writes before it: its failing fdatasync gives
#            EIO and fail-stop.
#  device    (root) discard=unmap on a loop device: a trim whose
#            BLKDISCARD fails with EIO fails with EIO; one the device
#            refuses (EOPNOTSUPP) succeeds, trim being advisory; both
#            leave the data; a working BLKDISCARD zeroes it.
# The shim's log shows which calls each trim made.
. "$(dirname "$0")/functions.sh"
cd "$T"
fault_shim

M=1048576
randfile orig.img $((4 * M))

# trim_case CASE FILE [plugin args]: serve FILE under the shim, run the
# client's CASE, stop; the counters are in CASE.stats.
trim_case () {
    local case=$1 file=$2; shift 2
    serve_faults "$case" "$file" "$@"
    /usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri "$case")" "$T/faults" \
        "$case" "$T/orig.img" <<'PY' || fail "$case: wrong outcome"
uri, FAULTS, case, orig = sys.argv[1:5]
want = bytearray(open(orig, "rb").read())
h = connect(uri, strict=0)                      # unaligned too
M = 1 << 20
EIO, FUA = (errno.EIO,), nbd.CMD_FLAG_FUA

def same(what):
    for off in range(0, len(want), M):
        if expect_ok(h, "pread", M, off) != want[off:off + M]:
            die("%s: %s: data at %d differs" % (case, what, off))

def calls(kind):
    """The shim's calls of one kind since the last look."""
    got = [l for l in shim_log()[calls.seen:] if l.startswith(kind)]
    calls.seen = len(shim_log())
    return got
calls.seen = 0

def stopped():
    """Fail-stop: every write, trim and flush refused, reads go on."""
    fault("fdatasync-eio", False)           # the disk works again
    expect_err(h, "flush", errnos=EIO)
    expect_err(h, "pwrite", b"\x33" * 4096, 0, errnos=EIO)
    expect_err(h, "trim", 65536, 3 * M, errnos=EIO)
    expect_ok(h, "pread", M, 0)

if case == "unmap":
    fault("fallocate-eio")
    expect_err(h, "trim", 65536, M, errnos=EIO)
    expect_err(h, "trim", 65536, M, errnos=EIO, flags=FUA)
    expect_err(h, "trim", 5000, 2 * M + 3, errnos=EIO)
    fault("fallocate-eio", False)
    if calls("fallocate") != ["fallocate 3 1048576 65536 EIO"] * 2 + \
       ["fallocate 3 2097155 5000 EIO"]:
        die("unmap: the failing trims did not each punch a hole")
    same("after the failed trims")
    expect_ok(h, "trim", 65536, M)
    want[M:M + 65536] = bytes(65536)
    same("after a trim")
elif case == "unmapfua":
    fault("fdatasync-eio")
    expect_err(h, "trim", 65536, M, errnos=EIO, flags=FUA)
    if calls("f") != ["fallocate 3 1048576 65536", "fdatasync EIO"]:
        die("unmapfua: the trim's calls are not a hole punched, then a sync")
    stopped()
elif case == "ignore":
    fault("fallocate-eio")
    expect_ok(h, "trim", 65536, M)
    expect_ok(h, "trim", 65536, M, flags=FUA)
    fault("fallocate-eio", False)
    same("after ignored trims")
    if calls("fallocate"):
        die("ignore: a trim called fallocate")
    d = os.urandom(4096)
    expect_ok(h, "pwrite", d, 0)
    want[0:4096] = d
    fault("fdatasync-eio")
    expect_err(h, "trim", 65536, M, errnos=EIO, flags=FUA)
    if calls("f") != ["fdatasync EIO"]:
        die("ignore: the FUA trim did not sync the write before it")
    stopped()
    same("after fail-stop")
elif case == "device":
    fault("blkdiscard-eio")
    expect_err(h, "trim", M, M, errnos=EIO)
    expect_err(h, "trim", M + 1000, M - 500, errnos=EIO, flags=FUA)
    fault("blkdiscard-eio", False)
    fault("blkdiscard-eopnotsupp")
    expect_ok(h, "trim", M, M)
    fault("blkdiscard-eopnotsupp", False)
    # Whole blocks only: the edges of an unaligned trim are left.
    if calls("blkdiscard") != ["blkdiscard 1048576 1048576 EIO",
                               "blkdiscard 1048576 1048576 EIO",
                               "blkdiscard 1048576 1048576 EOPNOTSUPP"]:
        die("device: the trims did not each send BLKDISCARD")
    same("after the failed trims")
    expect_ok(h, "trim", M, M)
    want[M:2 * M] = bytes(M)
    same("after a trim")
h.shutdown()
PY
    stop_server "$case"
}

stops () {
    local v
    v=$(counter "$1.stats" fail_stop)
    [[ $v == "$2" ]] || fail "$1: fail_stop is '$v', expected $2"
}

for c in unmap unmapfua; do
    cp orig.img "$c.img"
    trim_case "$c" "$T/$c.img"
done
stops unmap 0
stops unmapfua 1
grep -q "fdatasync failed (Input/output error): acknowledged data may be lost" unmapfua.log ||
    { cat unmapfua.log >&2; fail "unmapfua: no fail-stop message"; }
cp orig.img ignore.img
trim_case ignore "$T/ignore.img" discard=ignore
stops ignore 1
info "failed trims give EIO; a FUA trim's failed sync stops the server, discard=ignore too"

[[ $(id -u) == 0 ]] || skip "device: needs root (a loop device)"
require losetup
cp orig.img device.img
loopdev "$T/device.img"
[[ $(cat "/sys/block/${LOOP#/dev/}/queue/discard_max_bytes") -gt 0 ]] ||
    skip "device: $LOOP cannot discard"
trim_case device "$LOOP"
stops device 0
grep -q "trim at offset 1048576 length 1048576: Input/output error" device.log ||
    { cat device.log >&2; fail "device: no error message for the failed BLKDISCARD"; }
info "a failed BLKDISCARD gives EIO, a refused one is no error"
echo PASS
