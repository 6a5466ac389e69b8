#!/bin/bash
# gmblock-cache: a flush below that fails is told to every connection.
# All connections share the cache's one context below, so a failed
# flush there (the disk lost what it had not written yet) reaches the
# one request that met it, and a layer below that reports a lost
# write-back once (as Linux does per open file: here nbdkit's file
# plugin, whose fdatasync tests/fault-syscalls.c fails while a file
# exists) lets the next flush succeed.  Connection A writes, B's FLUSH fails below: A's next FLUSH
# must fail too (EIO), once; B's next one, and a connection opened
# since, succeed.  The same for a FUA write.  In every caching mode
# that flushes (unsafe promises nothing).
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"
fault_shim

for mode in writeback writethrough read adaptive; do
    truncate -s 4M "$T/$mode.img"
    FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so \
        start_server "$mode" --filter=gmblock-cache file "$T/$mode.img" \
        cache-mode=$mode cache-stats="$T/$mode.stats"
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$mode")" "$T/faults/fdatasync-eio" 2>&1 <<'PY'
import errno, nbd, os, sys
uri, fail = sys.argv[1:]

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
print("told once to each connection: A by a flush, then by a FUA write; C by a flush")
PY
) || fail "cache-mode=$mode: $out"
    stop_server "$mode"
    n=$(awk '$1 == "gmblock-cache.flush_failures_reported" { print $2 }' "$T/$mode.stats")
    [[ $n == 3 ]] || fail "cache-mode=$mode: flush_failures_reported is '$n', not 3"
    info "cache-mode=$mode: $out"
done
