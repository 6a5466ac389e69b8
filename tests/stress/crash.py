#!/usr/bin/python3
# Randomized crash and write-failure test of gmblock stacks against a
# model of what must be durable.
# SPDX-License-Identifier: BSD-3-Clause
# Not part of make check: see tests/stress/README.md.
#   crash.py SEED [--ops N] [--asan] [--fault kill|wfail|fsync]
#            [--stack-json JSON] [--size N] [--delay|--no-delay] [--keep]
#            [--no-fua-covers] [--log-ops]
# Takes the stacks, sizes, request lengths and the server (with its
# fault shim preloaded, ended by kill9) from stress.py (same folder).
import argparse, errno, json, os, random, re, shutil, signal
import subprocess, sys, threading, time
import nbd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stress import (pick_stack, pick_size, pick_len, Failure, BAD_LOG,  # noqa: E402
                    TREE, RUN, Server)

K, M = 1024, 1024 * 1024
INF = float("inf")
NONZERO = re.compile(rb"[^\x00]+")


NBD_ERRNOS = {errno.EPERM, errno.EIO, errno.ENOMEM, errno.EINVAL, errno.ENOSPC,
              errno.EOVERFLOW, errno.ENOTSUP, errno.ESHUTDOWN}


class Lost(Exception):
    """The connection died under a request (after the kill)."""


def build_shim():
    so = os.path.join(RUN, "fault-syscalls.so")
    src = os.path.join(TREE, "tests", "fault-syscalls.c")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        tmp = so + f".{os.getpid()}"
        subprocess.check_call(["gcc", "-shared", "-fPIC", "-O2", "-o", tmp, src, "-ldl"])
        os.rename(tmp, so)
    return so


def xor_runs(a, b):
    """Ranges where bytes a and b (same length) differ."""
    n = len(a)
    if b is None:
        d = a
    else:
        d = (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(n, "little")
    return [(m.start(), m.end()) for m in NONZERO.finditer(d)]


class Op:
    __slots__ = ("id", "kind", "off", "n", "data", "fua", "conn", "send", "done",
                 "st", "durable", "thr")

    def __init__(self, id, kind, off, n, data, fua, conn, thr):
        self.id, self.kind, self.off, self.n, self.data = id, kind, off, n, data
        self.fua, self.conn, self.thr = fua, conn, thr
        self.send = self.done = None
        self.st = "unsent"      # ok, fail (server's error reply), nop, lost (unknown)
        self.durable = False

    def __repr__(self):
        return (f"#{self.id} {self.kind} {self.off}+{self.n} fua={int(self.fua)} c{self.conn} "
                f"t{self.thr} send={self.send} done={self.done} {self.st}"
                f"{' DURABLE' if self.durable else ''}")


class Crash:
    def __init__(self, a):
        self.a = a
        self.r = random.Random(a.seed)
        self.lock = threading.Lock()
        self.clk = 0
        self.ops = []           # write-type ops: pwrite, zero, trim
        self.flushes = []       # flush ops (kind "flush")
        self.errors = []        # harness/unexpected failures
        self.notes = {}
        self.stop = threading.Event()
        self.killed_at = INF    # clock of the kill
        self.done_ops = 0

    def tick(self):
        with self.lock:
            self.clk += 1
            return self.clk

    def note(self, k):
        with self.lock:
            self.notes[k] = self.notes.get(k, 0) + 1

    def new(self, kind, off, n, data, fua, conn, thr):
        with self.lock:
            op = Op(len(self.ops) + len(self.flushes), kind, off, n, data, fua, conn, thr)
            (self.flushes if kind == "flush" else self.ops).append(op)
        return op

    # outcome of an op -----------------------------------------------
    def finish(self, op, err):
        t = self.tick()
        if err is None:
            op.st, op.done = "ok", t
            return
        # an error reply of the server (before or after the kill: a reply
        # is a reply), or a connection that died under the request
        # (libnbd fails the commands of a dead connection with ENOTCONN,
        # an errno the NBD protocol cannot carry)
        server_reply = ("command failed" in (err.string or "")
                        and err.errnum in NBD_ERRNOS)
        if op.kind == "zero" and op.data == "fast" and server_reply and \
                err.errnum == errno.ENOTSUP:
            op.st, op.done = "nop", t
            return
        if server_reply and err.errnum == errno.ESHUTDOWN and t > self.killed_at:
            # refused by a server going down (SIGTERM): never done
            op.st, op.done = "lost", INF
        elif server_reply:
            op.st, op.done = "fail", t
            self.note(f"{op.kind}-EIO" if err.errnum == errno.EIO else f"{op.kind}-err{err.errnum}")
            if not self.fault_on_ever and op.kind != "read":
                self.errors.append(f"{op!r} failed with no fault injected: {err}")
        else:
            # the connection died (kill): it may or may not have happened
            op.st, op.done = "lost", INF
            if t < self.killed_at:
                self.errors.append(f"{op!r}: {err} before the kill")

    # random ranges (pick_len, and an roff with a hot area) -------
    def roff(self, r, n):
        x = r.random()
        if x < 0.3:
            # hot area: the first eighth, many overwrites
            hot = max(n, self.size // 8)
            off = r.randrange(0, hot - n + 1)
        elif x < 0.45:
            off = self.size - n - r.randint(0, 5)
        elif x < 0.7:
            b = r.choice([512, 4096, 65536])
            off = b * r.randrange(0, self.size // b + 1) + r.randint(-3, 3)
        else:
            off = r.randrange(0, self.size)
        return max(0, min(off, self.size - n))

    # the workers -----------------------------------------------------
    def worker(self, me):
        r = random.Random(self.a.seed * 7919 + me * 31)
        try:
            while not self.stop.is_set():
                ci = r.randrange(len(self.hs))
                h = self.hs[ci]
                if r.random() < 0.15:
                    self.burst(me, ci, h, r)
                else:
                    self.one(me, ci, h, r)
                with self.lock:
                    self.done_ops += 1
        except Lost:
            pass
        except nbd.Error as e:
            if self.tick() < self.killed_at:
                self.errors.append(f"w{me}: {e}")
        except Exception as e:
            import traceback
            self.errors.append(f"w{me}: {e!r} {traceback.format_exc()}")

    def wflags(self, r, kind):
        fua = self.can_fua and r.random() < 0.15
        fl = nbd.CMD_FLAG_FUA if fua else 0
        fast = False
        if kind == "zero":
            if r.random() < 0.4:
                fl |= nbd.CMD_FLAG_NO_HOLE
            if self.can_fast_zero and r.random() < 0.2:
                fl |= nbd.CMD_FLAG_FAST_ZERO
                fast = True
        return fl, fua, fast

    def pick_write(self, me, ci, r):
        x = r.random()
        n = pick_len(r, self.size)
        off = self.roff(r, n)
        if x < 0.72 or (x >= 0.9 and not self.can_trim):
            kind = "pwrite"
        elif x < 0.9:
            kind = "zero"
        else:
            kind = "trim"
        if kind != "pwrite" and r.random() < 0.85 and n > self.size // 8:
            # mostly short: one that fails voids what it covers
            n = r.randint(1, max(1, self.size // 8))
            off = self.roff(r, n)
        fl, fua, fast = self.wflags(r, kind)
        if kind == "pwrite":
            data = r.randbytes(n) if r.random() < 0.85 else bytes([r.randrange(1, 256)]) * n
        else:
            data = "fast" if fast else None
        return self.new(kind, off, n, data, fua, ci, me), fl

    def call(self, h, op, fl):
        if op.kind == "pwrite":
            h.pwrite(op.data, op.off, fl)
        elif op.kind == "zero":
            h.zero(op.n, op.off, fl)
        elif op.kind == "trim":
            h.trim(op.n, op.off, fl)
        elif op.kind == "flush":
            h.flush()

    def one(self, me, ci, h, r):
        x = r.random()
        if x < 0.55:
            op, fl = self.pick_write(me, ci, r)
        elif x < 0.68:
            op, fl = self.new("flush", 0, 0, None, False, ci, me), 0
        else:
            n = pick_len(r, self.size)
            off = self.roff(r, n)
            try:
                if x < 0.9 or not self.can_cache:
                    h.pread(n, off)
                else:
                    h.cache(n, off)
            except nbd.Error as e:
                if self.tick() < self.killed_at:
                    self.note("read-err")
                    if not self.fault_on_ever:
                        self.errors.append(f"w{me} read {off}+{n}: {e}")
                else:
                    raise
            return
        op.send = self.tick()
        try:
            self.call(h, op, fl)
            err = None
        except nbd.Error as e:
            err = e
        self.finish(op, err)
        if op.st == "lost":
            raise Lost()

    def burst(self, me, ci, h, r):
        """Several writes, zeros, trims, flushes in flight at once."""
        pend = []
        for _ in range(r.randint(2, 16)):
            if r.random() < 0.12:
                op, fl = self.new("flush", 0, 0, None, False, ci, me), 0
            else:
                op, fl = self.pick_write(me, ci, r)
            op.send = self.tick()
            try:
                if op.kind == "pwrite":
                    c = h.aio_pwrite(op.data, op.off, flags=fl)
                elif op.kind == "zero":
                    c = h.aio_zero(op.n, op.off, flags=fl)
                elif op.kind == "trim":
                    c = h.aio_trim(op.n, op.off, flags=fl)
                else:
                    c = h.aio_flush()
            except nbd.Error as e:
                self.finish(op, e)
                break
            pend.append((op, c))
        lost = False
        for op, c in pend:
            while True:
                try:
                    if h.aio_command_completed(c):
                        err = None
                        break
                except nbd.Error as e:
                    err = e
                    break
                try:
                    h.poll(1)
                except nbd.Error as e:
                    # dead connection: every pending command is lost
                    err = e
                    break
            self.finish(op, err)
            lost |= op.st == "lost"
        if lost:
            raise Lost()

    # the model -------------------------------------------------------
    def mark_durable(self):
        """Which successful writes a flush or FUA reply made durable."""
        if self.mode == "unsafe":
            return
        cov = [f for f in self.flushes if f.st == "ok"]
        if self.a.fua_covers:
            # gmblock documents that a FUA reply covers every write
            # acknowledged before the FUA request was sent, as a flush.
            cov += [o for o in self.ops if o.st == "ok" and o.fua]
        best_all = max((c.send for c in cov), default=-1)
        best = {}
        for c in cov:
            best[c.conn] = max(best.get(c.conn, -1), c.send)
        for o in self.ops:
            if o.st != "ok":
                continue
            limit = best_all if self.multi_conn else best.get(o.conn, -1)
            if o.fua or o.done < limit:
                o.durable = True

    def check_file(self, got, init):
        """Every byte must hold a value allowed by the model."""
        self.mark_durable()
        size = self.size
        if len(got) != size:
            return [f"file size {len(got)} != {size}"]
        ops = [o for o in self.ops if o.st not in ("unsent", "nop")]
        points = {0, size}
        for o in ops:
            points.add(o.off)
            points.add(o.off + o.n)
        points = sorted(points)
        starts = sorted(ops, key=lambda o: o.off)
        si = 0
        active = []
        bad = []
        for pi in range(len(points) - 1):
            s, e = points[pi], points[pi + 1]
            while si < len(starts) and starts[si].off <= s:
                active.append(starts[si])
                si += 1
            active = [o for o in active if o.off + o.n > s]
            # a failed write leaves its range undefined (old values may
            # come back), so durable writes before its reply do not count
            fail_t = max((o.done for o in active if o.st == "fail"), default=-1)
            floor = max((o.send for o in active if o.durable and o.kind != "trim"
                         and o.send > fail_t), default=None)
            cands = []
            for o in sorted(active, key=lambda o: -(o.done if o.done != INF else 1e18)):
                if floor is not None and o.done < floor:
                    continue
                if o.kind == "pwrite":
                    cands.append((o, floor, o.data[s - o.off:e - o.off]))
                else:
                    cands.append((o, floor, None))
            if floor is None:
                cands.append(("initial", None, init[s:e]))
            g = got[s:e]
            rem = [(0, e - s)]
            for _, _, c in cands:
                nrem = []
                for (a0, b0) in rem:
                    for (x0, x1) in xor_runs(g[a0:b0], None if c is None else c[a0:b0]):
                        nrem.append((a0 + x0, a0 + x1))
                rem = nrem
                if not rem:
                    break
            if rem:
                a0 = rem[0][0]
                b = s + a0
                msg = [f"BYTE {b} (segment [{s},{e}), {sum(y - x for x, y in rem)} bad bytes "
                       f"in it, first run [{s + rem[0][0]},{s + rem[0][1]})) holds "
                       f"{got[b]:#04x}; floor {floor}, fail_t {fail_t}; writes over it:"]
                # the writes around the floor, and any holding that value
                act = sorted(active, key=lambda o: o.send)
                k = next((i for i, o in enumerate(act) if floor is not None
                          and o.send >= floor), len(act))
                for i, o in enumerate(act):
                    v = (o.data[b - o.off] if o.kind == "pwrite" else 0)
                    if abs(i - k) <= 8 or v == got[b] or i >= len(act) - 4:
                        msg.append(f"    {o!r} value {v:#04x}")
                msg.append(f"    initial value {init[b]:#04x}")
                bad.append("\n".join(msg))
                if len(bad) >= 3:
                    break
        return bad

    # fail-stop / pending EIO (fault=fsync) -----------------------------
    def check_failstop(self):
        """After a flush failed because the disk's flush failed, the
        gmblock plugin refuses every later flush (fail-stop), and the
        cache fails each connection's next flush: no flush or FUA
        request sent after that reply may succeed."""
        if self.mode == "unsafe":
            return []
        fl = [f for f in self.flushes if f.st == "fail"]
        fl += [o for o in self.ops if o.fua and o.st == "fail"]
        if not fl:
            return []
        t = min(f.done for f in fl)
        bad = []
        for o in self.flushes + [o for o in self.ops if o.fua]:
            if o.st == "ok" and o.send > t:
                bad.append(f"FAILSTOP: {o!r} succeeded, sent after a flush failed at {t}")
        return bad[:3]

    def check_pending(self):
        """gmblock-cache's own promise, whatever the plugin does: after a
        flush below failed, every connection's next flush or FUA reply
        fails once with EIO (a FUA fast zero refused with ENOTSUP does
        not count).  The failure was counted after the first failed
        request was sent (t_lo) and before the first failed reply (t):
        each connection must have had a failed flush or FUA reply after
        t_lo, at the latest with its first flush or FUA request sent
        after t (F).  "Next" is by reply: a request of the connection
        in flight beside F may take the EIO instead of F (a burst's
        replies are seen in the order sent, so a failure sent before F's
        reply was seen counts)."""
        if self.mode in (None, "bypass", "unsafe"):
            return []
        sync = lambda o: o.kind == "flush" or (o.fua and o.st != "nop")
        fl = [o for o in self.flushes + self.ops if sync(o) and o.st == "fail"]
        if not fl:
            return []
        t = min(o.done for o in fl)
        t_lo = min(o.send for o in fl)
        bad = []
        for ci in range(len(self.hs0)):
            mine = sorted((o for o in self.flushes + self.ops
                           if o.conn == ci and sync(o) and o.st != "unsent"),
                          key=lambda o: o.send)
            after = [o for o in mine if o.send > t]
            if not after:
                continue
            f = after[0]
            if not any(o.st == "fail" and o.done > t_lo and o.send < f.done for o in mine):
                bad.append(f"PENDING: c{ci} was never told of the flush failure "
                           f"(first failed request sent at {t_lo}, first failed reply "
                           f"at {t}): {f!r} succeeded")
        return bad

    # run ---------------------------------------------------------------
    def run(self):
        a, r = self.a, self.r
        self.size = a.size or pick_size(r)
        # (drawn apart, so that --fault leaves the rest of the seed alone)
        fr = random.Random(a.seed * 3 + 1)
        fault = fr.choice(["kill", "kill", "wfail", "wfail", "fsync"])
        fault = a.fault or fault
        self.fault = fault
        self.fsync_fault = fr.choice(["fdatasync-eio", "fdatasync-lost"])
        self.fault_on_ever = False
        if a.stack_json:
            filters, opts = json.loads(a.stack_json)
            mode = next((o.split("=")[1] for o in opts if o.startswith("cache-mode=")), None)
            if "gmblock-cache" in filters and mode is None:
                mode = "adaptive"
        else:
            for _ in range(4):
                filters, opts, mode = pick_stack(r, self.size)
                if "gmblock-cache" in filters:
                    break
            # the write-back modes are the interesting ones here
            if mode is not None and mode not in ("writeback",) and r.random() < 0.45:
                opts = [o for o in opts if not o.startswith(("cache-mode=", "adaptive-"))]
                if r.random() < 0.7:
                    mode = "writeback"
                    opts.append("cache-mode=writeback")
                else:
                    mode = "adaptive"
                    opts += ["cache-mode=adaptive", "adaptive-writes=back"]
            if fault == "fsync":
                # the shim sees only the plugin's own system calls
                opts = [o for o in opts if not o.startswith("ring=")] + ["ring=none"]
            below = filters.index("gmblock-cache") + 1 if "gmblock-cache" in filters else len(filters)
            if r.random() < 0.5:
                below = len(filters)            # just above the plugin
            extra = []
            use_delay = a.delay if a.delay is not None else r.random() < 0.4
            if fault == "wfail":
                extra.append("error")
                rate = r.choice(["100%", "100%", "50%", "10%"])
                ef = os.path.join(RUN, f"errfile-{os.getpid()}")
                opts += [f"error-pwrite-rate={rate}", f"error-pwrite-file={ef}",
                         f"error=" + r.choice(["EIO", "EIO", "ENOSPC"])]
                # a failed zero or trim leaves its range undefined: the
                # model then asks nothing of it, so they fail seldom
                if r.random() < 0.2:
                    opts += [f"error-zero-rate={rate}", f"error-zero-file={ef}"]
                if r.random() < 0.2:
                    opts += [f"error-trim-rate={rate}", f"error-trim-file={ef}"]
            if use_delay:
                extra.append("delay")
                d = r.choice(["1ms", "5ms", "20ms"])
                opts += [f"delay-write={d}"]
                if r.random() < 0.5:
                    opts += [f"delay-zero={d}", f"delay-trim={d}"]
            r.shuffle(extra)
            filters = filters[:below] + extra + filters[below:]
        self.mode = mode
        self.errfile = next((o.split("=", 1)[1] for o in opts
                             if o.startswith("error-pwrite-file=")), None)
        fault_dir = None
        if fault == "fsync":
            fault_dir = os.path.join(RUN, f"faults-{os.getpid()}")
            shutil.rmtree(fault_dir, ignore_errors=True)
            os.makedirs(fault_dir)
        path = os.path.join(RUN, f"crash-{os.getpid()}.img")
        init = bytearray(random.Random(a.seed ^ 0x5eed).randbytes(self.size))
        for _ in range(r.randint(0, 3)):
            n = r.randint(1, self.size // 4 + 1)
            o = r.randrange(0, self.size - n + 1)
            init[o:o + n] = bytes(n)
        init = bytes(init)
        with open(path, "wb") as f:
            f.write(init)
        log = os.path.join(RUN, f"crashlog-{a.seed}{'-asan' if a.asan else ''}.txt")
        desc = (f"seed={a.seed} fault={fault} size={self.size} "
                f"stack={json.dumps([filters, opts])}")
        print(desc, flush=True)
        if self.errfile and os.path.exists(self.errfile):
            os.unlink(self.errfile)
        try:
            self.srv = Server(filters, opts, path, log, a.asan,
                              preload=[build_shim()] if fault_dir else (),
                              env_add={"FAULT_DIR": fault_dir} if fault_dir else None,
                              tag="c")
        except Failure as e:
            print(f"RESULT seed={a.seed} START-REFUSED {e} (see {log})", flush=True)
            os.unlink(path)
            return 0 if "STARTFAIL" in str(e) else 1
        fails = []
        self.hs = []
        try:
            nconn = r.randint(1, 4)
            for _ in range(nconn):
                h = nbd.NBD()
                h.set_strict_mode(0)
                h.connect_uri(self.srv.uri)
                self.hs.append(h)
            self.hs0 = list(self.hs)
            h0 = self.hs[0]
            self.can_fua, self.can_trim = h0.can_fua(), h0.can_trim()
            self.can_fast_zero, self.can_cache = h0.can_fast_zero(), h0.can_cache()
            self.multi_conn = h0.can_multi_conn()
            nthr = r.randint(2, 6)
            total = a.ops
            # the schedule, in operations done
            t_on = r.randint(total // 10, total // 2)
            t_off = r.choice([None, r.randint(t_on, total)])
            t_end = r.randint(max(t_on, total // 5), total)
            quiesce = fault != "kill" and r.random() < 0.5
            # sometimes SIGTERM first, and SIGKILL in the middle of the
            # shutdown's write-back
            self.term_first = r.choice([0, 0.005, 0.02, 0.1]) if r.random() < 0.25 else None
            if t_off is not None and t_off > t_end:
                t_off = None
            print(f"  plan: conns={nconn} threads={nthr} multi_conn={self.multi_conn} "
                  f"fua={self.can_fua} fault_on@{t_on if fault != 'kill' else '-'} "
                  f"off@{t_off} end@{t_end} {'quiesce+flush, ' if quiesce else ''}"
                  f"{'kill' if self.term_first is None else f'term, {self.term_first}s, kill'}",
                  flush=True)
            ths = [threading.Thread(target=self.worker, args=(t,)) for t in range(nthr)]
            for t in ths:
                t.start()
            state = 0
            t0 = time.time()
            while True:
                if self.errors:
                    break
                with self.lock:
                    d = self.done_ops
                if fault != "kill" and state == 0 and d >= t_on:
                    self.fault_on()
                    state = 1
                if state == 1 and t_off is not None and d >= t_off:
                    self.fault_off()
                    state = 2
                if d >= t_end:
                    break
                if time.time() - t0 > a.timeout:
                    self.errors.append(f"HANG? only {d} ops in {a.timeout}s")
                    break
                time.sleep(0.002)
            if quiesce and not self.errors:
                self.stop.set()
                for t in ths:
                    t.join(300)
                    if t.is_alive():
                        raise Failure("HANG: worker stuck for 300s")
                if state == 1:
                    self.fault_off()
                # every connection flushes until one succeeds; the cache
                # may fail each connection's next flush once
                for ci, h in enumerate(self.hs):
                    for _ in range(3):
                        f = self.new("flush", 0, 0, None, False, ci, -1)
                        f.send = self.tick()
                        try:
                            h.flush()
                            self.finish(f, None)
                            break
                        except nbd.Error as e:
                            self.finish(f, e)
                    else:
                        if fault != "fsync":
                            fails.append(f"NO-RECOVERY: c{ci} flush fails 3 times "
                                         f"after the fault was removed")
            self.killed_at = self.tick()
            self.srv.kill9(self.term_first)
            self.stop.set()
            for t in ths:
                t.join(300)
                if t.is_alive():
                    raise Failure("HANG: worker stuck for 300s after the kill")
            for h in self.hs:
                try:
                    h.shutdown()
                except nbd.Error:
                    pass
            self.hs = []
            if self.errors:
                fails += self.errors[:3]
            time.sleep(0.2)
            got = open(path, "rb").read()
            fails += self.check_file(got, init)
            if fault == "fsync":
                if a.failstop_check:
                    fails += self.check_failstop()
                fails += self.check_pending()
        except Failure as e:
            fails.append(str(e))
        except nbd.Error as e:
            fails.append(f"nbd error: {e}")
        finally:
            self.stop.set()
            if self.srv.p.poll() is None:
                self.srv.kill9()
            if self.errfile and os.path.exists(self.errfile):
                os.unlink(self.errfile)
            if fault_dir:
                shutil.rmtree(fault_dir, ignore_errors=True)
        text = open(log, "rb").read().decode(errors="replace")
        for line in text.splitlines():
            if BAD_LOG.search(line) and "###" not in line:
                fails.append("LOG: " + line.strip()[:300])
                break
        if a.asan:
            logs = os.path.join(RUN, "asanlogs")
            for fn in os.listdir(logs):
                fails.append(f"SANITIZER report {logs}/{fn}")
        st = {}
        for o in self.ops + self.flushes:
            k = f"{o.kind}{'-fua' if o.fua else ''}-{o.st}"
            st[k] = st.get(k, 0) + 1
        ndur = sum(1 for o in self.ops if o.durable)
        print(f"RESULT seed={a.seed} {'FAIL' if fails else 'PASS'} durable={ndur} "
              f"{dict(sorted(st.items()))} {self.notes} | {desc}", flush=True)
        for f in fails:
            print("  FAIL:", f, flush=True)
        if a.log_ops or fails:
            with open(log + ".ops", "w") as f:
                for o in sorted(self.ops + self.flushes, key=lambda o: (o.send or 0)):
                    f.write(repr(o) + "\n")
            print(f"  ops logged in {log}.ops", flush=True)
        if not fails and not a.keep:
            os.unlink(path)
            os.unlink(log)
        elif fails:
            print(f"  kept {path} and {log}", flush=True)
        return 1 if fails else 0

    def fault_on(self):
        self.fault_on_ever = True
        if self.fault == "wfail":
            open(self.errfile, "w").close()
        elif self.fault == "fsync":
            open(self.fault_path(), "w").close()
        self.note(f"fault-on@{self.tick()}")

    def fault_off(self):
        t = self.tick()
        if self.fault == "wfail":
            os.unlink(self.errfile)
        elif self.fault == "fsync" and os.path.exists(self.fault_path()):
            os.unlink(self.fault_path())
        self.note(f"fault-off@{t}")

    def fault_path(self):
        # fdatasync-eio: every fdatasync fails; fdatasync-lost: the next
        # one fails, as Linux reports a lost write-back once
        return os.path.join(RUN, f"faults-{os.getpid()}", self.fsync_fault)


def main():
    import faulthandler
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("seed", type=int)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--asan", action="store_true")
    ap.add_argument("--fault", choices=["kill", "wfail", "fsync"])
    ap.add_argument("--stack-json")
    ap.add_argument("--size", type=int)
    ap.add_argument("--delay", dest="delay", action="store_true", default=None)
    ap.add_argument("--no-delay", dest="delay", action="store_false")
    ap.add_argument("--no-fua-covers", dest="fua_covers", action="store_false")
    ap.add_argument("--no-failstop-check", dest="failstop_check", action="store_false",
                    help="for a plugin built without fail-stop: check only the "
                    "cache's per-connection EIO")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--log-ops", action="store_true")
    a = ap.parse_args()
    return Crash(a).run()


if __name__ == "__main__":
    sys.exit(main())
