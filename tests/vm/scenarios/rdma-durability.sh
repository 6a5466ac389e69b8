# The durability contract on the RDMA write path (issue 10): a FLUSH
# or FUA reply means that every write acknowledged before it is on
# stable storage, whatever else is in flight, and a write that did not
# land is never acknowledged.  rdma-mixed checks one quiet flush; here
# the server is slow and busy, and it dies the moment it has answered.
# (1) A slow server (delay-write=50ms below --filter=gmblock-rdma) in
# front of gmblock-cache in write-back, so an acknowledged write sits in
# the server's memory (checked: not on the disk) until a flush: 16
# writes in flight through the bridge, a FLUSH sent after 96 acks (on
# the same NBD connection, then on another), the server killed -9 the
# instant the flush is answered: every write acknowledged before the
# flush was sent is on the disk (O_DIRECT), byte for byte.  FUA writes
# among plain ones, kill -9 after 96 acks: every FUA one is on the disk,
# and so is every plain one acknowledged before an acknowledged FUA write
# was sent.
# SIGTERM with 16 in flight: every write acknowledged is on the disk
# after the exit (the RDMA clients stop before the cache's last
# write-back).
# (2) Writes acknowledged by a server that then died, never flushed:
# after the restart the bridge must fail the next FLUSH (the data was
# lost with the server's cache) instead of flushing the new server and
# answering success, also on another connection that had no writes and
# had not noticed the restart (multi-conn: the welcome's server
# instance tells it); the flush after that succeeds.
# (2b) The same writes, but the server stopped with SIGTERM while more
# writes stream in, 16 in flight, and started again: it answers what it
# received, flushes and says goodbye (protocol version 3), so no write
# fails (what it did not serve the bridge sends again to the new one),
# the next FLUSH succeeds on both connections, and every acknowledged
# write is on the disk.  (2c) The same without the delay filter (so
# nothing fails with ESHUTDOWN below), the server holding its shutdown
# 1 s after it stopped serving (-D gmblock-rdma.drain_delay_ms=1000):
# the writes that come meanwhile go unanswered, and the bridge sends
# them again after the goodbye.  (2e) The same, the bridge stopped
# (SIGSTOP) from 0.3 s into the shutdown until the server has been
# restarted: it reads the server's disconnect with the goodbye still in
# its completion queue, and must still take it (the requests the server
# left undone sent again, no FLUSH failing).  (2d) The server's
# write-back fails at the SIGTERM (the error filter below the cache):
# its goodbye says the writes are not flushed (they are lost: nbdkit
# exits 1), so after the restart the bridge's next FLUSH fails on both
# connections, as after a kill -9, and the one after succeeds.
# (3) A failing disk (nbdkit's error filter below the cache): a flush
# whose write-back fails is an error, the next one after the disk
# recovers succeeds and the data is on the disk.  nbdkit's error filter
# directly below gmblock-rdma failing half of the pwrites: every write
# (4M ones too, split into four by the bridge) that was acknowledged
# reads back and is on the disk, the failed ones get EIO, nbdcopy exits
# non-zero; the connection lives on (error replies, no transport error).
# (3c) A 4M write split into pieces by the bridge, some of them failed
# by that error filter, the others done by the server: the client got
# EIO, nothing was acknowledged to it, so after a kill -9 and a restart
# of the server the next FLUSH succeeds (the bridge counted the done
# pieces as acknowledged writes and failed it: a false EIO).
# (4) A plugin that serialises requests (--filter=noparallel): the
# filter's serial path (one worker, READs not split), two writers at
# depth 16 at once, a flush, every byte back over RDMA and on the disk.
# lab-disks: virtio:32M virtio:32M virtio:32M
# lab-timeout: 600
# lab-sanitizer: asan
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk
rxe_pair
br_uri="nbd+unix:///?socket=$LAB_RUN/br.sock"

# dpy MODE ARGS...: the libnbd clients of this scenario (see each mode).
dpy() {
    python3 - "$@" <<'PY'
import mmap, os, random, select, signal, sys, time, nbd
mode, args = sys.argv[1], sys.argv[2:]
SZ = 64 << 10

def connect(uri):
    h = nbd.NBD()
    h.connect_uri(uri)
    return h

def wait(hs):
    # Block until one of the handles has something to do.
    rl, wl = [], []
    for h in hs:
        d = h.aio_get_direction()
        if d & nbd.AIO_DIRECTION_READ: rl.append(h.aio_get_fd())
        if d & nbd.AIO_DIRECTION_WRITE: wl.append(h.aio_get_fd())
    r, w, _ = select.select(rl, wl, [], 1.0)
    for h in hs:
        if h.aio_get_fd() in r: h.aio_notify_read()
        if h.aio_get_fd() in w: h.aio_notify_write()

def done(h, c):
    # True once c is answered; raises nbd.Error if it failed.
    return h.aio_command_completed(c)

sys.path.insert(0, os.environ["LAB_REPO"] + "/tests/vm/guest")
import ondisk

def on_disk(disk, chunks, data):
    # Which of chunks (index -> offset i * SZ) hold data[i] on disk.
    return ondisk.on_disk(disk, chunks, data, SZ)

def put16(uri):
    # A new connection with 16 writes of 64K at 0 acknowledged.
    h = connect(uri)
    data = [random.randbytes(SZ) for _ in range(16)]
    for i in range(16):
        h.pwrite(data[i], i * SZ)
    return h, data

def idle_and_put16(uri, disk):
    # Connection b with no writes of its own (a multi-conn FLUSH on it
    # must cover the others'), then put16 on another, checked not on
    # the disk yet (the server's write-back cache holds them).
    b = connect(uri)
    if not b.can_multi_conn():
        sys.exit("the bridge does not advertise multi-conn")
    h, data = put16(uri)
    if on_disk(disk, range(16), data):
        sys.exit("control: the acknowledged writes reached the disk unflushed")
    return b, h, data

def flush_fails(h, disk, data, what):
    try:
        h.flush()
    except nbd.Error as e:
        print("%s: the FLUSH fails, as it must: %s" % (what, e))
        return
    sys.exit("%s: the FLUSH succeeded (%d of 16 writes on the disk)" %
             (what, len(on_disk(disk, range(16), data))))

def restarted(run, tell="written"):
    # Tell the shell (RUN/TELL), wait until it restarted the server.
    open(run + "/" + tell, "w").close()
    for _ in range(600):
        if os.path.exists(run + "/restarted"): return
        time.sleep(0.1)
    sys.exit("the server was not restarted")

def reap(pid):
    while True:
        try:
            if open("/proc/%d/stat" % pid).read().split()[2] == "Z":
                return
        except OSError:
            return
        time.sleep(0.02)

if mode in ("flush", "fua", "term"):
    # flush URI FLUSH_URI PID DISK / fua|term URI PID DISK: 256 writes
    # of 64K in random order, 16 in flight.  flush: after 96 acks a
    # FLUSH (on FLUSH_URI's connection unless "same"), kill -9 PID when
    # it is answered.  fua: every other write FUA, kill -9 PID after 96
    # acks.  term: SIGTERM to PID after 96 acks, no more writes sent.
    if mode == "flush":
        uri, furi, pid, disk = args[0], args[1], int(args[2]), args[3]
    else:
        uri, furi, pid, disk = args[0], "same", int(args[1]), args[2]
    N, DEPTH, AT = 256, 16, 96
    rnd = random.Random()
    order = list(range(N)); rnd.shuffle(order)
    data = [rnd.randbytes(SZ) for _ in range(N)]
    h = connect(uri)
    hf = h if furi == "same" else connect(furi)
    if hf is not h and not hf.can_multi_conn():
        sys.exit("the bridge does not advertise multi-conn: a flush on "
                 "another connection would not have to cover these writes")
    inflight, acked, fcookie, sent, failed = {}, [], None, 0, 0
    termed, batch, ack_batch, sent_at = False, 0, {}, {}
    while True:
        while sent < N and len(inflight) < DEPTH and not termed:
            i = order[sent]; sent += 1
            fl = nbd.CMD_FLAG_FUA if mode == "fua" and i % 2 else 0
            inflight[h.aio_pwrite(data[i], i * SZ, flags=fl)] = i
            sent_at[i] = batch      # every ack of batches <= this was seen
        if mode == "flush" and fcookie is None and len(acked) >= AT:
            before, busy = list(acked), len(inflight)
            # Control: the cache holds them, the disk does not (yet).
            pre = len(on_disk(disk, before, data))
            fcookie = hf.aio_flush()
        wait([h] if hf is h else [h, hf])
        batch += 1              # replies seen in an earlier batch came first
        for c in list(inflight):
            try:
                if done(h, c):
                    acked.append(inflight.pop(c)); ack_batch[acked[-1]] = batch
            except nbd.Error:
                inflight.pop(c); failed += 1
        if mode == "flush" and fcookie is not None and done(hf, fcookie):
            os.kill(pid, signal.SIGKILL)
            break
        if mode == "fua" and len(acked) >= AT:
            os.kill(pid, signal.SIGKILL)
            # A FUA reply covers every write acknowledged before the FUA
            # write was sent (as a flush does; not those acknowledged
            # while it was in flight): the FUA ones, and the plain ones
            # seen before the last acknowledged FUA write was sent.
            last = max(sent_at[i] for i in acked if i % 2)
            fuas = [i for i in acked if i % 2]
            plain = [i for i in acked if not i % 2 and ack_batch[i] <= last]
            later = [i for i in acked if not i % 2 and ack_batch[i] > last]
            before, busy = fuas + plain, len(inflight)
            break
        if mode == "term" and not termed and len(acked) >= AT:
            at, pre = len(acked), len(on_disk(disk, acked, data))
            os.kill(pid, signal.SIGTERM)
            termed, busy = True, len(inflight)
            deadline = time.monotonic() + 60
        if termed and inflight and time.monotonic() > deadline:
            sys.exit("%d writes still unanswered 60 s after the SIGTERM" % len(inflight))
        if termed and not inflight:
            before = acked
            break
    reap(pid)
    # Take the bridge's answers to what was still in flight (errors now
    # the server is gone) before this client hangs up: nbdkit 1.32.5
    # aborts when a client closes with replies queued (README, "Known
    # issue in nbdkit 1.32.5"), and the lab's stop fails a bridge that
    # aborted.
    drain_by = time.monotonic() + 60
    while inflight:
        if time.monotonic() > drain_by:
            sys.exit("%d writes still unanswered by the bridge 60 s after "
                     "the server died" % len(inflight))
        wait([h])
        for c in list(inflight):
            try:
                if done(h, c):
                    inflight.pop(c)
            except nbd.Error:
                inflight.pop(c)
    if busy == 0:
        sys.exit("nothing was in flight: not the interleaving to test")
    if mode == "flush":
        print("flush sent with %d writes acknowledged (%d of them on the disk "
              "then) and %d in flight; answered after %d more acks; kill -9 "
              "at once" % (len(before), pre, busy, len(acked) - len(before)))
        if pre == len(before):
            sys.exit("control: every acknowledged write was on the disk "
                     "before the flush (write-back not in effect)")
    elif mode == "term":
        print("SIGTERM with %d writes acknowledged (%d of them on the disk "
              "then) and %d in flight: %d acknowledged in all, %d failed" %
              (at, pre, busy, len(acked), failed))
        if pre == at:
            sys.exit("control: every acknowledged write was on the disk "
                     "before the SIGTERM (write-back not in effect)")
    else:
        print("kill -9 after %d acks (%d in flight): %d FUA, %d plain ones "
              "acknowledged before the last acknowledged FUA write was sent "
              "(all must be on the disk), %d after (%d of them on the disk)" %
              (len(acked), busy, len(fuas), len(plain), len(later),
               len(on_disk(disk, later, data))))
    ok = on_disk(disk, before, data)
    if len(ok) != len(before):
        bad = sorted(set(before) - set(ok))
        sys.exit("%d of %d writes are not on %s after the %s and kill -9 "
                 "(first at offset %d)" % (len(bad), len(before), disk,
                 {"flush": "flush", "fua": "FUA reply", "term": "SIGTERM"}[mode],
                 bad[0] * SZ))
    print("all %d are on %s" % (len(before), disk))

elif mode == "lost":
    # lost URI DISK RUN: put16 (acknowledged, not flushed: not on the
    # disk), tell the shell (RUN/written), which kills the server -9
    # and restarts it (RUN/restarted); the next FLUSH must fail, on
    # another connection as on this one, the one after it succeed; a
    # write and flush then land.
    # Connection B, with no writes of its own, flushes first: with
    # multi-conn its FLUSH must cover h's writes, which died with the
    # old server (B learns it from the new instance in the welcome).
    uri, disk, run = args
    b, h, data = idle_and_put16(uri, disk)
    restarted(run)
    flush_fails(b, disk, data, "another connection's acknowledged writes "
                "died with the server")
    flush_fails(h, disk, data, "the server died with acknowledged writes")
    h.flush()
    h.pwrite(data[0], 0)
    h.flush()
    if not on_disk(disk, [0], data):
        sys.exit("a write flushed after the restart is not on the disk")
    print("the next FLUSH succeeds and covers the writes after the restart")

elif mode == "graceful":
    # graceful URI DISK RUN PID: put16 on h (acknowledged, not on the
    # disk), then 240 more writes of 64K after them, 16 in flight;
    # SIGTERM to PID after 32 of those acks (RUN/termed tells the shell,
    # which starts the server again), the rest sent on.  Every write
    # must succeed, then FLUSH on b (no writes of its own) and on h, and
    # all 256 are on the disk.  With a 5th argument, the bridge's PID:
    # 0.3 s after the SIGTERM (writes sent meanwhile go unanswered) the
    # bridge is stopped (SIGSTOP) until the server has been restarted,
    # so it finds the server's goodbye and its disconnect both pending.
    uri, disk, run, pid = args[0], args[1], args[2], int(args[3])
    freeze = int(args[4]) if len(args) > 4 else 0
    b, h, data = idle_and_put16(uri, disk)
    data += [random.randbytes(SZ) for _ in range(240)]
    todo, inflight, acked, termed = list(range(16, 256)), {}, 0, None
    t0 = time.monotonic()
    while todo or inflight:
        while todo and len(inflight) < 16:
            i = todo.pop(0)
            inflight[h.aio_pwrite(data[i], i * SZ)] = i
        wait([h])
        for c in list(inflight):
            try:
                if done(h, c):
                    inflight.pop(c); acked += 1
            except nbd.Error as e:
                sys.exit("write at %d failed across the graceful restart: %s"
                         % (inflight[c] * SZ, e))
        if termed is None and acked >= 32:
            os.kill(pid, signal.SIGTERM)
            termed, t_term = (acked, len(inflight), len(todo)), time.monotonic()
            if not freeze:
                open(run + "/termed", "w").close()
        if freeze and termed and time.monotonic() - t_term > 0.3:
            os.kill(freeze, signal.SIGSTOP)
            restarted(run, "termed")
            os.kill(freeze, signal.SIGCONT)
            freeze = 0
        if time.monotonic() - t0 > 120:
            sys.exit("the writes did not end within 120 s")
    if termed is None:
        sys.exit("the server was never stopped")
    print("SIGTERM after %d acks with %d in flight and %d to send: all 256 "
          "writes acknowledged, none failed" % termed)
    b.flush()
    h.flush()
    n = len(on_disk(disk, range(256), data))
    if n != 256:
        sys.exit("after the FLUSHes only %d of 256 writes are on the disk" % n)
    print("FLUSH succeeds on both connections; all 256 writes are on the disk")

elif mode == "flushfail":
    # flushfail URI DISK TRIGGER: 16 writes acknowledged (cached), the
    # write-back fails (TRIGGER exists): FLUSH must fail; TRIGGER gone:
    # FLUSH succeeds and all 16 are on the disk.
    uri, disk, trig = args
    h, data = put16(uri)
    open(trig, "w").close()
    flush_fails(h, disk, data, "the write-back fails")
    os.unlink(trig)
    h.flush()
    n = len(on_disk(disk, range(16), data))
    if n != 16:
        sys.exit("after a successful FLUSH only %d of 16 writes are on the disk" % n)
    print("the disk recovered: FLUSH succeeds, all 16 writes are on the disk")

elif mode == "errors":
    # errors URI DISK: half the server's pwrites fail.  64 writes of 64K
    # (every other one FUA) and 12 of 4M (split by the bridge), 16 in
    # flight: what was acknowledged reads back and is on the disk.
    uri, disk = args
    h = connect(uri)
    BIG = 4 << 20
    jobs = [(i * SZ, SZ, i % 2) for i in range(64)]
    jobs += [((1 << 22) + k * BIG, BIG, 0) for k in range(6)]
    data = [random.randbytes(n) for _, n, _ in jobs]
    inflight, ok, bad, fua_bad = {}, [], [], 0
    pending = list(range(len(jobs)))
    while pending or inflight:
        while pending and len(inflight) < 16:
            j = pending.pop(0)
            off, n, fua = jobs[j]
            inflight[h.aio_pwrite(data[j], off,
                     flags=nbd.CMD_FLAG_FUA if fua else 0)] = j
        wait([h])
        for c in list(inflight):
            try:
                if done(h, c): ok.append(inflight.pop(c))
            except nbd.Error as e:
                j = inflight.pop(c); bad.append(j)
                if e.errno not in (5, "EIO"):
                    sys.exit("write failed with %s, not EIO" % e)
    big_ok = [j for j in ok if jobs[j][1] == BIG]
    print("%d writes acknowledged (%d of 4M), %d failed with EIO" %
          (len(ok), len(big_ok), len(bad)))
    if not bad or not any(jobs[j][2] for j in bad) or not any(jobs[j][1] == BIG for j in bad):
        sys.exit("expected failed plain, FUA and 4M writes")
    fd = os.open(disk, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, BIG)
    for j in ok:
        off, n, _ = jobs[j]
        if h.pread(n, off) != data[j]:
            sys.exit("an acknowledged write at %d reads back wrong" % off)
        if os.preadv(fd, [memoryview(buf)[:n]], off) != n or buf[:n] != data[j]:
            sys.exit("an acknowledged write at %d is not on the disk" % off)
    print("every acknowledged write reads back and is on the disk")

elif mode == "splitfail":
    # splitfail URI DISK RUN: half the server's pwrites fail.  4M writes
    # (split into pieces by the bridge), each one acknowledged flushed
    # at once, until one fails with some of its pieces written: no
    # write acknowledged to the client is unflushed then.  RUN/written
    # tells the shell, which kills the server -9 and restarts it
    # (RUN/restarted): the next FLUSH must succeed.
    uri, disk, run = args
    h = connect(uri)
    h.flush()
    BIG, PART = 4 << 20, 256 << 10
    for k in range(40):
        off, data = (k % 4) * BIG, random.randbytes(BIG)
        try:
            h.pwrite(data, off)
            h.flush()
            continue
        except nbd.Error:
            pass
        got = h.pread(BIG, off)         # reads do not fail
        landed = sum(got[p:p + PART] == data[p:p + PART]
                     for p in range(0, BIG, PART))
        if landed:
            break
    else:
        sys.exit("no 4M write failed with some of its pieces done in 40 tries")
    print("write %d failed with EIO, %d KiB of it written; kill -9" %
          (k, landed * PART >> 10))
    restarted(run)
    try:
        h.flush()
    except nbd.Error as e:
        sys.exit("the FLUSH after the restart failed, though no write "
                 "acknowledged to the client was unflushed: %s" % e)
    print("the FLUSH after the restart succeeds")

elif mode == "fill":
    # fill URI FILE OFFSET: write FILE at OFFSET, 256K requests, 16 in
    # flight, then flush.
    uri, path, base = args[0], args[1], int(args[2])
    h = connect(uri)
    data = open(path, "rb").read()
    CH = 256 << 10
    offs, inflight = list(range(0, len(data), CH)), []
    while offs or inflight:
        while offs and len(inflight) < 16:
            o = offs.pop(0)
            inflight.append(h.aio_pwrite(data[o:o + CH], base + o))
        wait([h])
        inflight = [c for c in inflight if not done(h, c)]
    h.flush()
PY
}

# ---- (1) slow, busy server with a write-back cache; kill -9 at the flush reply
trig=$LAB_RUN/wb-fail
s1_args=(--filter=gmblock-rdma --filter=delay --filter=gmblock-cache
    --filter=error -- rdma=10.77.0.1 rdma-threads=8 delay-write=50ms
    cache-mode=writeback writeback-interval=3600 cache-size=64M
    error-pwrite=EIO error-pwrite-rate=100% error-pwrite-file="$trig"
    rdma-stats="$LAB_OUT/srv.rdma-stats")
serve srv 10809 /dev/vda "${s1_args[@]}"
bridge br 10.77.0.1
# A case that kills the server leaves the bridge with writes it had
# acknowledged and the dead server never flushed: the bridge rightly
# fails the next FLUSH, on any connection (common/unflushed.h).  So the
# next case starts with a fresh bridge.
fresh_bridge() {
    stop br
    bridge br 10.77.0.1
}
step "(1a) 16 writes in flight, FLUSH on the same connection, kill -9 at its reply"
must dpy flush "$br_uri" same "$(server_pid srv)" /dev/vda
stop srv KILL
serve srv 10809 /dev/vda "${s1_args[@]}"
fresh_bridge
step "(1b) the same with the FLUSH on another connection (multi-conn)"
must dpy flush "$br_uri" "$br_uri" "$(server_pid srv)" /dev/vda
stop srv KILL
serve srv 10809 /dev/vda "${s1_args[@]}"
fresh_bridge
step "(1c) FUA writes among plain ones, kill -9 after 96 acknowledgements"
must dpy fua "$br_uri" "$(server_pid srv)" /dev/vda
stop srv KILL
serve srv 10809 /dev/vda "${s1_args[@]}"
fresh_bridge
step "(1d) SIGTERM with 16 writes in flight: the RDMA clients stop before the cache's last write-back"
must dpy term "$br_uri" "$(server_pid srv)" /dev/vda
stop srv

# ---- (2) acknowledged, unflushed, lost with the server: the bridge says so
serve srv 10809 /dev/vda "${s1_args[@]}"
fresh_bridge
# lost_writer CASE: dpy lost in the background ($lost), back once its
# 16 writes are acknowledged; touch RUN/restarted when the server is.
lost_writer() {
    rm -f "$LAB_RUN/written" "$LAB_RUN/restarted"
    dpy lost "$br_uri" /dev/vda "$LAB_RUN" &
    lost=$!
    await_file "$LAB_RUN/written" $lost 30 "the writer of ($1) did not get its writes acknowledged"
}
step "(2) writes acknowledged, the server killed -9 before any flush, restarted"
lost_writer 2
stop srv KILL
serve srv 10809 /dev/vda "${s1_args[@]}"
touch "$LAB_RUN/restarted"
wait $lost || fail "(2) failed: see scenario.log"
stop br
counter_above br_lost_write_flushes "$(rdma_counter br.stats lost_write_flushes)" 0 "the FLUSH after the restart of (2) failed"

# ---- (2b), (2c) a graceful restart loses nothing and fails nothing
# graceful CASE ARGS...: a fresh bridge, dpy graceful against server srv
# (served with ARGS), which it stops with SIGTERM; srv is started again
# with ARGS meanwhile.  The old server's counters go to
# srv-CASE.rdma-stats; the bridge is stopped after, its counters checked.
# FREEZE=1: the writer stops the bridge through the shutdown.
graceful() {
    local case=$1 pid
    shift
    bridge br 10.77.0.1
    rm -f "$LAB_RUN/termed" "$LAB_RUN/restarted"
    dpy graceful "$br_uri" /dev/vda "$LAB_RUN" "$(server_pid srv)" \
        ${FREEZE:+"$(server_pid br)"} &
    pid=$!
    await_file "$LAB_RUN/termed" $pid 60 "the writer of ($case) did not stop the server"
    stop srv
    cp "$LAB_OUT/srv.rdma-stats" "$LAB_OUT/srv-$case.rdma-stats"
    serve srv 10809 /dev/vda "$@"
    touch "$LAB_RUN/restarted"
    wait $pid || fail "($case) failed: see scenario.log"
    stop br
    echo "server before the restart: $(grep -E 'goodbyes|unserved|error_replies' "$LAB_OUT/srv-$case.rdma-stats" | tr '\n' ' ')"
    echo "bridge: $(grep -E 'goodbyes|resent|lost_write|reconnects|transport' "$LAB_OUT/br.stats" | tr '\n' ' ')"
    counter_above "${case}_srv_goodbyes" "$(rdma_counter "srv-$case.rdma-stats" goodbyes)" 0 "the server said goodbye, its writes flushed"
    # Each connection hears its own: a bridge that missed the idle
    # connection's goodbye (read the disconnect first, 2e) still passed
    # the checks above, that connection having nothing in flight.
    local said heard
    said=$(rdma_counter "srv-$case.rdma-stats" goodbyes)
    heard=$(rdma_counter br.stats goodbyes)
    echo "${case}_br_goodbyes = $heard"
    [ "$heard" = "$said" ] ||
        fail "($case) the server said $said goodbyes, the bridge heard ${heard:-none}"
    counter_above "${case}_br_resent" "$(rdma_counter br.stats resent)" 0 "what the old server did not do was sent again"
    [ "$(rdma_counter br.stats lost_write_flushes)" = 0 ] || fail "a FLUSH after the graceful restart failed"
}
step "(2b) SIGTERM while writes stream in, the server started again: no write fails, the next FLUSH succeeds"
graceful 2b "${s1_args[@]}"
stop srv

step "(2c) the same, no delay filter: writes arriving during the shutdown go unanswered, then are sent again"
s2_args=(-D gmblock-rdma.drain_delay_ms=1000 --filter=gmblock-rdma
    --filter=gmblock-cache -- rdma=10.77.0.1 cache-mode=writeback
    writeback-interval=3600 cache-size=64M
    rdma-stats="$LAB_OUT/srv.rdma-stats")
serve srv 10809 /dev/vda "${s2_args[@]}"
graceful 2c "${s2_args[@]}"
stop srv
counter_above 2c_srv_unserved "$(rdma_counter srv-2c.rdma-stats unserved_at_shutdown)" 0 "control: writes came while the server shut down, left undone"

step "(2e) the same, the bridge stopped (SIGSTOP) through the shutdown: it reads the disconnect with the goodbye still in its queue"
serve srv 10809 /dev/vda "${s2_args[@]}"
FREEZE=1 graceful 2e "${s2_args[@]}"
stop srv
counter_above 2e_srv_unserved "$(rdma_counter srv-2e.rdma-stats unserved_at_shutdown)" 0 "control: writes came while the server shut down, left undone"

step "(2d) SIGTERM while the write-back fails: the goodbye does not say flushed, the next FLUSH fails"
serve srv 10809 /dev/vda "${s1_args[@]}"
bridge br 10.77.0.1
lost_writer 2d
touch "$trig"
stop srv TERM 1 # exits 1: its last write-back fails too
rm -f "$trig"
cp "$LAB_OUT/srv.rdma-stats" "$LAB_OUT/srv-2d.rdma-stats"
serve srv 10809 /dev/vda "${s1_args[@]}"
touch "$LAB_RUN/restarted"
wait $lost || fail "(2d) failed: see scenario.log"
stop br
echo "bridge: $(grep -E 'goodbyes|lost_write' "$LAB_OUT/br.stats" | tr '\n' ' ')"
[ "$(rdma_counter srv-2d.rdma-stats goodbyes)" = 0 ] || fail "the server said its writes were flushed, though its write-back failed"
counter_above 2d_br_goodbyes "$(rdma_counter br.stats goodbyes)" 0 "the bridge heard the goodbye (not flushed)"
counter_above 2d_br_lost_write_flushes "$(rdma_counter br.stats lost_write_flushes)" 0 "the FLUSH after the restart failed"
bridge br 10.77.0.1

# ---- (3) failing write-back: the flush is an error until the disk recovers
step "(3a) the write-back fails: FLUSH must fail, then succeed once it works"
must dpy flushfail "$br_uri" /dev/vda "$trig"
stop srv
echo "server s1: $(grep -E 'error_replies|requests|clients_dropped' "$LAB_OUT/srv.rdma-stats" 2>/dev/null | tr '\n' ' ')"

step "(3b) half the pwrites below gmblock-rdma fail"
serve err 10809 /dev/vdb --filter=gmblock-rdma --filter=error -- \
    rdma=10.77.0.1 error-pwrite=EIO error-pwrite-rate=50% \
    rdma-stats="$LAB_OUT/err.rdma-stats"
must dpy errors "$br_uri" /dev/vdb
must head -c 8M /dev/urandom >"$LAB_RUN/e.img"
# One request in flight: nbdkit 1.32 aborts (assert in raw_send_socket)
# when a client leaves with several of its replies still to send.
if nbdcopy --connections=1 --requests=1 "$LAB_RUN/e.img" "$br_uri" 2>"$LAB_OUT/nbdcopy-err.log"; then
    fail "nbdcopy succeeded though half the server's writes failed"
fi
echo "nbdcopy failed, as it must: $(head -n 1 "$LAB_OUT/nbdcopy-err.log")"
step "reads in 1M requests, one at a time (split into pieces by the parallel path)"
must nbdcopy --request-size=1048576 --connections=1 --requests=1 "$br_uri" "$LAB_RUN/err-out.img"
stop err
counter_above err_error_replies "$(rdma_counter err.rdma-stats error_replies)" 0 "the server answered the failed writes with errors"
[ "$(rdma_counter err.rdma-stats clients_dropped)" = 0 ] || fail "a client was dropped for a failed write"
counter_above err_split_reads "$(rdma_counter err.rdma-stats split_reads)" 0 "control: the parallel path splits 1M reads"

stop br
echo "bridge: $(tr '\n' ' ' <"$LAB_OUT/br.stats")"
counter_above br_error_replies "$(rdma_counter br.stats error_replies)" 0 "the failed writes came back as error replies"

step "(3c) a split write partly failed, the server killed -9 and restarted: the next FLUSH succeeds"
err_args=(--filter=gmblock-rdma --filter=error -- rdma=10.77.0.1
    error-pwrite=EIO error-pwrite-rate=50%)
serve err 10809 /dev/vdb "${err_args[@]}"
bridge br 10.77.0.1
rm -f "$LAB_RUN/written" "$LAB_RUN/restarted"
dpy splitfail "$br_uri" /dev/vdb "$LAB_RUN" &
split=$!
await_file "$LAB_RUN/written" $split 60 "the writer of (3c) got no partly failed split write"
stop err KILL
serve err 10809 /dev/vdb "${err_args[@]}"
touch "$LAB_RUN/restarted"
wait $split || fail "(3c) failed: see scenario.log"
stop err
stop br
[ "$(rdma_counter br.stats lost_write_flushes)" = 0 ] || fail "(3c) a FLUSH failed for a write the client never had acknowledged"

# ---- (4) a serialising plugin: the filter's serial path
# Another disk behind another server process: a bridge of its own (the
# first one would rightly fail the next FLUSH, since writes the server
# of (3b) acknowledged were never flushed).
bridge br 10.77.0.1
step "(4) --filter=noparallel: one worker per client, two writers at depth 16"
serve ser 10809 /dev/vdc --filter=gmblock-rdma --filter=noparallel -- \
    rdma=10.77.0.1 rdma-stats="$LAB_OUT/ser.rdma-stats"
must head -c 16M /dev/urandom >"$LAB_RUN/p.img"
must head -c 16M /dev/urandom >"$LAB_RUN/q.img"
dpy fill "$br_uri" "$LAB_RUN/q.img" $((16 << 20)) &
other=$!
must dpy fill "$br_uri" "$LAB_RUN/p.img" 0
wait $other || fail "the second writer failed"
must nbdcopy --request-size=1048576 "$br_uri" "$LAB_RUN/ser-out.img"
stop ser
must cat "$LAB_RUN/p.img" "$LAB_RUN/q.img" >"$LAB_RUN/pq.img"
cmp "$LAB_RUN/pq.img" "$LAB_RUN/ser-out.img" || fail "the serial path read back other data"
must dd if=/dev/vdc of="$LAB_RUN/ser-disk.img" bs=1M iflag=direct status=none
cmp "$LAB_RUN/pq.img" "$LAB_RUN/ser-disk.img" || fail "the serial path's writes are not on the disk"
echo "server ser: $(tr '\n' ' ' <"$LAB_OUT/ser.rdma-stats")"
[ "$(rdma_counter ser.rdma-stats split_reads)" = 0 ] || fail "the serial path split READs"
counter_above ser_write_bytes "$(rdma_counter ser.rdma-stats write_bytes)" $(((32 << 20) - 1)) "both writers went over RDMA"
stop br
# Every disconnect above (kill -9, SIGTERM) was drained to the flushed
# receives, none timed out.
! grep -h 'no flushed receive' "$LAB_OUT"/br.nbdkit.log ||
    fail "a bridge found no flushed receive after a disconnect"
echo "rdma-durability: all checks passed"
