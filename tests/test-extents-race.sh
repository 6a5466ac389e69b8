#!/bin/bash
# Block status racing a trim on a sparse file: the plugin asks lseek
# SEEK_DATA, then SEEK_HOLE; a trim that punches the data in between
# made the second answer the same offset, the plugin added a
# zero-length extent, and with REQ_ONE (qemu's and nbdinfo's kind of
# query) returned none: nbdkit failed the request with EINVAL
# ("extents: plugin must return at least one extent").  Found by
# tests/stress/stress.py (seed 400); the old code failed here within a
# second.  One connection writes and trims the first 4K in a loop while
# two others ask its status with REQ_ONE; every answer must succeed and
# start at 0.  direct=true and direct=false.
. "$(dirname "$0")/functions.sh"
require /usr/bin/python3
cd "$T"

for d in true false; do
    truncate -s 1M "disk-$d.img"
    start_server s_$d gmblock file="$T/disk-$d.img" ring=none direct=$d
    out=$(timeout 60 /usr/bin/python3 - "$(uri s_$d)" 4 <<'PY' 2>&1
import nbd, sys, threading, time
uri, secs = sys.argv[1], float(sys.argv[2])
stop = time.time() + secs
errs, calls = [], [0, 0]
def writer():
    h = nbd.NBD(); h.connect_uri(uri)
    while time.time() < stop and not errs:
        h.pwrite(b"\x55" * 4096, 0)
        h.trim(4096, 0)
def reader(i):
    h = nbd.NBD(); h.add_meta_context("base:allocation"); h.connect_uri(uri)
    def seen(ctx, off, entries, err):
        if off != 0 or len(entries) < 2 or entries[0] == 0:
            errs.append("extents %s at %d" % (entries, off))
        return 0
    while time.time() < stop and not errs:
        try:
            h.block_status(4096, 0, seen, nbd.CMD_FLAG_REQ_ONE)
        except nbd.Error as e:
            errs.append(str(e))
        calls[i] += 1
ts = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(i,)) for i in (0, 1)]
[t.start() for t in ts]
[t.join() for t in ts]
print("block status calls", sum(calls))
if errs:
    sys.exit("; ".join(errs[:2]))
PY
) || { stop_server s_$d; fail "direct=$d: $out"; }
    stop_server s_$d
    info "direct=$d: $out, all answered"
done
echo "extents race OK"
