#!/bin/bash
# A write-back that fails after the write was acknowledged: Linux
# reports it once per open file, to the first fsync-type call, then
# forgets it.  gmblock must not: after the first report, every flush,
# FUA request and write fails with EIO, on every connection, for good
# (fail-stop), while reads go on.  Disks whose write-back fails (root:
# tmpfs and loop devices):
#  A. direct=false on a loop device over a sparse file on a full tmpfs:
#     a write to an unbacked range is acknowledged (page cache) and its
#     write-back fails.  The error reaches a FUA write first (EIO), or
#     a flush.  Two connections: both flushes fail, and keep failing.
#  B. the default O_DIRECT mode on a file whose size is not a multiple
#     of the block: its last 64K goes through the page cache.  The file
#     sits on ext2 on a loop device over a full tmpfs, the block under
#     its tail punched out, so the tail's write-back fails (ENOSPC).  A
#     FUA write elsewhere takes that error: its own failure is ENOSPC,
#     which the plugin must recognise as a lost write-back (its second
#     descriptor), not as that write's own problem.  The tail is written
#     by another process, not through the server: the plugin then has
#     no unsynced write, so the FUA write is RWF_DSYNC alone (a write
#     through the server first would make it fdatasync, whose ENOSPC
#     stops the server without asking the second descriptor).
#  C. control: a healthy file, FUA writes and flushes succeed, no
#     fail-stop.
#  D. a FUA write syncs the writes completed before it that no fdatasync
#     covered yet (counter fua_syncs), and only those.
#  E. concurrent flushes share fdatasyncs and all succeed.
#  A2 (after A): two flushes racing, the second must not answer before
#     the first has published the error.
. "$(dirname "$0")/functions.sh"
require losetup mkfs.ext2 filefrag fallocate
[[ $(id -u) == 0 ]] || skip "needs root (tmpfs and loop devices)"

# client SOCKNAME SCRIPT: run python with h1, h2 connected to the server.
client () {
    local sock=$T/$1.sock; shift
    timeout 60 /usr/bin/python3 - "$sock" "$@" <<'PY'
import nbd, subprocess, sys
sock, mode = sys.argv[1], sys.argv[2]
h1 = nbd.NBD(); h1.connect_unix(sock)
h2 = nbd.NBD(); h2.connect_unix(sock)
size = h1.get_size()

def ok(what, f, *a):
    try:
        f(*a)
    except nbd.Error as e:
        sys.exit("FAIL: %s failed: %s" % (what, e))
    print("%s: ok" % what)

def fails(what, f, *a, errnum=None):
    try:
        f(*a)
    except nbd.Error as e:
        if errnum is not None and e.errnum != errnum:
            sys.exit("FAIL: %s: %s, expected errno %d" % (what, e.string, errnum))
        print("%s: fails as it must: %s" % (what, e.string))
        return
    sys.exit("FAIL: %s succeeded after a lost write-back" % what)

def either(what, f, *a):
    try:
        f(*a); print("%s: ok" % what)
    except nbd.Error as e:
        print("%s: failed: %s" % (what, e.string))

if mode == "control":
    ok("write", h1.pwrite, b"\x11" * 65536, 65536)
    ok("FUA write", h2.pwrite, b"\x22" * 4096, 0, nbd.CMD_FLAG_FUA)
    ok("flush 1", h1.flush)
    ok("flush 2", h2.flush)
    if h1.pread(4096, 0) != b"\x22" * 4096:
        sys.exit("FAIL: data differs")
    sys.exit(0)

if mode == "fua":
    # Counted by fua_syncs: a FUA write syncs what earlier writes left
    # unsynced, and only then.
    ok("plain write", h1.pwrite, b"\x11" * 4096, 0)
    ok("FUA write 1 (syncs the plain write)", h2.pwrite, b"\x22" * 4096, 8192, nbd.CMD_FLAG_FUA)
    ok("FUA write 2 (nothing else to sync)", h2.pwrite, b"\x22" * 4096, 16384, nbd.CMD_FLAG_FUA)
    ok("flush", h1.flush)
    ok("FUA write 3 (nothing else)", h1.pwrite, b"\x22" * 4096, 0, nbd.CMD_FLAG_FUA)
    ok("plain write", h1.pwrite, b"\x11" * 4096, 0)
    ok("FUA write 4 (syncs it)", h2.pwrite, b"\x22" * 4096, 8192, nbd.CMD_FLAG_FUA)
    sys.exit(0)

if mode == "race":
    # Flush 1 takes the write-back error; the plugin is slow to publish
    # it (-D gmblock.failstop_delay_ms=2000). Flush 2, sent 0.5 s later
    # on the other connection, finds no error left in the kernel: it
    # must still fail, never answer "durable".
    import threading, time
    ok("write to the unbacked range", h1.pwrite, b"\x33" * 1000, 8 << 20)
    subprocess.run(["sync"])
    t = threading.Thread(target=lambda: fails("flush 1 (takes the error)", h1.flush))
    t.start()
    time.sleep(0.5)
    fails("flush 2 (sent while flush 1 publishes the error)", h2.flush)
    t.join()
    sys.exit(0)

lost_at, fua_at = {"loop": (8 << 20, 0), "tail": (size - 1000, 0)}[mode]
if mode == "tail":
    # Another writer of the file (not the server): the plugin has no
    # write of its own left unsynced, so the FUA write below goes out
    # as RWF_DSYNC alone (not fdatasync: counter fua_syncs stays 0).
    import os
    fd = os.open(sys.argv[3], os.O_WRONLY)
    os.pwrite(fd, b"\x33" * 1000, lost_at)
    os.close(fd)
else:
    # Acknowledged: it sits in the page cache, where its write-back fails.
    ok("write to the unbacked range", h1.pwrite, b"\x33" * 1000, lost_at)
subprocess.run(["sync"])        # the kernel's periodic write-back, now
if mode == "tail":
    import errno
    fails("FUA write elsewhere (takes the write-back error)",
          h2.pwrite, b"\x44" * 4096, fua_at, nbd.CMD_FLAG_FUA,
          errnum=errno.ENOSPC)
else:
    either("FUA write elsewhere", h2.pwrite, b"\x44" * 4096, fua_at,
           nbd.CMD_FLAG_FUA)
fails("flush on connection 1", h1.flush)
fails("flush on connection 2", h2.flush)
fails("flush again", h1.flush)
fails("a plain write", h2.pwrite, b"\x55" * 4096, 4096)
fails("a FUA trim", h1.trim, 4096, 8192, nbd.CMD_FLAG_FUA)
fails("a zero", h1.zero, 4096, 8192)
ok("a read (what survived can be copied off)", h1.pread, 4096, 65536)
PY
}

# A. direct=false over a loop device whose write-back fails.
mkdir "$T/tmA"
mount -t tmpfs -o size=4M none "$T/tmA" || skip "cannot mount a tmpfs"
track_mount "$T/tmA"
truncate -s 16M "$T/tmA/back.img"
dd if=/dev/urandom of="$T/tmA/back.img" bs=1M count=1 conv=notrunc status=none
dd if=/dev/zero of="$T/tmA/fill" bs=64K status=none 2>/dev/null || true
loopdev "$T/tmA/back.img"
start_server loop gmblock file="$LOOP" direct=false stats="$T/loop.stats"
client loop loop || fail "A: the server reported a lost write-back as durable"
stop_server loop
expect_stop () {
    local v
    v=$(counter "$T/$1.stats" fail_stop)
    [[ $v == "$2" ]] || fail "$1: gmblock.fail_stop is '$v', expected $2"
}
expect_stop loop 1
grep -q "acknowledged data may be lost" "$T/loop.log" ||
    { cat "$T/loop.log" >&2; fail "A: no fail-stop message in the log"; }
info "A: $(grep -m1 'acknowledged data may be lost' "$T/loop.log")"

# A2. The same disk, two flushes racing: the one that does not take the
# error must not answer before fail-stop is in place.
loopdev_detach "$LOOP"
truncate -s 0 "$T/tmA/back.img"; truncate -s 16M "$T/tmA/back.img"
dd if=/dev/urandom of="$T/tmA/back.img" bs=1M count=1 conv=notrunc status=none
loopdev "$T/tmA/back.img"
start_server race -D gmblock.failstop_delay_ms=2000 gmblock file="$LOOP" direct=false
client race race || fail "A2: a flush racing the one that took the error answered success"
stop_server race
info "A2: a flush racing the one that takes the write-back error fails too"

# B. O_DIRECT, the buffered tail of an odd-sized file.
mkdir "$T/tmB" "$T/mnt"
mount -t tmpfs -o size=6M none "$T/tmB" || skip "cannot mount a tmpfs"
track_mount "$T/tmB"
truncate -s 32M "$T/tmB/back.img"
loopdev "$T/tmB/back.img"
mkfs.ext2 -q -F -b 4096 "$LOOP"
mount -o errors=continue "$LOOP" "$T/mnt" || fail "cannot mount ext2 on $LOOP"
track_mount "$T/mnt"
head -c $((1048576 + 1000)) /dev/urandom >"$T/mnt/f.img"
sync
pb=$(filefrag -v "$T/mnt/f.img" | awk '/eof/ { print $4 }' | tr -d .)
[[ $pb =~ ^[0-9]+$ ]] || fail "B: cannot find the tail's block (filefrag: $pb)"
fallocate -p -o $((pb * 4096)) -l 4096 "$T/tmB/back.img"
dd if=/dev/zero of="$T/tmB/fill" bs=4K status=none 2>/dev/null || true
start_server tail gmblock file="$T/mnt/f.img" stats="$T/tail.stats"
client tail tail "$T/mnt/f.img" || fail "B: the server reported a lost write-back as durable"
stop_server tail
expect_stop tail 1
v=$(counter "$T/tail.stats" fua_syncs)
[[ $v == 0 ]] || fail "B: fua_syncs is '$v': the FUA write went through fdatasync, not RWF_DSYNC"
grep -q "FUA write failed (No space left on device)" "$T/tail.log" ||
    { cat "$T/tail.log" >&2; fail "B: the FUA write's ENOSPC did not put the server in fail-stop"; }

# C. Control: a healthy file.
randfile "$T/ok.img" $((4 * 1024 * 1024))
start_server ok gmblock file="$T/ok.img" stats="$T/ok.stats"
client ok control || fail "C: the healthy disk failed"
stop_server ok
expect_stop ok 0

# D. A FUA write covers the writes acknowledged before it (README), not
# only itself: RWF_DSYNC alone would make only its own data durable.
for d in true false; do
    start_server fua gmblock file="$T/ok.img" direct=$d stats="$T/fua.stats"
    client fua fua || fail "D: FUA writes failed"
    stop_server fua
    v=$(counter "$T/fua.stats" fua_syncs)
    [[ $v == 2 ]] || fail "D (direct=$d): fua_syncs is '$v', expected 2 (FUA writes 1 and 4)"
done
info "a lost write-back fails every later flush, on every connection"

# E. Concurrent flushes share fdatasyncs (counter syncs_shared, which
# must count some) and every one succeeds: 4 connections write and
# flush 150 times each, then kill -9; every acknowledged write is in
# the file.  (A kill cannot lose what the kernel took, so this checks
# acknowledgement, not the sync: test-fua-covers checks which writes a
# flush's fdatasync follows.)  A failed request in a thread fails the
# test (it only printed a traceback: a test audit finding).
truncate -s 16M "$T/share.img"
start_server share -D gmblock.stats=1 gmblock file="$T/share.img"
timeout 120 /usr/bin/python3 - "$T/share.sock" "$T/share.want" <<'PY' || fail "E: concurrent writes and flushes failed"
import nbd, os, sys, threading
want = bytearray(16 << 20)
errors = []
def run(i):
    try:
        h = nbd.NBD(); h.connect_unix(sys.argv[1])
        for k in range(150):
            off = (i * 1000 + k) * 4096
            d = os.urandom(4096)
            h.pwrite(d, off)
            want[off:off + 4096] = d
            h.flush()
    except Exception as e:
        errors.append(f"connection {i}: {e}")
ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
for t in ts: t.start()
for t in ts: t.join()
open(sys.argv[2], "wb").write(want)
if errors:
    sys.exit("; ".join(errors))
PY
pid=$(server_pid share)
kill -USR1 "$pid"; sleep 0.5    # the counters, into the log
kill -KILL "$pid"
for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
wait "$pid" 2>/dev/null || true
eval "_pid_share="
cmp "$T/share.img" "$T/share.want" || fail "E: an acknowledged write is missing after kill -9"
shared=$(awk '$1 == "gmblock.syncs_shared" { print $2 }' "$T/share.log" | tail -n 1)
[[ $shared =~ ^[0-9]+$ ]] || { cat "$T/share.log" >&2; fail "E: no syncs_shared counter"; }
[[ $shared -gt 0 ]] || fail "E: 600 concurrent flushes, none answered by another's fdatasync"
info "E: 600 concurrent flushes, all succeeded ($shared answered by another's fdatasync), every acknowledged write on disk after kill -9"
