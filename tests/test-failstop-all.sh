#!/bin/bash
# Fail-stop without root: tests/fault-syscalls.c makes the plugin's
# fdatasync or RWF_DSYNC write fail with EIO on cue (ring=none), as a
# lost write-back does.  test-fault-writeback does it with real disks,
# as root, and tries some requests; this tries them all.
#  1. A flush takes the error.  From then on, on both connections,
#     every flush, write (plain and FUA), trim (plain and FUA) and zero
#     (plain, FUA, fast) fails with EIO, even though the disk works
#     again; and none of them changed the file (a trim that got through
#     punched a hole in acknowledged data).  Reads go on.  The counter
#     fail_stop is 1.
#  2. A FUA write's RWF_DSYNC takes the error (it returns 1 s later):
#     a flush sent meanwhile on the other connection must wait for it
#     to be published and fail, never answer "durable" (the RWF_DSYNC
#     write runs under the sync lock, shared); and so must every flush
#     after.
#  3. The same with two flushes (-D gmblock.failstop_delay_ms: the one
#     that took the error publishes it 1.5 s later): the second, sent
#     meanwhile, must fail although its own fdatasync would succeed.
. "$(dirname "$0")/functions.sh"
require cmp
cd "$T"
fault_shim


# client NAME CASE: the case's requests (fault-nbd.py: a hung server fails).
client () {
    /usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri "$1")" "$T/faults" "$2" <<'PY'
import threading
uri, FAULTS, case = sys.argv[1], sys.argv[2], sys.argv[3]
h1, h2 = connect(uri, strict=0), connect(uri, strict=0)   # unaligned too
EIO = (errno.EIO,)

def racing(first, meanwhile):
    """first() on h1 takes the error and is slow to publish it; a flush
    on h2, sent 0.4 s later (after meanwhile()), must fail too."""
    got = []
    def run():
        try:
            first()
            got.append("ok")
        except nbd.Error as e:
            got.append(e.errnum)
    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.4)
    if got:
        die("%s: the first request was answered at once: no race" % case)
    meanwhile()
    expect_err(h2, "flush", errnos=EIO)
    t.join()
    if got != [errno.EIO]:
        die("%s: the request that took the error: %s, expected EIO" % (case, got))

expect_ok(h1, "pwrite", b"\x11" * 65536, 0)
if case == "all":
    fault("fdatasync-eio")
    expect_err(h1, "flush", errnos=EIO)
    fault("fdatasync-eio", False)       # reported once, as Linux does
elif case == "dsync":
    expect_ok(h1, "flush")              # so a FUA write is RWF_DSYNC alone
    fault("dsync-eio")
    racing(lambda: call(h1, "pwrite", b"\x22" * 4096, 8192, flags=nbd.CMD_FLAG_FUA),
           lambda: fault("dsync-eio", False))
else:
    fault("fdatasync-eio")
    racing(lambda: call(h1, "flush"),
           lambda: fault("fdatasync-eio", False))   # the second's own sync succeeds
before = expect_ok(h1, "pread", 1 << 20, 0)
FUA = nbd.CMD_FLAG_FUA
for h in (h1, h2):
    expect_err(h, "flush", errnos=EIO)
    if case != "all":
        continue
    expect_err(h, "pwrite", b"\x33" * 4096, 4096, errnos=EIO)
    expect_err(h, "pwrite", b"\x33" * 4096, 4096, errnos=EIO, flags=FUA)
    expect_err(h, "pwrite", b"\x33" * 100, 70000, errnos=EIO)
    expect_err(h, "trim", 65536, 0, errnos=EIO)
    expect_err(h, "trim", 65536, 0, errnos=EIO, flags=FUA)
    expect_err(h, "zero", 65536, 0, errnos=EIO)
    expect_err(h, "zero", 65536, 0, errnos=EIO, flags=FUA)
    expect_err(h, "zero", 65536, 0, errnos=EIO, flags=nbd.CMD_FLAG_FAST_ZERO)
    if expect_ok(h, "pread", 1 << 20, 0) != before:
        die("a refused request changed the data")
print("--- %s: every later flush%s fails with EIO, reads go on" %
      (case, ", write, trim and zero" if case == "all" else ""))
PY
}

truncate -s 4M disk.img
serve_faults all "$T/disk.img"
client all all || fail "1: a request succeeded after fail-stop"
stop_server all
[[ $(counter "$T/all.stats" fail_stop) == 1 ]] ||
    fail "1: fail_stop is $(counter "$T/all.stats" fail_stop), expected 1"
grep -q "acknowledged data may be lost" "$T/all.log" ||
    { cat "$T/all.log" >&2; fail "1: no fail-stop message in the log"; }
# Only the first 64K was ever written; a refused trim or zero punches
# no hole in it.
head -c 65536 /dev/zero | tr '\0' '\021' | cmp - <(head -c 65536 disk.img) ||
    fail "1: the acknowledged write is not intact in the file"

serve_faults dsync "$T/disk.img"
client dsync dsync || fail "2: a flush answered while a FUA write held the error"
stop_server dsync
grep -q "FUA write" "$T/dsync.log" || { cat "$T/dsync.log" >&2; fail "2: fail-stop does not name the FUA write"; }

serve_faults flushes "$T/disk.img" -D gmblock.failstop_delay_ms=1500
client flushes flushes || fail "3: a flush answered while another held the error"
stop_server flushes
info "fail-stop refuses every write, trim, zero and flush, and no flush slips past the one that took the error"
