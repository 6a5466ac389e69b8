#!/bin/bash
# gmblock-cache: a flush below that fails is told to every connection.
# All connections share the cache's one context below, so a failed
# flush there (the disk lost what it had not written yet) reaches the
# one request that met it, and a layer below that reports a lost
# write-back once (as Linux does per open file: here nbdkit's file
# plugin, whose fdatasync tests/fault-syscalls.c fails while a file
# exists) lets the next flush succeed.  Connection A writes, B's FLUSH fails below: A's next FLUSH
# must fail too (EIO), once; B's next one, and a connection opened
# since, succeed.  The same for a FUA write.  And a FUA write or zero
# below that meets the loss (the shim's fdatasync-lost: the next
# fdatasync fails, 1 s late, and only it) is counted before any flush
# below starts: B's FLUSH, sent while A's FUA request is in flight,
# must fail too (it succeeded while the FUA request's failure was
# counted after it returned, a review finding).  In every caching mode
# that flushes (unsafe promises nothing).
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"
fault_shim

for mode in writeback writethrough read adaptive; do
    cache_over_faults "$mode"
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$mode")" "$T/faults" 2>&1 <<'PY'
import errno, nbd, os, sys, time
uri, faults = sys.argv[1:]
fail, lost = faults + "/fdatasync-eio", faults + "/fdatasync-lost"

def conn():
    h = nbd.NBD()
    h.connect_uri(uri)
    return h

def flush_fails(h, what):
    try:
        h.flush()
    except nbd.Error as e:
        if e.errnum != errno.EIO:
            sys.exit(f"{what}: failed with {e}, not EIO")
        return True
    return False

def fua_fails(h, data, what):
    try:
        h.pwrite(data, 0, nbd.CMD_FLAG_FUA)
    except nbd.Error as e:
        if e.errnum != errno.EIO:
            sys.exit(f"{what}: failed with {e}, not EIO")
        return True
    return False

def fail_below(h):
    open(fail, "w").close()
    if not flush_fails(h, "B's flush while the disk fails"):
        sys.exit("B's flush succeeded while the flush below failed: no test")
    os.unlink(fail)

a, b = conn(), conn()
data = b"A" * 65536
a.pwrite(data, 0)
fail_below(b)
if not flush_fails(a, "A's flush after B's failed below"):
    sys.exit("A's flush succeeded after B's failed below: A's acknowledged "
             "write may be lost and A was not told")
if flush_fails(a, "A's second flush"):
    sys.exit("A's second flush failed: the failure is told once")
if flush_fails(b, "B's next flush"):
    sys.exit("B's next flush failed: B was told already")
c = conn()
if flush_fails(c, "a new connection's flush"):
    sys.exit("a connection opened after the failure was told of it")
# A FUA write reports it too.
fail_below(b)
if not fua_fails(a, data, "A's FUA write after B's flush failed below"):
    sys.exit("A's FUA write succeeded after B's flush failed below")
if fua_fails(a, data, "A's second FUA write"):
    sys.exit("A's second FUA write failed: the failure is told once")
if not flush_fails(c, "C's flush"):
    sys.exit("C's flush succeeded after B's failed below")
if a.pread(65536, 0) != data:
    sys.exit("A's write does not read back")
# A FUA request below meets the loss while B flushes.
for op in ("write", "zero"):
    b.pwrite(b"B" * 65536, 1 << 20)
    open(lost, "w").close()
    if op == "write":
        cookie = a.aio_pwrite(data, 0, flags=nbd.CMD_FLAG_FUA)
    else:
        cookie = a.aio_zero(65536, 0, flags=nbd.CMD_FLAG_FUA)
    deadline = time.monotonic() + 20
    while os.path.exists(lost):         # taken when A's reaches fdatasync
        if time.monotonic() > deadline:
            sys.exit(f"A's FUA {op} never reached fdatasync below")
        a.poll(0)
        time.sleep(0.01)
    if not flush_fails(b, f"B's flush during A's FUA {op}"):
        sys.exit(f"B's flush succeeded while A's FUA {op} below met a lost "
                 "write-back: B's acknowledged write may be lost, unseen")
    try:
        while not a.aio_command_completed(cookie):
            a.poll(-1)
        sys.exit(f"A's FUA {op} succeeded though fdatasync failed below")
    except nbd.Error as e:
        if e.errnum != errno.EIO:
            sys.exit(f"A's FUA {op}: failed with {e}, not EIO")
    if flush_fails(a, f"A's flush after its FUA {op}") or \
       flush_fails(b, f"B's flush after A's FUA {op}"):
        sys.exit(f"a flush after the FUA {op} failed: told twice")
if b.pread(65536, 1 << 20) != b"B" * 65536:
    sys.exit("B's write does not read back")
print("told once to each connection: A by a flush, then by a FUA write; "
      "C by a flush; B during A's FUA write, then zero")
PY
) || fail "cache-mode=$mode: $out"
    stop_server "$mode"
    n=$(ccounter "$T/$mode.stats" flush_failures_reported)
    [[ $n == 5 ]] || fail "cache-mode=$mode: flush_failures_reported is '$n', not 5"
    info "cache-mode=$mode: $out"
done
