#!/bin/bash
# A FUA write that the plugin sends as RWF_DSYNC alone (no write of its
# own left unsynced) and that fails with an error other than EIO
# (ENOSPC, tests/fault-syscalls.c: dsync-enospc) is either that write's
# own failure (no room for its blocks) or a write-back error of older
# data that the write took.  The plugin asks its second descriptor
# (failstop.c), whose fdatasync reports every write-back error since
# start-up:
#  1. "own": that fdatasync succeeds.  Only this write fails, with
#     ENOSPC, and changed nothing; the server goes on: writes, a flush
#     and another FUA write succeed, and the file holds exactly what
#     was acknowledged.  Counter fail_stop 0.
#  2. "lost": that fdatasync fails (EIO).  The FUA write fails (ENOSPC)
#     and the server is in fail-stop: every later flush, write and trim
#     fails with EIO although the disk works again; reads go on.
#     Counter fail_stop 1, and the log names the FUA write.
# In both, the shim's log shows the path: the RWF_DSYNC write, then one
# fdatasync (the second descriptor's), none before it.
. "$(dirname "$0")/functions.sh"
require cmp
cd "$T"
fault_shim

M=1048576
randfile disk.img $((4 * M))
for case in own lost; do
    cp disk.img "$case.img"
    serve_faults "$case" "$T/$case.img"
    /usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri "$case")" "$T/faults" \
        "$case" "$T/disk.img" "$T/$case.want" <<'PY' || fail "$case: wrong outcome"
uri, FAULTS, case, orig, want_file = sys.argv[1:6]
want = bytearray(open(orig, "rb").read())
h = connect(uri)
EIO, ENOSPC, FUA = (errno.EIO,), (errno.ENOSPC,), nbd.CMD_FLAG_FUA

def same(off, n):
    if expect_ok(h, "pread", n, off) != want[off:off + n]:
        die("%s: read at %d differs from what was acknowledged" % (case, off))

fault("dsync-enospc")
if case == "lost":
    fault("fdatasync-eio")
expect_err(h, "pwrite", b"\x22" * 4096, 8192, errnos=ENOSPC, flags=FUA)
fault("dsync-enospc", False)
if case == "lost":
    fault("fdatasync-eio", False)        # the disk works again
calls = [l for l in shim_log() if l.startswith(("write", "fdatasync"))]
probe = "fdatasync EIO" if case == "lost" else "fdatasync"
if calls != ["write 8192 4096 dsync ENOSPC", probe]:
    die("%s: calls %s, expected the RWF_DSYNC write, then %r" % (case, calls, probe))
same(0, 65536)                          # the failed write changed nothing

if case == "own":
    d = os.urandom(4096)
    expect_ok(h, "pwrite", d, 0)
    want[0:4096] = d
    expect_ok(h, "flush")
    d = os.urandom(4096)
    expect_ok(h, "pwrite", d, 8192, flags=FUA)
    want[8192:12288] = d
    expect_ok(h, "flush")
    same(0, 1 << 20)
    print("--- own: only the FUA write failed (ENOSPC); writes and flushes go on")
else:
    expect_err(h, "flush", errnos=EIO)
    expect_err(h, "pwrite", b"\x33" * 4096, 0, errnos=EIO)
    expect_err(h, "pwrite", b"\x33" * 4096, 0, errnos=EIO, flags=FUA)
    expect_err(h, "trim", 65536, 0, errnos=EIO)
    expect_err(h, "flush", errnos=EIO)
    same(0, 1 << 20)
    print("--- lost: the FUA write failed (ENOSPC) and the server is in fail-stop")
h.shutdown()
open(want_file, "wb").write(want)
PY
    stop_server "$case"
    cmp "$case.img" "$case.want" || fail "$case: the file differs from what was acknowledged"
done
[[ $(counter own.stats fail_stop) == 0 ]] ||
    fail "own: fail_stop is $(counter own.stats fail_stop): a write's own ENOSPC stopped the server"
[[ $(counter lost.stats fail_stop) == 1 ]] ||
    fail "lost: fail_stop is $(counter lost.stats fail_stop), expected 1"
grep -q "FUA write failed (Input/output error): acknowledged data may be lost" lost.log ||
    { cat lost.log >&2; fail "lost: no fail-stop message naming the FUA write"; }
[[ $(counter own.stats fua_syncs) == 0 && $(counter lost.stats fua_syncs) == 0 ]] ||
    fail "a FUA write went through fdatasync, not RWF_DSYNC"
info "a FUA write's ENOSPC stops the server only when the second descriptor reports a lost write-back"
echo PASS
