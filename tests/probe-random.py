#!/usr/bin/python3
# Adversarial NBD client probe for gmblock stacks.
#
# Starts nbdkit (./nbdkit wrapper of this tree, -f -v, log to a file) on
# a Unix socket with the given stack, then runs batches of concurrent
# requests over several connections (threads, several commands in flight
# per connection): pread / pwrite / trim / zero (FUA, FAST_ZERO, NO_HOLE,
# MAY_TRIM), flush, cache, block_status, with unaligned offsets and
# lengths from 1 byte up to past the advertised maximum.  Requests within
# one batch never overlap a changing request (so the result is
# deterministic), but they may share blocks (read-modify-write races).
# NBD_CMD_CACHE is allowed to overlap writes (prefetch racing a write).
# Every read and every extent is checked against a shadow model.
# Out-of-range and oversized requests are checked for their errno, and
# the connection must keep working afterwards.  At the end: a flush on
# one connection and then either SIGKILL (the file must hold everything
# acknowledged before the flush: over a write-back cache that checks the
# flush wrote the dirty blocks down; over the plugin alone, that writes
# were acknowledged only once the kernel had them, since a kill cannot
# lose those) or SIGTERM (clean shutdown,
# exit status 0, file == model), and the log is scanned for sanitizer
# reports, assertions and crashes.
#
#   probe.py --stack NAME --file F [--seed N] [--batches N] [--conns N]
#            [--strict] [--kill] [--control] [--builddir DIR] [--preload LIBS]
#   probe.py --list          the stack names
import argparse
import errno
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import nbd

K, M = 1024, 1024 * 1024
TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CACHE = ["--filter=gmblock-cache"]
RA = ["--filter=gmblock-readahead"]
STRIPE = ["--filter=gmblock-stripe"]
STRIPE_OPTS = ["stripe-chunk=64K", "stripe-data-disks=3", "stripe-parity=1"]
SMALLCACHE = ["cache-size=2M", "cache-block-size=64K"]

STACKS = {
    "plain": ([], []),
    "plain-buffered": ([], ["direct=false"]),
    "plain-ring-none": ([], ["ring=none"]),
    "plain-ring-shared": ([], ["ring=shared"]),
    "plain-smallpool": ([], ["pool-size=1M"]),
    "plain-discard-ignore": ([], ["discard=ignore"]),
    "cache-bypass": (CACHE, ["cache-mode=bypass"]),
    "cache-read": (CACHE, ["cache-mode=read"]),
    "cache-writethrough": (CACHE, ["cache-mode=writethrough"]),
    "cache-writeback": (CACHE, ["cache-mode=writeback"]),
    "cache-unsafe": (CACHE, ["cache-mode=unsafe"]),
    "cache-adaptive": (CACHE, ["cache-mode=adaptive"]),
    "cache-adaptive-back": (CACHE, ["cache-mode=adaptive", "adaptive-writes=back"]),
    "cache-writeback-small": (CACHE, ["cache-mode=writeback"] + SMALLCACHE),
    "cache-writeback-4k": (CACHE, ["cache-mode=writeback", "cache-size=64K", "cache-block-size=4K"]),
    "cache-writethrough-small": (CACHE, ["cache-mode=writethrough"] + SMALLCACHE),
    "cache-adaptive-back-small": (CACHE, ["adaptive-writes=back", "adaptive-scan=64K"] + SMALLCACHE),
    "cache-writeback-discard-ignore": (CACHE, ["cache-mode=writeback", "discard=ignore"]),
    "cache-writethrough-discard-ignore": (CACHE, ["cache-mode=writethrough", "discard=ignore"]),
    "cache-writeback-buffered": (CACHE, ["cache-mode=writeback", "direct=false"]),
    "ra-cache": (RA + CACHE, []),
    "ra-cache-writeback": (RA + CACHE, ["cache-mode=writeback", "ra-min=4K", "ra-max=256K"]),
    "ra-cache-small": (RA + CACHE, ["cache-mode=writeback", "ra-min=64K", "ra-max=1M"] + SMALLCACHE),
    "ra-buffered": (RA, ["direct=false"]),
    "ra-plain": (RA, []),
    "stripe-plain": (STRIPE, STRIPE_OPTS),
    "ra-stripe-cache-wb": (RA + STRIPE + CACHE, STRIPE_OPTS + ["cache-mode=writeback"]),
    "ra-stripe-cache-wb-small": (RA + STRIPE + CACHE, STRIPE_OPTS + ["cache-mode=writeback", "writeback-hold=0", "writeback-interval=0.01"] + SMALLCACHE),
    "cache-stripe-wb-small": (CACHE + STRIPE, STRIPE_OPTS + ["cache-mode=writeback"] + SMALLCACHE),
}

BAD_LOG = re.compile(r"AddressSanitizer|LeakSanitizer|runtime error|"
                     r"[Aa]ssertion|Segmentation|SIGSEGV|SIGABRT|"
                     r"double free|stack smashing|core dumped|"
                     r"Aborted|\bBUG\b")

# The request mix: each kind up to its cumulative probability.
MIX = [("pread", 0.34), ("pwrite", 0.62), ("trim", 0.70), ("zero", 0.80),
       ("flush", 0.85), ("cache", 0.89), ("seqread", 0.92),
       ("block_status", 1.01)]

# Mask values of the model, per byte.
EXACT, OLD_OR_ZERO, ANY = 0, 1, 2
TRIM_T = bytes([OLD_OR_ZERO, OLD_OR_ZERO, ANY]) + bytes(253)


class Failure(Exception):
    pass


class Server:
    def __init__(self, stack, path, log, builddir=None, preload=None,
                 extra=()):
        filters, opts = STACKS[stack]
        self.dir = tempfile.mkdtemp(prefix="rvp-")
        self.sock = os.path.join(self.dir, "sock")
        self.uri = "nbd+unix:///?socket=" + self.sock
        env = dict(os.environ)
        if builddir:
            env["GMBLOCK_BUILDDIR"] = builddir
        if preload:
            env["GMBLOCK_PRELOAD"] = preload
        self.cmd = ([os.path.join(TOP, "nbdkit"), "-f", "-v", "-U",
                     self.sock] + filters + ["gmblock", "file=" + path]
                    + opts + list(extra))
        self.logf = open(log, "ab")
        self.logname = log
        self.logf.write(("### " + " ".join(self.cmd) + "\n").encode())
        self.logf.flush()
        self.p = subprocess.Popen(self.cmd, stdout=self.logf,
                                  stderr=self.logf, env=env)
        t0 = time.time()
        while not os.path.exists(self.sock):
            if self.p.poll() is not None:
                raise Failure(f"nbdkit exited at start ({self.p.returncode})"
                              f", see {log}")
            if time.time() - t0 > 60:
                raise Failure("nbdkit did not start in 60s")
            time.sleep(0.05)
        # The socket exists from bind(), a moment before listen(): a
        # connect in between is refused (seen under load).
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.sock)
                break
            except ConnectionRefusedError:
                if self.p.poll() is not None or time.time() - t0 > 60:
                    raise Failure(f"nbdkit does not accept connections, "
                                  f"see {log}")
                time.sleep(0.05)
            finally:
                s.close()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        self.p.send_signal(sig)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise Failure(f"HANG: nbdkit did not exit {timeout}s after {sig!r}")
        self.logf.close()
        return rc


def connect(uri, strict):
    h = nbd.NBD()
    if not strict:
        h.set_strict_mode(0)
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(uri)
    return h


class Probe:
    def __init__(self, a):
        self.a = a
        self.seed = a.seed
        self.rng = random.Random(a.seed)
        self.notes = []
        self.fails = []
        self.stats = {}

    # ---- model -----------------------------------------------------------
    def check_data(self, what, off, got, data=None, mask=None):
        data = self.data if data is None else data
        mask = self.mask if mask is None else mask
        n = len(got)
        want = data[off:off + n]
        if got == want:
            return
        m = mask[off:off + n]
        C = 4096
        for c0 in range(0, n, C):
            g, w, mm = got[c0:c0 + C], want[c0:c0 + C], m[c0:c0 + C]
            if g == w:
                continue
            if mm.count(EXACT) == 0 and (g.count(0) == len(g)
                                          or mm.count(OLD_OR_ZERO) == 0):
                continue
            self._check_bytes(what, off, n, c0, g, w, mm)

    def _check_bytes(self, what, off, n, c0, got, want, m):
        for i in range(len(got)):
            g, w = got[i], want[i]
            if g == w:
                continue
            if m[i] == ANY or (m[i] == OLD_OR_ZERO and g == 0):
                continue
            raise Failure(f"WRONG DATA {what}: byte {off + c0 + i} "
                          f"(request offset {off}, length {n}): got {g:#04x}"
                          f", want {w:#04x} (mask {m[i]})")

    def apply(self, op):
        kind, off, n = op["kind"], op.get("off"), op.get("n")
        if op.get("err") is not None:
            if kind in ("pwrite", "trim", "zero") and not (
                    kind == "zero" and op["err"] == errno.ENOTSUP
                    and op["flags"] & nbd.CMD_FLAG_FAST_ZERO):
                # A failed change leaves the range undefined.
                self.mask[off:off + n] = bytes([ANY]) * n
            return
        if kind == "pwrite":
            self.data[off:off + n] = op["buf"]
            self.mask[off:off + n] = bytes(n)
        elif kind == "zero":
            self.data[off:off + n] = bytes(n)
            self.mask[off:off + n] = bytes(n)
        elif kind == "trim":
            self.mask[off:off + n] = self.mask[off:off + n].translate(TRIM_T)

    # ---- random ranges ---------------------------------------------------
    def rand_len(self, big_ok=True):
        r = self.rng.random()
        if r < 0.15:
            return self.rng.choice([1, 2, 511, 512, 513, 4095, 4096, 4097,
                                    65535, 65536, 65537, 131072 + 1])
        if r < 0.55:
            return self.rng.randint(1, 16 * K)
        if r < 0.85:
            return self.rng.randint(1, 1 * M)
        if r < 0.97 or not big_ok:
            return self.rng.randint(1 * M, 8 * M)
        return self.rng.randint(8 * M, 40 * M)  # up to past the 32M max

    def rand_off(self, n):
        size = self.size
        if n >= size:
            return 0, size
        r = self.rng.random()
        if r < 0.15:
            off = size - n - self.rng.randint(0, 9)      # the very end
        elif r < 0.45:
            b = self.rng.choice([512, 4096, 65536, 192 * K, 1 * M])
            off = b * self.rng.randrange(0, size // b + 1) + \
                self.rng.randint(-7, 7)
        elif r < 0.6:
            off = self.hot + self.rng.randint(-70 * K, 70 * K)  # a hot spot
        else:
            off = self.rng.randrange(0, size - n + 1)
        off = max(0, min(off, size - n))
        return off, n

    # ---- one batch of concurrent commands --------------------------------
    def make_batch(self):
        ops = []
        busy = []        # ranges changed in this batch
        used = []        # ranges read in this batch
        nops = self.rng.randint(1, 4 * self.a.conns)
        if self.rng.random() < 0.1:
            self.hot = self.rng.randrange(0, self.size)

        def overlaps(lst, o, n):
            return any(o < bo + bn and bo < o + n for bo, bn in lst)

        for _ in range(nops):
            r = self.rng.random()
            ci = self.rng.randrange(len(self.hs))
            kind = next(k for k, top in MIX if r < top)
            if kind in ("pwrite", "trim", "zero") and not self.can_write:
                kind = "pread"
            if kind == "trim" and not self.can_trim:
                kind = "zero"
            if kind == "cache" and not self.can_cache:
                kind = "pread"
            if kind == "flush" and not self.can_flush:
                kind = "pread"
            if kind == "zero" and not self.can_zero:
                kind = "pwrite"
            op = {"kind": kind, "conn": ci, "flags": 0}
            if kind == "flush":
                ops.append(op)
                continue
            if kind == "seqread":
                # A sequential stream (readahead), pieces in flight at once.
                piece = self.rng.choice([512, 4096, 4097, 65536, 131072])
                cnt = self.rng.randint(8, 64)
                n = min(piece * cnt, self.size)
                off = self.rng.choice([0, self.size - n,
                                       self.rng.randrange(0, self.size - n + 1)])
                if overlaps(busy, off, n):
                    continue
                used.append((off, n))
                op.update(off=off, n=n, piece=piece)
                ops.append(op)
                continue
            if kind in ("trim", "zero") and self.rng.random() < 0.2:
                n = self.rng.randint(1, min(self.size, 100 * M))
            else:
                n = min(self.rand_len(), self.size)
            off, n = self.rand_off(n)
            if self.a.strict and self.rng.random() < 0.9:
                # Mostly what a strict client may send: aligned, in bounds.
                mb = self.min_block
                off -= off % mb
                n = max(mb, n - n % mb)
                if kind in ("pread", "pwrite"):
                    n = min(n, self.max_block)
                if off + n > self.size:
                    n = self.size - off
            if kind in ("pwrite", "trim", "zero"):
                if overlaps(busy, off, n) or overlaps(used, off, n):
                    continue
                busy.append((off, n))
            elif kind in ("pread", "block_status"):
                if overlaps(busy, off, n):
                    continue
                used.append((off, n))
            op["off"], op["n"] = off, n
            f = 0
            if kind in ("pwrite", "trim", "zero") and self.can_fua and \
                    self.rng.random() < 0.25:
                f |= nbd.CMD_FLAG_FUA
            if kind == "zero":
                if self.rng.random() < 0.3:
                    f |= nbd.CMD_FLAG_NO_HOLE
                if self.can_fast_zero and self.rng.random() < 0.3:
                    f |= nbd.CMD_FLAG_FAST_ZERO
            if kind == "block_status" and self.rng.random() < 0.3:
                f |= nbd.CMD_FLAG_REQ_ONE
            op["flags"] = f
            if kind == "pwrite":
                if self.rng.random() < 0.2:
                    op["buf"] = bytes([self.rng.randrange(256)]) * n
                else:
                    op["buf"] = self.rng.randbytes(n)
            ops.append(op)
        return ops

    def run_conn(self, h, ops, errs):
        try:
            pending = []
            for op in ops:
                k, f = op["kind"], op["flags"]
                try:
                    c = self.issue(h, op, k, f)
                except nbd.Error as e:       # refused by the client
                    op["client"] = e.string
                    continue
                pending.append((c, op))
            for c, op in pending:
                if op["kind"] == "seqread":
                    for c2 in c:
                        while not h.aio_command_completed(c2):
                            h.poll(-1)
                    op["err"] = None
                    continue
                while True:
                    try:
                        done = h.aio_command_completed(c)
                    except nbd.Error as e:
                        op["err"] = e.errnum
                        op["errmsg"] = e.string
                        break
                    if done:
                        op["err"] = None
                        break
                    h.poll(-1)
        except Exception as e:          # noqa
            errs.append(e)

    def issue(self, h, op, k, f):
                if k == "seqread":
                    op["bs"] = []
                    cs = []
                    for o in range(op["off"], op["off"] + op["n"], op["piece"]):
                        b = nbd.Buffer(min(op["piece"], op["off"] + op["n"] - o))
                        op["bs"].append((o, b))
                        cs.append(h.aio_pread(b, o))
                    return cs
                if k == "pread":
                    op["b"] = nbd.Buffer(op["n"])
                    c = h.aio_pread(op["b"], op["off"], flags=f)
                elif k == "pwrite":
                    c = h.aio_pwrite(nbd.Buffer.from_bytearray(
                        bytearray(op["buf"])), op["off"], flags=f)
                elif k == "trim":
                    c = h.aio_trim(op["n"], op["off"], flags=f)
                elif k == "zero":
                    c = h.aio_zero(op["n"], op["off"], flags=f)
                elif k == "flush":
                    c = h.aio_flush()
                elif k == "cache":
                    c = h.aio_cache(op["n"], op["off"])
                elif k == "block_status":
                    op["ext"] = []

                    def cb(ctx, o, entries, err, op=op):
                        if ctx == nbd.CONTEXT_BASE_ALLOCATION:
                            op["ext"].append((o, list(entries)))
                        return 0
                    c = h.aio_block_status(op["n"], op["off"], cb, flags=f)
                return c

    def describe(self, op):
        s = f"{op['kind']} conn={op['conn']}"
        if "off" in op:
            s += f" off={op['off']} len={op['n']}"
        if op["flags"]:
            s += f" flags={op['flags']:#x}"
        return s

    def run_batch(self, bi):
        ops = self.make_batch()
        per = [[] for _ in self.hs]
        for op in ops:
            per[op["conn"]].append(op)
        errs = []
        ts = [threading.Thread(target=self.run_conn, args=(self.hs[i], per[i], errs))
              for i in range(len(self.hs)) if per[i]]
        for t in ts:
            t.start()
        for t in ts:
            t.join(self.a.op_timeout)
            if t.is_alive():
                raise Failure(f"HANG: batch {bi} not answered in "
                              f"{self.a.op_timeout}s: "
                              + "; ".join(self.describe(o) for o in ops))
        if errs:
            raise Failure(f"client error in batch {bi}: {errs[0]!r}")
        # Check the reads against the model before the batch.
        for op in ops:
            k = op["kind"]
            if "client" in op:
                self.stats["client_refused"] = self.stats.get("client_refused", 0) + 1
                continue
            self.stats[k] = self.stats.get(k, 0) + 1
            err = op.get("err")
            if err is not None:
                ok = (k == "zero" and op["flags"] & nbd.CMD_FLAG_FAST_ZERO
                      and err == errno.ENOTSUP)
                if not ok:
                    msg = (f"batch {bi}: {self.describe(op)} failed: "
                           f"{op.get('errmsg')}")
                    if op.get("n", 0) > self.max_block:
                        self.note(msg + " (beyond advertised maximum)")
                    else:
                        raise Failure("UNEXPECTED ERROR " + msg)
                continue
            if k == "pread":
                self.check_data(f"batch {bi} {self.describe(op)}",
                                op["off"], bytes(op["b"].to_bytearray()))
            elif k == "block_status":
                self.check_extents(bi, op)
            elif k == "seqread":
                for o, b in op["bs"]:
                    self.check_data(f"batch {bi} {self.describe(op)} piece "
                                    f"at {o}", o, bytes(b.to_bytearray()))
        for op in ops:
            if "client" not in op:
                self.apply(op)
        self.last_ops = ops

    def check_extents(self, bi, op):
        off, n = op["off"], op["n"]
        pos = off
        for (o, entries) in op["ext"]:
            if o != off:
                raise Failure(f"batch {bi}: extents start at {o}, not {off}")
            for i in range(0, len(entries), 2):
                ln, st = entries[i], entries[i + 1]
                if ln == 0:
                    raise Failure(f"batch {bi}: zero-length extent")
                end = min(pos + ln, self.size)
                if pos + ln > self.size:
                    raise Failure(f"batch {bi} {self.describe(op)}: extent "
                                  f"[{pos},{pos + ln}) past the end {self.size}")
                if st & nbd.STATE_ZERO:
                    seg = self.data[pos:end]
                    if seg.count(0) != len(seg) and \
                            self.mask[pos:end].count(EXACT):
                        # only uncertain bytes may be non-zero
                        for j in range(pos, end):
                            if self.data[j] and self.mask[j] == EXACT:
                                raise Failure(
                                    f"WRONG EXTENTS batch {bi} "
                                    f"{self.describe(op)}: [{pos},{end}) "
                                    f"reported zero (state {st}) but byte "
                                    f"{j} is {self.data[j]:#04x}")
                pos += ln
        if pos <= off:
            raise Failure(f"batch {bi} {self.describe(op)}: no extents")

    def note(self, s):
        if s not in self.notes:
            self.notes.append(s)
            print("NOTE", s, flush=True)

    # ---- error replies ---------------------------------------------------
    def expect_error(self, h, what, fn, want):
        try:
            fn()
        except nbd.Error as e:
            if "command failed" not in (e.string or ""):
                self.note(f"{what}: client-side refusal: {e.string}")
                return "client"
            self.stats.setdefault("errnos", {})[what] = e.errno
            if want and e.errnum not in want:
                self.fails.append(f"ERRNO {what}: got {e.errno} "
                                  f"({e.string}), want "
                                  f"{'/'.join(errno.errorcode[w] for w in want)}")
                print("FAIL", self.fails[-1], flush=True)
            return e.errnum
        # Success where it must fail.
        self.fails.append(f"SUCCESS {what}: must fail")
        print("FAIL", self.fails[-1], flush=True)
        return 0

    def error_probes(self):
        h = self.hs[0]
        size = self.size
        E = [errno.EINVAL]
        ENOSPC = [errno.ENOSPC]     # NBD: a write past the end
        W = self.can_write
        probes = [
            ("pread past end", lambda: h.pread(2, size - 1), E),
            ("pread at end", lambda: h.pread(1, size), E),
            ("pread far", lambda: h.pread(4096, size + 100 * M), E),
            ("pread offset 2^63-1", lambda: h.pread(1, 2**63 - 1), E),
            ("pread offset wrap", lambda: h.pread(4096, 2**64 - 2048), E),
            ("cache past end", lambda: h.cache(4097, max(0, size - 4096)), E),
            ("block_status at end", lambda: h.block_status(1, size, lambda *a: 0), E),
            ("block_status offset wrap",
             lambda: h.block_status(4096, 2**64 - 2048, lambda *a: 0), E),
        ]
        if W:
            probes += [
                ("pwrite past end", lambda: h.pwrite(b"x" * 3, size - 2), ENOSPC),
                ("pwrite at end", lambda: h.pwrite(b"x", size), ENOSPC),
                ("pwrite offset wrap",
                 lambda: h.pwrite(b"y" * 4096, 2**64 - 2048), ENOSPC),
                ("trim past end", lambda: h.trim(2, size - 1), E),
                ("trim huge", lambda: h.trim(0xffffffff, size - 5), E),
                ("zero past end", lambda: h.zero(8192, max(0, size - 4096)), ENOSPC),
                ("zero wrap", lambda: h.zero(0xffffffff, 2**64 - 4096), ENOSPC),
                ("zero fast past end", lambda: h.zero(
                    8192, max(0, size - 4096), flags=nbd.CMD_FLAG_FAST_ZERO), ENOSPC),
                ("pwrite FUA past end", lambda: h.pwrite(
                    b"z" * (size + 1), 0, flags=nbd.CMD_FLAG_FUA), ENOSPC),
            ]
        for what, fn, want in probes:
            r = self.expect_error(h, what, fn, want)
            # the connection must still work and the data be intact
            if r != "client":
                self.verify_range(f"after {what}", max(0, size - 8192), 8192)
        # Zero-length requests: NBD says they are allowed (may be
        # refused with EINVAL); they must not break the connection.
        for what, fn in [("pread 0", lambda: h.pread(0, 0)),
                         ("pread 0 at end", lambda: h.pread(0, size)),
                         ("trim 0", lambda: h.trim(0, 4096) if W else None),
                         ("zero 0", lambda: h.zero(0, 4096) if W else None),
                         ("pwrite 0", lambda: h.pwrite(b"", 4096) if W else None)]:
            try:
                fn()
            except nbd.Error as e:
                self.note(f"{what}: {e.string}")
        self.verify_range("after zero-length", 0, 8192)
        # Oversized requests (over nbdkit's 64M buffer limit).
        for what, fn in [("pread 64M+1", lambda: h.pread(64 * M + 1, 0)
                          if size > 64 * M else None),
                         ("pread 33M", lambda: h.pread(33 * M, 0)
                          if size >= 33 * M else None)]:
            try:
                b = fn()
                if b is not None:
                    self.check_data(what, 0, b)
                    self.note(f"{what}: served")
            except nbd.Error as e:
                self.note(f"{what}: {e.string}")
        self.verify_range("after oversize", 0, 8192)

    # ---- whole verification ---------------------------------------------
    def verify_range(self, what, off, n, h=None):
        h = h or (self.checker if self.a.strict else self.rng.choice(self.hs))
        n = min(n, self.size - off)
        while n > 0:
            c = min(n, 16 * M)
            self.check_data(what, off, h.pread(c, off))
            off += c
            n -= c

    def verify_file(self, what):
        fd = os.open(self.a.file, os.O_RDONLY)
        try:
            try:
                import fcntl
                fcntl.ioctl(fd, 0x1261)          # BLKFLSBUF: drop stale pages
            except OSError:
                pass
            got = b""
            while len(got) < self.size:
                c = os.pread(fd, self.size - len(got), len(got))
                if not c:
                    break
                got += c
        finally:
            os.close(fd)
        if len(got) != self.size:
            raise Failure(f"{what}: backing file is {len(got)} bytes, "
                          f"export {self.size}")
        self.check_data(what, 0, got)

    # ---- main ------------------------------------------------------------
    def run(self):
        a = self.a
        # Initial contents: random, written directly to the file.
        with open(a.file, "rb") as f:
            self.size = f.seek(0, os.SEEK_END)   # block devices too
        init = random.Random(a.seed ^ 0x5eed).randbytes(self.size)
        with open(a.file, "r+b") as f:
            f.write(init)
            f.flush()
            os.fsync(f.fileno())
        self.data = bytearray(init)
        self.mask = bytearray(self.size)
        self.hot = self.size // 2
        log = a.log or f"/var/tmp/rvp-{a.stack}-{a.seed}.log"
        srv = Server(a.stack, a.file, log, a.builddir, a.preload)
        self.srv = srv
        try:
            self.hs = [connect(srv.uri, a.strict) for _ in range(a.conns)]
            # Strict clients refuse unaligned reads: check with a lax one.
            self.checker = connect(srv.uri, False) if a.strict else None
            h = self.hs[0]
            assert h.get_size() == self.size
            self.can_write = not h.is_read_only()
            self.can_flush = h.can_flush()
            self.can_fua = h.can_fua()
            self.can_trim = h.can_trim()
            self.can_zero = h.can_zero()
            self.can_fast_zero = h.can_fast_zero()
            self.can_cache = h.can_cache()
            self.multi = h.can_multi_conn()
            try:
                self.min_block = h.get_block_size(nbd.SIZE_MINIMUM)
                self.max_block = h.get_block_size(nbd.SIZE_MAXIMUM)
                self.pref_block = h.get_block_size(nbd.SIZE_PREFERRED)
            except nbd.Error:
                self.min_block, self.max_block, self.pref_block = 1, 32 * M, 4096
            print(f"stack={a.stack} seed={a.seed} size={self.size} "
                  f"blocks={self.min_block}/{self.pref_block}/{self.max_block} "
                  f"write={self.can_write} flush={self.can_flush} "
                  f"fua={self.can_fua} trim={self.can_trim} "
                  f"zero={self.can_zero} fast_zero={self.can_fast_zero} "
                  f"cache={self.can_cache} multi_conn={self.multi} "
                  f"strict={a.strict}", flush=True)
            self.verify_range("initial", 0, self.size)
            self.error_probes()
            for bi in range(a.batches):
                try:
                    self.run_batch(bi)
                except nbd.Error as e:
                    raise Failure(f"batch {bi}: {e}")
                if bi % 50 == 49:
                    off, n = self.rand_off(min(self.size, 4 * M))
                    self.verify_range(f"after batch {bi}", off, n)
            if a.control:
                # Negative control: one byte changed behind the server's
                # back (the plain plugin reads the file itself) must be
                # caught by the final check.
                fd = os.open(a.file, os.O_RDWR)
                old = os.pread(fd, 1, 4097)
                os.pwrite(fd, bytes([old[0] ^ 0x5a]), 4097)
                os.close(fd)
            self.verify_range("final", 0, self.size)
            # A flush on the last connection covers every connection's
            # writes (multi-conn).
            self.hs[-1].flush()
            unsafe = "unsafe" in a.stack
            if a.kill and not unsafe:
                rc = srv.stop(signal.SIGKILL)
                self.verify_file("file after flush + SIGKILL")
            else:
                for hh in self.hs + ([self.checker] if self.checker else []):
                    hh.shutdown()
                hh = self.hs = self.checker = None
                # nbdkit 1.32 skips a connection's .close when SIGTERM
                # comes before it has finished with the disconnect (the
                # suite's wait_idle): give it time, or LSan reports the
                # connection's contexts.
                time.sleep(1.5)
                rc = srv.stop(signal.SIGTERM)
                if rc != 0:
                    self.fails.append(f"nbdkit exit status {rc} after SIGTERM")
                self.verify_file("file after SIGTERM")
        except Failure as e:
            self.fails.append(str(e))
            print("FAIL", e, flush=True)
            if srv.p.poll() is not None:
                self.fails.append(f"nbdkit died: status {srv.p.returncode}")
            # nbdkit 1.32 waits for open connections at SIGTERM (even with
            # the memory plugin): close ours first.
            for hh in (getattr(self, "hs", None) or []) + [getattr(self, "checker", None)]:
                if hh is None:
                    continue
                try:
                    hh.shutdown()
                except Exception:       # noqa
                    pass
            hh = None
            self.hs, self.checker = [], None
            time.sleep(1.5)
            try:
                srv.stop(signal.SIGTERM, 30)
            except Failure as e2:
                self.fails.append(str(e2))
        finally:
            if srv.p.poll() is None:
                srv.p.kill()
                srv.p.wait()
            shutil.rmtree(srv.dir, ignore_errors=True)
        # The log.
        with open(log, "rb") as f:
            text = f.read().decode(errors="replace")
        for line in text.splitlines():
            if BAD_LOG.search(line):
                self.fails.append("LOG: " + line.strip()[:300])
                break
        print(f"stack={a.stack} seed={a.seed} ops={self.stats} "
              f"{'FAIL' if self.fails else 'PASS'}", flush=True)
        for fl in self.fails:
            print("  FAIL:", fl, flush=True)
        return 1 if self.fails else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stack", default="plain")
    ap.add_argument("--file")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--conns", type=int, default=3)
    ap.add_argument("--strict", action="store_true",
                    help="keep libnbd's default strict mode")
    ap.add_argument("--kill", action="store_true",
                    help="end with flush + SIGKILL instead of SIGTERM")
    ap.add_argument("--builddir")
    ap.add_argument("--preload")
    ap.add_argument("--log")
    ap.add_argument("--op-timeout", type=float, default=120)
    ap.add_argument("--control", action="store_true",
                    help="change a byte of the file behind the server's "
                    "back before the final check, which must then fail")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        print("\n".join(STACKS))
        return 0
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(2**31)
    if not a.file:
        ap.error("--file is required")
    print(f"seed {a.seed}", flush=True)
    return Probe(a).run()


if __name__ == "__main__":
    sys.exit(main())
