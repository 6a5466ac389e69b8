#!/bin/bash
# A FUA write that waits for the sync lock while another FUA write
# takes a write-back error must not reach the disk once that error is
# published (io.c: the fail-stop level is read again under the lock).
# FUA write C fails after 3 s in its RWF_DSYNC (tests/fault-syscalls.c,
# dsync-eio holding 3); meanwhile a flush F queues for the lock
# (exclusive: it waits for C), and FUA write B queues behind F (the
# lock lets no reader pass a waiting writer).  The fault is gone before
# B could reach the disk, so only the plugin's check can fail B.  All
# three fail with EIO, B's bytes are not on the disk and its write is
# not in the shim's log, and the server is in fail-stop.
. "$(dirname "$0")/functions.sh"
require cmp
cd "$T"
fault_shim

truncate -s 4M disk.img
serve_faults q "$T/disk.img"
: >faults/log
/usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri q)" "$T/faults" <<'PY' || fail "wrong outcome"
import errno, threading, time
uri, FAULTS = sys.argv[1], sys.argv[2]
hc, hf, hb, hr = (connect(uri) for _ in range(4))
FUA = nbd.CMD_FLAG_FUA
expect_ok(hr, "flush")               # nothing unsynced: FUA is RWF_DSYNC alone
results = {}

def run(name, h, op, *args, **kw):
    try:
        call(h, op, *args, **kw)
        results[name] = "ok"
    except nbd.Error as e:
        results[name] = errno.errorcode.get(e.errnum, e.errnum)

fault("dsync-eio", text="3")
tc = threading.Thread(target=run, args=("C", hc, "pwrite", b"\xcc" * 4096, 0), kwargs={"flags": FUA})
tc.start()
deadline = time.monotonic() + 10
while not any(l.startswith("write 0 4096 dsync waiting") for l in shim_log()):
    if time.monotonic() > deadline:
        die("C never reached its RWF_DSYNC write")
    time.sleep(0.02)
fault("dsync-eio", False)            # B would succeed if it got to the disk
tf = threading.Thread(target=run, args=("F", hf, "flush"))
tf.start()
time.sleep(0.5)                      # F waits for the lock C holds
tb = threading.Thread(target=run, args=("B", hb, "pwrite", b"\xbb" * 4096, 65536), kwargs={"flags": FUA})
tb.start()
for t in (tc, tf, tb):
    t.join()
if results != {"C": "EIO", "F": "EIO", "B": "EIO"}:
    die("expected C, F and B to fail with EIO, got %s" % results)
if any(l.startswith("write 65536 ") for l in shim_log()):
    die("B reached the disk after fail-stop: %s" % [l for l in shim_log() if l.startswith("write 65536")])
if expect_ok(hr, "pread", 4096, 65536) != bytes(4096):
    die("B's bytes are on the export")
print("--- C, the flush queued behind it and B queued behind the flush: EIO; B never written")
PY
stop_server q
[[ $(counter "$T/q.stats" fail_stop) == 1 ]] || fail "fail_stop is $(counter "$T/q.stats" fail_stop), expected 1"
cmp <(head -c 4096 /dev/zero) <(tail -c +65537 disk.img | head -c 4096) || fail "B's bytes are in the file"
echo PASS
