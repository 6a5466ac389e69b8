#!/bin/bash
# gmblock-cache over a layer that cannot do FUA (nbdkit's fua filter,
# fuamode=none, under it): a FUA write, zero or trim must still be
# durable before its reply, so the cache follows it with a flush below
# (lower.c for writes, change_range for zero and trim; in write-back
# modes fua_flush).  nbdkit's log filter between the two records every
# call below as it completes: when the client has its reply, the last
# call below must be a flush that started after the request's own call
# returned.  Control: without FUA, no flush below at all.  (test-fua
# sees FUA through strace, over a plugin that has FUA: this emulation
# never ran there.)
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"

n=0
for mode in read writethrough adaptive "adaptive adaptive-writes=back" writeback; do
    name=m$((++n))
    truncate -s 4M "$T/$name.img"
    # shellcheck disable=SC2086
    start_server "$name" --filter=gmblock-cache --filter=log --filter=fua \
        gmblock file="$T/$name.img" logfile="$T/$name.calls" \
        writeback-interval=3600 cache-mode=$mode
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$name")" "$T/$name.calls" <<'PY'
import nbd, re, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
if not h.can_fua():
    sys.exit("the cache does not offer FUA over a layer without it")

def calls():
    # Calls below in the order they completed: (name, id, return).
    return re.findall(r"\.\.\.(\w+) id=(\d+) return=(-?\d+)",
                      open(sys.argv[2]).read())

def fua(what, op, *args):
    before = len(calls())
    op(*args, nbd.CMD_FLAG_FUA)
    new = calls()[before:]
    names = [c[0] for c in new]
    if not names or names[-1] != "Flush" or new[-1][2] != "0":
        sys.exit(f"FUA {what}: answered, and the calls below since were "
                 f"{names}: no flush after it")
    # The request itself (write-back: the block it dirtied) went below
    # before that flush.
    if len(names) < 2 or names[-2] != what.capitalize():
        sys.exit(f"FUA {what}: calls below {names}: the flush did not "
                 f"follow the request")

def plain(what, op, *args):
    before = len(calls())
    op(*args, 0)
    names = [c[0] for c in calls()[before:]]
    if "Flush" in names:
        sys.exit(f"{what} without FUA flushed below: {names}")

M = 1 << 20
plain("write", h.pwrite, b"\x11" * 65536, 0)
fua("write", h.pwrite, b"\x22" * 65536, 65536)
plain("zero", h.zero, 65536, M)
fua("zero", h.zero, 65536, 2 * M)
plain("trim", h.trim, 65536, 3 * M)
fua("trim", h.trim, 65536, 3 * M + 65536)
# A FUA write over a resident block (a hit in the read modes).
h.pread(65536, 0)
fua("write", h.pwrite, b"\x33" * 4096, 4096)
h.shutdown()
print("FUA write, zero and trim each followed by a flush below; none without FUA")
PY
) || fail "cache-mode=$mode: $out"
    stop_server "$name"
    info "cache-mode=$mode: $out"
done
