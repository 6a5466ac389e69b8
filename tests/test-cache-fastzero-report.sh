#!/bin/bash
# gmblock-cache: a FUA fast zero that the layer below refuses (ENOTSUP:
# "not fast", nothing was done) neither takes nor gives a report of a
# flush that failed below.  (1) B's flush fails below (A's acknowledged
# write may be lost); A's FUA|FAST_ZERO zero is refused with ENOTSUP, as
# clients expect and then zero slowly; A's next flush must still fail
# with EIO.  (2) Nothing failed: A's refused FUA fast zero must not make
# B's next flush fail.  nbdkit's file plugin under the fault shim,
# nozero's fastzeromode=slow refusing every fast zero.
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"
fault_shim
for mode in writeback writethrough read adaptive; do
    truncate -s 4M "$T/$mode.img"
    FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so \
        start_server "$mode" --filter=gmblock-cache --filter=nozero file \
        "$T/$mode.img" cache-mode="$mode" zeromode=plugin fastzeromode=slow
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$mode")" "$T/faults/fdatasync-eio" 2>&1 <<'PY'
import errno, nbd, os, sys
uri, fail = sys.argv[1:]
def conn():
    h = nbd.NBD(); h.connect_uri(uri); return h
def flush_fails(h):
    try:
        h.flush(); return False
    except nbd.Error as e:
        assert e.errnum == errno.EIO, e
        return True
def fast_zero_fua(h):
    try:
        h.zero(4096, 1 << 20, nbd.CMD_FLAG_FUA | nbd.CMD_FLAG_FAST_ZERO)
        sys.exit("the fast zero was not refused: no test")
    except nbd.Error as e:
        assert e.errnum == errno.ENOTSUP, e
a, b = conn(), conn()
bad = []
fast_zero_fua(a)
if flush_fails(b):
    bad.append("B's flush failed after A's refused fast zero (nothing failed below)")
a.pwrite(b"A" * 65536, 0)
open(fail, "w").close()
assert flush_fails(b), "B's flush succeeded while the flush below failed: no test"
os.unlink(fail)
fast_zero_fua(a)
if not flush_fails(a):
    bad.append("A's flush succeeded after B's failed below (A's refused "
               "fast zero took the report)")
if bad:
    sys.exit("; ".join(bad))
print("ok")
PY
) || fail "cache-mode=$mode: $out"
    stop_server "$mode"
    info "cache-mode=$mode: $out"
done
