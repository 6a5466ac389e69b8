#!/bin/bash
# gmblock-readahead passes every client request down and must hand its
# failure back: a write, zero or trim (and a read) that fails below is
# an error to the client, never acknowledged, also while prefetch is
# active (streams seen, windows queued).  nbdkit's error filter fails
# every request below while $T/trigger exists.  Stacks: readahead over
# gmblock direct=false, and readahead over gmblock-cache (writethrough)
# over the failing layer.  After the trigger is gone the failed
# requests changed nothing and the same requests succeed.
# (test-readahead-faults fails prefetches, which must not reach a
# client; this is the other side.)
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"

rcounter () { awk -v k="gmblock-readahead.$2" '$1 == k { print $2 }' "$1"; }
SIZE=$((8 * 1048576))

check () {      # check NAME STACK...
    local name=$1; shift
    randfile "$T/$name.img" $SIZE
    rm -f "$T/trigger"
    start_server "$name" --filter=gmblock-readahead "$@" file="$T/$name.img" \
        ra-stats="$T/$name.stats" error-rate=100% error-file="$T/trigger"
    timeout 60 /usr/bin/python3 - "$(uri "$name")" "$T/trigger" "$T/$name.img" "$name" <<'PY' ||
import nbd, os, sys
uri, trigger, img, name = sys.argv[1:]
h = nbd.NBD()
h.connect_uri(uri)
M = 1 << 20
# A sequential reader: prefetch is active from here on.
for off in range(0, 4 * M, 128 * 1024):
    h.pread(128 * 1024, off)
disk = open(img, "rb").read()

def fails(what, f, *a):
    try:
        f(*a)
    except nbd.Error as e:
        print(f"{what}: fails as it must ({e.string})")
        return
    sys.exit(f"{name}: {what} failed below and was acknowledged")

open(trigger, "w").close()
fails("write", h.pwrite, b"\x5a" * 65536, 4 * M)
fails("FUA write", h.pwrite, b"\x5a" * 65536, 4 * M + 65536, nbd.CMD_FLAG_FUA)
fails("zero", h.zero, 65536, 5 * M)
fails("trim", h.trim, 65536, 6 * M)
if name == "pagecache":         # the cache above would answer a hit
    fails("read", h.pread, 65536, 7 * M)
os.unlink(trigger)
if h.pread(3 * M, 4 * M) != disk[4 * M:7 * M]:
    sys.exit(f"{name}: the failed requests changed what is read")
h.pwrite(b"\x5a" * 65536, 4 * M)
h.zero(65536, 5 * M)
h.trim(65536, 6 * M)
if h.pread(65536, 4 * M) != b"\x5a" * 65536 or h.pread(65536, 5 * M) != bytes(65536):
    sys.exit(f"{name}: requests after the errors did not take")
h.shutdown()
PY
        fail "$name: a failed request below was not reported to the client"
    stop_server "$name"
    [[ $(rcounter "$T/$name.stats" queued_bytes) -gt 0 ]] ||
        fail "$name: nothing prefetched (readahead was not active: no test)"
    info "$name: every failed request below failed at the client"
}

check pagecache --filter=error gmblock direct=false
check cache --filter=gmblock-cache --filter=error gmblock cache-mode=writethrough
