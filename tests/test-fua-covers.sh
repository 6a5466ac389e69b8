#!/bin/bash
# A FUA reply covers every write, trim and zero acknowledged before the
# FUA request (README), not only its own data: the plugin counts the
# completed ones (written_gen) and what each fdatasync covered
# (synced_gen), and a FUA write that finds some uncovered is written,
# then followed by an fdatasync.  Seen in the system calls themselves
# (ring=none, tests/fault-syscalls.c logs each one as it returns, so no
# waiting on strace), on two connections:
#  1. a plain write, then a FUA write: an fdatasync after the FUA write
#     (counting it was not enough: the sync itself was never checked);
#  2. a zero, then a FUA write: the same (a zero is a write);
#  3. a trim, then a FUA write: the same (a punched hole is too);
#  4. control: after a flush, a FUA write is one RWF_DSYNC write and no
#     fdatasync (nothing else is owed);
#  5. a write that completes while a flush's fdatasync is returning
#     (fdatasync-slow: 1 s after it is done) is not covered by it: a FUA
#     write after that flush must fdatasync again.  A plugin that took
#     the count of writes when the sync ended, not when it began, would
#     call that write synced.
# direct=true and direct=false.
. "$(dirname "$0")/functions.sh"
cd "$T"
fault_shim

truncate -s 4M disk.img
for d in true false; do
    rm -f faults/*
    FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so \
        start_server s_$d gmblock file="$T/disk.img" ring=none direct=$d stats="$T/$d.stats"
    timeout 60 /usr/bin/python3 - "$(uri s_$d)" "$T/faults" <<'PY' || fail "direct=$d: a FUA request did not cover what came before it"
import nbd, os, sys, threading, time
uri, faults = sys.argv[1], sys.argv[2]
log = os.path.join(faults, "log")
h1 = nbd.NBD(); h1.connect_uri(uri)
h2 = nbd.NBD(); h2.connect_uri(uri)
bad = []

def mark():
    return len(open(log).read().splitlines()) if os.path.exists(log) else 0

def since(m):
    return open(log).read().splitlines()[m:]

def fua_covers(what, before):
    h1.flush()                          # nothing owed from here
    before()                            # owes a sync
    m = mark()
    h2.pwrite(b"F" * 4096, 1 << 20, nbd.CMD_FLAG_FUA)
    calls = since(m)
    w = [i for i, c in enumerate(calls) if c.startswith("write 1048576 ")]
    if not w:
        bad.append(f"{what}: the FUA write was not seen: {calls}")
    elif "fdatasync" not in calls[w[-1]:]:
        bad.append(f"{what}, then a FUA write: no fdatasync after it "
                   f"(the {what.split()[0]} is not durable): {calls}")

fua_covers("plain write", lambda: h1.pwrite(b"W" * 4096, 0))
fua_covers("zero", lambda: h1.zero(65536, 2 << 20))
fua_covers("trim", lambda: h1.trim(65536, 3 << 20))

# Control: nothing owed, so RWF_DSYNC alone, no fdatasync.
h1.flush()
m = mark()
h2.pwrite(b"G" * 4096, 1 << 20, nbd.CMD_FLAG_FUA)
calls = since(m)
if calls != ["write 1048576 4096 dsync"]:
    bad.append(f"a FUA write with nothing owed: {calls}, expected one "
               "RWF_DSYNC write")

# A write completing while the flush's fdatasync returns.
h1.pwrite(b"A" * 4096, 0)
open(os.path.join(faults, "fdatasync-slow"), "w").close()
done = []
t = threading.Thread(target=lambda: (h1.flush(), done.append(1)))
t.start()
time.sleep(0.4)
h2.pwrite(b"B" * 4096, 65536)           # during the flush's sync
if done:
    bad.append("the flush did not wait for fdatasync-slow: no test")
t.join()
os.unlink(os.path.join(faults, "fdatasync-slow"))
m = mark()
h2.pwrite(b"C" * 4096, 1 << 20, nbd.CMD_FLAG_FUA)
calls = since(m)
if "fdatasync" not in calls:
    bad.append("a write completed during a flush's fdatasync, then a FUA "
               f"write: no fdatasync (the write is taken for synced): {calls}")
if h1.pread(4096, 65536) != b"B" * 4096:
    bad.append("the write during the flush does not read back")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
    stop_server s_$d
    # fua_syncs counts cases 1, 2, 3 and 5, never the control.
    v=$(counter "$T/$d.stats" fua_syncs)
    [[ $v == 4 ]] || fail "direct=$d: fua_syncs is '$v', expected 4"
    info "direct=$d: a FUA write syncs the writes, zeros and trims before it, and only then"
done
