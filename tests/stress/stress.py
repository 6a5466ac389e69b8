#!/usr/bin/python3
# Randomized differential stress of gmblock stacks against a byte model.
# SPDX-License-Identifier: BSD-3-Clause
# Not part of make check: see tests/stress/README.md.
#   stress.py SEED [--ops N] [--asan] [--stack-json JSON] [--size N] [--keep]
#   stress.py SEED --uri URI [--uri URI...] [--offset N|end] [--size N]
#             [--stack-desc TEXT] [--dump PREFIX] [--ops N] [--trim-any]
#             (external server)
#   stress.py SEED --pick-stack [--size N]    (the stack the seed picks)
import argparse, errno, json, os, random, re, shutil, signal, socket
import subprocess, sys, threading, time, bisect, traceback
import nbd

# The tree this script sits in (tests/stress/), and a scratch folder.
TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.environ.get("STRESS_RUN", "/tmp/gmblock-stress")
os.makedirs(RUN, exist_ok=True)
K, M = 1024, 1024 * 1024
EXACT, OLD_OR_ZERO, ANY = 0, 1, 2
TRIM_T = bytes([OLD_OR_ZERO, OLD_OR_ZERO, ANY]) + bytes(253)
# --trim-any: NBD's own rule, a trimmed byte reads as anything until it
# is written again.  On a block device served through the page cache
# (direct=false), BLKDISCARD drops the range's dirty pages, and a device
# that ignores discards (the lab's virtio disks) then returns what it
# held before them: data older than the last write (rdma-stress's seed 5).
TRIM_ANY_T = bytes([ANY, ANY, ANY]) + bytes(253)
BAD_LOG = re.compile(r"AddressSanitizer|LeakSanitizer|runtime error|"
                     r"[Aa]ssertion|Segmentation|SIGSEGV|SIGABRT|"
                     r"double free|stack smashing|core dumped|Aborted|\bBUG\b")


class Failure(Exception):
    pass


def pick_stack(r, size):
    filters, opts = [], []
    # plugin
    opts.append("direct=" + r.choice(["true", "true", "false"]))
    opts.append("ring=" + r.choice(["per-thread", "shared", "none"]))
    if r.random() < 0.2:
        opts.append("pool-size=1M")
    if r.random() < 0.15:
        opts.append("discard=ignore")
    use_ra = r.random() < 0.35
    use_cache = r.random() < 0.7
    use_stripe = r.random() < 0.3
    if use_ra:
        filters.append("gmblock-readahead")
        mn = r.choice([4 * K, 16 * K, 64 * K])
        mx = r.choice([64 * K, 256 * K, 1 * M])
        mx = max(mx, mn, 64 * K)
        opts += [f"ra-min={mn // K}K", f"ra-max={mx // K}K",
                 f"ra-max-inflight={r.choice([1, 2, 4, 8])}"]
    mode = None
    if use_cache:
        filters.append("gmblock-cache")
        mode = r.choice(["bypass", "read", "writethrough", "writeback",
                         "unsafe", "adaptive"])
        opts.append("cache-mode=" + mode)
        bs = r.choice([4 * K, 4 * K, 8 * K, 16 * K, 64 * K])
        nblk = r.choice([16, 17, 24, 32, 64])
        opts += [f"cache-block-size={bs // K}K", f"cache-size={bs * nblk // K}K"]
        if r.random() < 0.5:
            opts.append(f"writeback-interval={r.choice(['0.01', '0.05', '1'])}")
        if r.random() < 0.3:
            opts.append(f"writeback-merge={r.choice(['0', '8K', '64K', '256K'])}")
        if r.random() < 0.3:
            opts.append(f"writeback-hold={r.choice([0, 1])}")
        if mode == "adaptive":
            if r.random() < 0.6:
                opts.append("adaptive-writes=" + r.choice(["around", "back"]))
            if r.random() < 0.6:
                opts.append("adaptive-scan=" + r.choice(["64K", "256K", "1M"]))
        if r.random() < 0.3:
            opts.append("cache-hugepages=off")
    if use_stripe:
        filters.append("gmblock-stripe")
        chunk = r.choice([512, 4 * K, 12 * K, 64 * K, 96 * K])
        while chunk > size:
            chunk //= 2
        chunk = max(512, chunk - chunk % 512)
        parity = r.choice([0, 0, 1, 2])
        dd = r.randint(2 if parity == 2 else 1, 5)
        opts += [f"stripe-chunk={chunk}", f"stripe-data-disks={dd}",
                 f"stripe-parity={parity}"]
        if r.random() < 0.4:
            opts.append(f"stripe-offset={512 * r.randrange(0, 200)}")
    return filters, opts, mode


def pick_size(r):
    x = r.random()
    base = r.choice([64 * K, 256 * K, 1 * M, 3 * M, 8 * M])
    if x < 0.35:
        return base + r.randint(1, 4095)           # odd
    if x < 0.6:
        return base + 512 * r.randint(1, 7)        # 512-aligned, not 4K
    if x < 0.8:
        return base - r.randint(1, 4095)
    return base


def pick_len(r, cap):
    """A request length: edges of sectors and pages, mostly small, now
    and then up to 2M; at most cap."""
    x = r.random()
    if x < 0.2:
        n = r.choice([1, 2, 511, 512, 513, 4095, 4096, 4097, 8191, 65536, 65537])
    elif x < 0.7:
        n = r.randint(1, 16 * K)
    elif x < 0.95:
        n = r.randint(1, 300 * K)
    else:
        n = r.randint(1, 2 * M)
    return max(1, min(n, cap))


def first_bad(got, want, mask, own=None, owner=None):
    """The first index i where got[i] breaks the model (want[i] under
    mask[i]; with own, only bytes whose own[i] is owner count), or -1.
    The same rule as a byte loop, on whole big integers: a trimmed
    megabyte read back as zeros costs a loop of a million Python steps,
    which under the guest lab's emulated CPU took seconds."""
    n = len(got)
    if got == want:
        return -1
    g = int.from_bytes(got, "big")
    d = g ^ int.from_bytes(want, "big")           # non-zero bytes differ
    allowed = int.from_bytes(mask.translate(_ANY_T), "big") | (
        int.from_bytes(mask.translate(_OZ_T), "big")
        & int.from_bytes(bytes(got).translate(_ZERO_T), "big"))
    bad = d & ~allowed
    if own is not None:
        bad &= int.from_bytes(own.translate(_OWN_T[owner]), "big")
    if not bad:
        return -1
    return n - 1 - (bad.bit_length() - 1) // 8


_ANY_T = bytes(0xff if v == ANY else 0 for v in range(256))
_OZ_T = bytes(0xff if v == OLD_OR_ZERO else 0 for v in range(256))
_ZERO_T = bytes([0xff]) + bytes(255)
_OWN_T = [bytes(0xff if v == o else 0 for v in range(256)) for o in range(256)]


class Region:
    """An NBD handle seen through the window [base, base + size) of its
    export (external mode): offsets shift by base, block status is
    clipped to the window, get_size is the window's."""
    SHIFTED = ("pread", "pwrite", "zero", "trim", "cache", "aio_pread",
               "aio_pwrite", "aio_zero", "aio_trim", "aio_cache")

    def __init__(self, h, base, size):
        self.h, self.base, self.size = h, base, size
        self.export = h.get_size()
        for name in self.SHIFTED:
            f = getattr(h, name)
            setattr(self, name, lambda a0, off, *rest, _f=f, **kw:
                    _f(a0, off + base, *rest, **kw))

    def __getattr__(self, k):
        return getattr(self.h, k)

    def get_size(self):
        return self.size

    def block_status(self, n, off, cb, flags=0):
        base, end = self.base, self.base + self.size

        bad = []

        def shifted(m, o, e, err):
            pos, out = o, []
            for i in range(0, len(e), 2):
                ln, st = e[i], e[i + 1]
                if pos + ln > self.export:
                    # raised after the call: an exception in libnbd's
                    # callback would be an nbd.Error of another meaning
                    bad.append(f"extent past the export's end [{pos},{pos + ln}) "
                               f"size {self.export}")
                if end < self.export and pos + ln > end:
                    ln = end - pos
                if ln > 0:
                    out += [ln, st]
                pos += ln
                if pos >= end:
                    break
            return cb(m, o - base, out, err)
        ret = self.h.block_status(n, off + base, shifted, flags)
        if bad:
            raise Failure(bad[0])
        return ret


class Server:
    """nbdkit serving PATH through FILTERS on a Unix socket, started
    when the socket answers.  crash.py adds a preload (its fault shim)
    and environment, and ends it with kill9."""

    def __init__(self, filters, opts, path, log, asan, preload=(), env_add=None,
                 tag="s"):
        self.dir = os.path.join(RUN, f"{tag}{os.getpid()}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.sock = os.path.join(self.dir, "sock")
        self.uri = "nbd+unix:///?socket=" + self.sock
        env = dict(os.environ)
        pre = []
        if asan:
            bld = TREE + "/.build-sanitize"
            gcc = lambda n: subprocess.check_output(
                ["gcc", "-print-file-name=" + n], text=True).strip()
            env["GMBLOCK_BUILDDIR"] = bld
            pre += [gcc("libasan.so"), gcc("libubsan.so"), f"{bld}/tests/sanitizer-shim.so"]
            logs = os.path.join(RUN, "asanlogs")
            os.makedirs(logs, exist_ok=True)
            env["ASAN_OPTIONS"] = ("detect_leaks=1:abort_on_error=1:verify_asan_link_order=0:"
                                   f"intercept_tls_get_addr=0:log_path={logs}/asan")
            env["UBSAN_OPTIONS"] = f"print_stacktrace=1:halt_on_error=1:log_path={logs}/ubsan"
            env["LSAN_OPTIONS"] = f"suppressions={TREE}/tests/lsan.supp:print_suppressions=0"
        pre += list(preload)
        if pre:
            env["GMBLOCK_PRELOAD"] = ":".join(pre)
        env.update(env_add or {})
        self.cmd = ([TREE + "/nbdkit", "-f", "-v", "-U", self.sock]
                    + ["--filter=" + f for f in filters] + ["gmblock", "file=" + path]
                    + opts)
        self.logf = open(log, "wb")
        self.logf.write(("### " + " ".join(self.cmd) + "\n").encode())
        self.logf.flush()
        self.p = subprocess.Popen(self.cmd, stdout=self.logf, stderr=self.logf,
                                  env=env, cwd=RUN)
        open(os.path.join(RUN, f"pid-{os.getpid()}"), "w").write(str(self.p.pid))
        t0 = time.time()
        while True:
            if self.p.poll() is not None:
                raise Failure(f"STARTFAIL nbdkit exited at start ({self.p.returncode})")
            if os.path.exists(self.sock):
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(self.sock)
                    s.close()
                    break
                except OSError:
                    pass
                s.close()
            if time.time() - t0 > 60:
                self.p.kill(); self.p.wait()
                raise Failure("nbdkit did not start")
            time.sleep(0.05)

    def stop(self, timeout=60):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill(); self.p.wait()
            raise Failure(f"HANG: nbdkit did not exit {timeout}s after SIGTERM")
        finally:
            self.logf.close()
            shutil.rmtree(self.dir, ignore_errors=True)
        return rc

    def kill9(self, term_first=None):
        """SIGKILL; after SIGTERM and term_first seconds if given (a kill
        during the shutdown's write-back)."""
        if term_first is not None and self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            time.sleep(term_first)
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
        self.p.wait()
        self.logf.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Stress:
    def __init__(self, a):
        self.a = a
        self.r = random.Random(a.seed)
        self.lock = threading.Lock()
        self.errors = []
        self.stats = {}

    def connect(self, strict, uri=None):
        h = nbd.NBD()
        if not strict:
            h.set_strict_mode(0)
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
        if uri is None:
            h.connect_uri(self.srv.uri)
            return h
        h.connect_uri(uri)
        return Region(h, self.base, self.size)

    def rh(self, h, r):
        """The handle to read back through: the worker's own, or (external
        mode, several URIs) as often a lax one of any transport."""
        if len(self.a.uri or ()) < 2 or r.random() < 0.5:
            return h
        return r.choice(self.hs)

    def count(self, k):
        self.stats[k] = self.stats.get(k, 0) + 1

    # model checks -------------------------------------------------------
    def check(self, what, off, got, owner=None):
        n = len(got)
        want = self.data[off:off + n]
        if got == want:
            return
        i = first_bad(got, want, self.mask[off:off + n],
                      self.own[off:off + n] if owner is not None else None, owner)
        if i < 0:
            return
        raise Failure(f"WRONG DATA {what}: byte {off + i} (req {off}+{n}) "
                      f"got {got[i]:#04x} want {want[i]:#04x} mask {self.mask[off + i]}")

    def check_extents(self, what, off, n, ext, owner=None):
        pos = off
        for (o, entries) in ext:
            if o != off:
                raise Failure(f"{what}: extents start at {o}")
            for i in range(0, len(entries), 2):
                ln, st = entries[i], entries[i + 1]
                if ln == 0:
                    raise Failure(f"{what}: zero-length extent")
                if pos + ln > self.size:
                    raise Failure(f"{what}: extent past end [{pos},{pos+ln}) size {self.size}")
                if st & nbd.STATE_ZERO:
                    seg = self.data[pos:pos + ln]
                    if seg.count(0) != len(seg):
                        for j in range(pos, pos + ln):
                            if self.data[j] and self.mask[j] == EXACT and \
                                    (owner is None or self.own[j] == owner):
                                raise Failure(f"WRONG EXTENTS {what}: [{pos},{pos+ln}) "
                                              f"zero (st {st}) but byte {j} is "
                                              f"{self.data[j]:#04x}")
                pos += ln
        if pos <= off:
            raise Failure(f"{what}: no extents")

    def apply(self, kind, off, n, buf=None, flags=0, failed=None):
        if failed is not None:
            if kind == "zero" and failed == errno.ENOTSUP and flags & nbd.CMD_FLAG_FAST_ZERO:
                return
            self.mask[off:off + n] = bytes([ANY]) * n
            return
        if kind == "pwrite":
            self.data[off:off + n] = buf
            self.mask[off:off + n] = bytes(n)
        elif kind == "zero":
            self.data[off:off + n] = bytes(n)
            self.mask[off:off + n] = bytes(n)
        elif kind == "trim":
            self.mask[off:off + n] = self.mask[off:off + n].translate(
                TRIM_ANY_T if self.a.trim_any else TRIM_T)

    # random ranges -------------------------------------------------------
    def roff(self, r, n):
        x = r.random()
        if x < 0.2:
            off = self.size - n - r.randint(0, 5)
        elif x < 0.5:
            b = r.choice([512, 4096, 65536])
            off = b * r.randrange(0, self.size // b + 1) + r.randint(-3, 3)
        else:
            off = r.randrange(0, self.size)
        return max(0, min(off, self.size - n))

    # one worker in the concurrent phase ------------------------------
    def own_range(self, r, me):
        """A run of own chunks (or a piece of one)."""
        mine = self.mine[me]
        if not mine:
            mine = self.mine[0]
        i = r.randrange(len(mine))
        o, n = self.chunks[mine[i]]
        x = r.random()
        if x < 0.3 and n > 1:
            a = r.randrange(n)
            b = r.randint(a + 1, n)
            return o + a, b - a
        return o, n

    def worker(self, me, h, nops):
        r = random.Random(self.a.seed * 7919 + me * 31 + self.phase)
        try:
            for _ in range(nops):
                if self.errors:
                    return
                try:
                    self.one_op(me, h, r)
                except nbd.Error as e:
                    if h.get_strict_mode() != 0 and "command failed" not in (e.string or ""):
                        self.count("client-refused")
                        continue
                    raise
        except Failure as e:
            with self.lock:
                self.errors.append(str(e))
        except Exception as e:
            with self.lock:
                self.errors.append(f"w{me}: {e!r}")

    def one_op(self, me, h, r):
        if True:
            if True:
                x = r.random()
                if x < 0.30:
                    off, n = self.own_range(r, me)
                    fl = nbd.CMD_FLAG_FUA if self.can_fua and r.random() < 0.15 else 0
                    buf = r.randbytes(n) if r.random() < 0.8 else bytes([r.randrange(1, 256)]) * n
                    h.pwrite(buf, off, fl)
                    with self.lock:
                        self.apply("pwrite", off, n, buf)
                    self.count("pwrite")
                    if r.random() < 0.5:
                        self.check(f"w{me} readback", off, self.rh(h, r).pread(n, off), me)
                elif x < 0.38:
                    off, n = self.own_range(r, me)
                    fl = 0
                    if r.random() < 0.4: fl |= nbd.CMD_FLAG_NO_HOLE
                    if self.can_fast_zero and r.random() < 0.3: fl |= nbd.CMD_FLAG_FAST_ZERO
                    if self.can_fua and r.random() < 0.2: fl |= nbd.CMD_FLAG_FUA
                    try:
                        h.zero(n, off, fl)
                        with self.lock:
                            self.apply("zero", off, n)
                        self.count("zero")
                    except nbd.Error as e:
                        if fl & nbd.CMD_FLAG_FAST_ZERO and e.errnum == errno.ENOTSUP:
                            self.count("zero-fast-enotsup")
                        elif "command failed" not in (e.string or ""):
                            raise
                        else:
                            raise Failure(f"w{me}: zero {off}+{n} flags {fl}: {e}")
                    if r.random() < 0.5:
                        self.check(f"w{me} zero readback", off, self.rh(h, r).pread(n, off), me)
                elif x < 0.43 and self.can_trim:
                    off, n = self.own_range(r, me)
                    fl = nbd.CMD_FLAG_FUA if self.can_fua and r.random() < 0.2 else 0
                    # model first: the trim may take effect before the reply
                    with self.lock:
                        self.apply("trim", off, n)
                    h.trim(n, off, fl)
                    self.count("trim")
                elif x < 0.75:
                    # read anywhere, check own bytes only
                    n = pick_len(r, self.size)
                    off = self.roff(r, n)
                    got = self.rh(h, r).pread(n, off)
                    self.check(f"w{me} pread", off, got, me)
                    self.count("pread")
                elif x < 0.80:
                    h.flush()
                    self.count("flush")
                elif x < 0.85 and self.can_cache:
                    n = pick_len(r, self.size)
                    off = self.roff(r, n)
                    h.cache(n, off)
                    self.count("cache")
                elif x < 0.88:
                    n = pick_len(r, self.size)
                    off = self.roff(r, n)
                    ext = []
                    fl = nbd.CMD_FLAG_REQ_ONE if r.random() < 0.3 else 0
                    h.block_status(n, off, lambda m, o, e, err: ext.append((o, list(e))), fl)
                    with self.lock:
                        self.check_extents(f"w{me} block_status {off}+{n}", off, n, ext, me)
                    self.count("block_status")
                else:
                    # aio burst: writes/zeroes/trims to distinct own chunks and
                    # reads of other own chunks, all in flight at once
                    mine = self.mine[me]
                    if len(mine) < 2:
                        return
                    idx = r.sample(mine, min(len(mine), r.randint(2, 24)))
                    nw = r.randint(1, len(idx))
                    wr, rd = idx[:nw], idx[nw:]
                    pend = []

                    # A command libnbd refuses before sending (strict mode)
                    # is skipped, not raised: raised, it abandoned the
                    # commands already sent, whose writes then landed
                    # unknown to the model (the false alarm of seed 5034).
                    def submit(kind, call, o, n, b, fl):
                        try:
                            pend.append((kind, call(), o, n, b, fl))
                        except nbd.Error as e:
                            if h.get_strict_mode() == 0 or "command failed" in (e.string or ""):
                                raise
                            self.count("client-refused")

                    for ci in rd:
                        o, n = self.chunks[ci]
                        b = nbd.Buffer(n)
                        submit("read", lambda: h.aio_pread(b, o), o, n, b, 0)
                    for ci in wr:
                        o, n = self.chunks[ci]
                        if r.random() < 0.5 and n > 1:
                            a0 = r.randrange(n); b0 = r.randint(a0 + 1, n)
                            o, n = o + a0, b0 - a0
                        y = r.random()
                        fl = nbd.CMD_FLAG_FUA if self.can_fua and r.random() < 0.1 else 0
                        if y < 0.75:
                            buf = r.randbytes(n)
                            submit("pwrite", lambda: h.aio_pwrite(buf, o, flags=fl), o, n, buf, fl)
                        elif y < 0.92 or not self.can_trim:
                            if r.random() < 0.4: fl |= nbd.CMD_FLAG_NO_HOLE
                            if self.can_fast_zero and r.random() < 0.3: fl |= nbd.CMD_FLAG_FAST_ZERO
                            submit("zero", lambda: h.aio_zero(n, o, flags=fl), o, n, None, fl)
                        else:
                            with self.lock:
                                self.apply("trim", o, n)
                            submit("trim", lambda: h.aio_trim(n, o, flags=fl), o, n, None, fl)
                        if r.random() < 0.1 and self.can_cache:
                            submit("cache", lambda: h.aio_cache(n, o), o, n, None, 0)
                        if r.random() < 0.05:
                            submit("flush", lambda: h.aio_flush(), 0, 0, None, 0)
                    done = []
                    for kind, c, o, n, b, fl in pend:
                        while True:
                            try:
                                if h.aio_command_completed(c):
                                    err = None
                                    break
                            except nbd.Error as e:
                                err = e
                                break
                            h.poll(5)
                        done.append((kind, o, n, b, fl, err))
                    for kind, o, n, b, fl, err in done:
                        if kind == "read":
                            if err:
                                raise Failure(f"w{me} aio read {o}+{n}: {err}")
                            self.check(f"w{me} aio read", o, bytes(b.to_bytearray()), me)
                        elif kind in ("pwrite", "zero", "trim"):
                            if err and not (kind == "zero" and err.errnum == errno.ENOTSUP
                                            and fl & nbd.CMD_FLAG_FAST_ZERO):
                                raise Failure(f"w{me} aio {kind} {o}+{n} fl {fl}: {err}")
                            if kind != "trim":
                                with self.lock:
                                    self.apply(kind, o, n, b, fl, err.errnum if err else None)
                        elif err:
                            raise Failure(f"w{me} aio {kind}: {err}")
                    self.count("aio-burst")
                    for kind, o, n, b, fl, err in done:
                        if kind in ("pwrite", "zero") and r.random() < 0.3:
                            self.check(f"w{me} burst readback", o, self.rh(h, r).pread(n, o), me)

    # global phase: one thread, arbitrary ranges --------------------------
    def global_ops(self, nops):
        r = self.r
        for _ in range(nops):
            h = r.choice(self.hs)
            x = r.random()
            n = pick_len(r, self.size)
            off = self.roff(r, n)
            if x < 0.35:
                buf = r.randbytes(n)
                fl = nbd.CMD_FLAG_FUA if self.can_fua and r.random() < 0.2 else 0
                h.pwrite(buf, off, fl)
                self.apply("pwrite", off, n, buf)
                self.count("g-pwrite")
            elif x < 0.55:
                if r.random() < 0.3:
                    n = r.randint(1, self.size)
                    off = r.randint(0, self.size - n)
                fl = 0
                if r.random() < 0.4: fl |= nbd.CMD_FLAG_NO_HOLE
                if self.can_fast_zero and r.random() < 0.3: fl |= nbd.CMD_FLAG_FAST_ZERO
                if self.can_fua and r.random() < 0.2: fl |= nbd.CMD_FLAG_FUA
                try:
                    h.zero(n, off, fl)
                    self.apply("zero", off, n)
                    self.count("g-zero")
                except nbd.Error as e:
                    if fl & nbd.CMD_FLAG_FAST_ZERO and e.errnum == errno.ENOTSUP:
                        self.count("g-zero-enotsup")
                    else:
                        raise Failure(f"global zero {off}+{n} fl {fl}: {e}")
            elif x < 0.65 and self.can_trim:
                self.apply("trim", off, n)
                h.trim(n, off, nbd.CMD_FLAG_FUA if self.can_fua and r.random() < 0.2 else 0)
                self.count("g-trim")
            elif x < 0.85:
                self.check(f"global pread {off}+{n}", off, h.pread(n, off))
                self.count("g-pread")
            elif x < 0.95:
                ext = []
                h.block_status(n, off, lambda m, o, e, err: ext.append((o, list(e))))
                self.check_extents(f"global block_status {off}+{n}", off, n, ext)
                self.count("g-bs")
            else:
                h.flush()

    def exercise(self, uris=None, init=None):
        """Connect, run the phases, check everything at the end; the
        handles are left in self.hs_all (the last one lax)."""
        a, r = self.a, self.r
        self.hs_all = []
        nconn = r.randint(1, 4)
        if uris:
            k = r.randrange(len(uris))
            hs = [self.connect(r.random() < 0.3, uris[(k + i) % len(uris)])
                  for i in range(nconn)]
            lax = self.connect(False, uris[(k + nconn) % len(uris)])
            self.conns = "".join(str((k + i) % len(uris)) for i in range(nconn + 1))
        else:
            hs = [self.connect(strict=r.random() < 0.3) for _ in range(nconn)]
            lax = self.connect(strict=False)
        hs.append(lax)
        hs_all = self.hs_all = hs
        self.hs = [lax] + [h for h in hs if h.get_strict_mode() == 0] or [lax]
        if uris:
            self.write_initial(init)
        h0 = hs[0]
        assert h0.get_size() == self.size, (h0.get_size(), self.size)
        self.can_fua = h0.can_fua()
        self.can_trim = h0.can_trim()
        self.can_fast_zero = h0.can_fast_zero()
        self.can_cache = h0.can_cache()
        nthr = r.randint(2, 6)
        hs = hs_all[:-1] if len(hs_all) > 1 else hs_all
        # chunks owned round-robin by threads
        self.chunks, owners = [], []
        pos = 0
        scale = max(1, self.size // (64 * K))
        while pos < self.size:
            n = min(r.choice([r.randint(1, 300), r.randint(1, 5000),
                              min(r.randint(1, 70 * K), 2000 * scale), 4096, 512]), self.size - pos)
            self.chunks.append((pos, n))
            pos += n
        self.own = bytearray(self.size)
        self.mine = [[] for _ in range(nthr)]
        for i, (o, n) in enumerate(self.chunks):
            t = i % nthr
            self.mine[t].append(i)
            self.own[o:o + n] = bytes([t]) * n
        self.verify_all("initial", lax)
        total = a.ops
        per = max(50, total // 4 // nthr)
        done = 0
        self.phase = 0
        while done < total and not self.errors:
            self.phase += 1
            # threads share connections; strict ones only get aligned-ok ops?
            # libnbd strict mode refuses unaligned only if server advertises
            # a minimum block size > 1; use lax handles if refused.
            ths = []
            for t in range(nthr):
                h = hs[t % len(hs)]
                if h.get_strict_mode() != 0:
                    h = lax if r.random() < 0.5 else h
                ths.append(threading.Thread(target=self.worker_safe, args=(t, h, per)))
            for t in ths:
                t.start()
            for t in ths:
                t.join(600)
                if t.is_alive():
                    raise Failure("HANG: worker thread stuck for 600s")
            done += per * nthr
            if self.errors:
                break
            # barrier: global ops and full check
            self.global_ops(r.randint(5, 40))
            done += 20
            self.verify_all(f"after phase {self.phase}", r.choice(self.hs))
        if self.errors:
            raise Failure("; ".join(self.errors[:3]))
        self.verify_all("final", lax)

    def verify_all(self, what, h):
        off = 0
        while off < self.size:
            n = min(4 * M, self.size - off)
            self.check(what, off, h.pread(n, off))
            off += n

    def run(self):
        a, r = self.a, self.r
        if a.uri:
            return self.run_external()
        self.size = a.size or pick_size(r)
        if a.stack_json:
            filters, opts = json.loads(a.stack_json)
            mode = next((o.split("=")[1] for o in opts if o.startswith("cache-mode=")), None)
            if "gmblock-cache" in filters and mode is None:
                mode = "adaptive"
        else:
            filters, opts, mode = pick_stack(r, self.size)
        self.mode = mode
        path = os.path.join(RUN, f"disk-{os.getpid()}.img")
        init = random.Random(a.seed ^ 0x5eed).randbytes(self.size)
        # some zero areas to make block_status interesting
        init = bytearray(init)
        for _ in range(r.randint(0, 4)):
            n = r.randint(1, self.size // 4 + 1)
            o = r.randrange(0, self.size - n + 1)
            init[o:o + n] = bytes(n)
        with open(path, "wb") as f:
            f.write(init)
        if r.random() < 0.3:  # a hole
            n = r.randint(4096, max(4096, self.size // 4)) // 4096 * 4096
            o = r.randrange(0, max(1, self.size - n)) // 4096 * 4096
            if o + n <= self.size:
                import fcntl, ctypes
                libc = ctypes.CDLL("libc.so.6", use_errno=True)
                fd = os.open(path, os.O_RDWR)
                libc.fallocate(fd, 3, ctypes.c_long(o), ctypes.c_long(n))  # PUNCH|KEEP
                os.close(fd)
                init[o:o + n] = bytes(n)
        self.data = bytearray(init)
        self.mask = bytearray(self.size)
        log = os.path.join(RUN, f"log-{a.seed}{'-asan' if a.asan else ''}.txt")
        desc = f"seed={a.seed} size={self.size} stack={json.dumps([filters, opts])}"
        print(desc, flush=True)
        try:
            self.srv = Server(filters, opts, path, log, a.asan)
        except Failure as e:
            print(f"RESULT seed={a.seed} START-REFUSED {e} (see {log})", flush=True)
            os.unlink(path)
            return 0 if "STARTFAIL" in str(e) else 1
        fails = []
        self.hs_all = []
        try:
            self.exercise()
            hs_all = self.hs_all
            hs_all[-1].flush()
            for h in hs_all:
                h.shutdown()
            self.hs_all = []
            self.hs = []
            time.sleep(1.5)
            rc = self.srv.stop()
            if rc != 0:
                fails.append(f"nbdkit exit status {rc}")
            if mode != "unsafe":
                got = open(path, "rb").read()
                if len(got) != self.size:
                    fails.append(f"file size {len(got)} != {self.size}")
                else:
                    try:
                        self.check("file after SIGTERM", 0, got)
                    except Failure as e:
                        fails.append(str(e))
        except Failure as e:
            fails.append(str(e))
        except nbd.Error as e:
            fails.append(f"nbd error: {e}")
        finally:
            for h in self.hs_all:
                try: h.shutdown()
                except Exception: pass
            self.hs = []
            if self.srv.p.poll() is None:
                time.sleep(1)
                try:
                    self.srv.stop(30)
                except Failure as e:
                    fails.append(str(e))
            if self.srv.p.poll() is not None and self.srv.p.returncode not in (0,):
                fails.append(f"nbdkit status {self.srv.p.returncode}")
        text = open(log, "rb").read().decode(errors="replace")
        for line in text.splitlines():
            if BAD_LOG.search(line) and "###" not in line:
                fails.append("LOG: " + line.strip()[:300])
                break
        if a.asan:
            logs = os.path.join(RUN, "asanlogs")
            for fn in os.listdir(logs):
                fails.append(f"SANITIZER report {logs}/{fn}")
        ops = sum(self.stats.values())
        print(f"RESULT seed={a.seed} {'FAIL' if fails else 'PASS'} ops={ops} "
              f"{self.stats} | {desc}", flush=True)
        for f in fails:
            print("  FAIL:", f, flush=True)
        if not fails and not a.keep:
            os.unlink(path)
            os.unlink(log)
        return 1 if fails else 0

    # external mode ----------------------------------------------------
    def write_initial(self, init):
        """The seed's initial contents, written through every lax handle
        in turn (so through every transport), its zero areas zeroed
        (a hole may be punched: MAY_TRIM), then flushed on each."""
        hs = self.hs
        for i, o in enumerate(range(0, self.size, M)):
            hs[i % len(hs)].pwrite(bytes(init[o:o + M]), o)
        for i, (o, n, fl) in enumerate(self.zero_areas):
            hs[i % len(hs)].zero(n, o, fl)
        for h in hs:
            h.flush()

    def run_external(self):
        """Drive a server already running (a.uri: one or more URIs of one
        export, e.g. a bridge and the server itself): no stack is picked
        and nothing is started or stopped; the seed's size (or --size) is
        a window of the export at --offset, written first through the
        connections. What the file check of the default mode would prove
        is left to the caller: --dump writes the model at the end."""
        a, r = self.a, self.r
        h = nbd.NBD()
        h.connect_uri(a.uri[0])
        export = h.get_size()
        h.shutdown()
        self.size = min(a.size or pick_size(r), export)
        if a.offset == "end":
            self.base = export - self.size
        else:
            self.base = int(a.offset)
            self.size = min(self.size, export - self.base)
        if self.size <= 0:
            raise SystemExit(f"offset {self.base} is past the export's end ({export})")
        # The same draws as the default mode's file and hole.
        init = bytearray(random.Random(a.seed ^ 0x5eed).randbytes(self.size))
        self.zero_areas = []
        for _ in range(r.randint(0, 4)):
            n = r.randint(1, self.size // 4 + 1)
            o = r.randrange(0, self.size - n + 1)
            init[o:o + n] = bytes(n)
            self.zero_areas.append((o, n, nbd.CMD_FLAG_NO_HOLE))
        if r.random() < 0.3:  # a hole
            n = r.randint(4096, max(4096, self.size // 4)) // 4096 * 4096
            o = r.randrange(0, max(1, self.size - n)) // 4096 * 4096
            if o + n <= self.size:
                init[o:o + n] = bytes(n)
                self.zero_areas.append((o, n, 0))
        self.data = bytearray(init)
        self.mask = bytearray(self.size)
        desc = (f"seed={a.seed} size={self.size} offset={self.base} export={export} "
                f"uris={len(a.uri)} stack={a.stack_desc or '?'}")
        # conns= below: the --uri index of each connection, the lax one last
        print(desc, flush=True)
        fails = []
        self.hs_all = []
        t0 = time.time()
        try:
            self.exercise(a.uri, init)
            self.hs_all[-1].flush()
            for h in self.hs_all:
                h.shutdown()
            self.hs_all = []
            # For a caller that restarts the server under load (the
            # lab's rdma-stress): no request of this run comes after.
            print(REQUESTS_DONE, flush=True)
        except Failure as e:
            fails.append(str(e))
        except nbd.Error as e:
            fails.append(f"nbd error: {e}")
        finally:
            for h in self.hs_all:
                try: h.shutdown()
                except Exception: pass
            self.hs = []
        if a.dump:
            with open(a.dump + ".json", "w") as f:
                json.dump({"seed": a.seed, "offset": self.base, "size": self.size,
                           "export": export, "desc": desc, "failed": bool(fails)}, f)
            with open(a.dump + ".data", "wb") as f:
                f.write(self.data)
            with open(a.dump + ".mask", "wb") as f:
                f.write(self.mask)
        ops = sum(self.stats.values())
        print(f"RESULT seed={a.seed} {'FAIL' if fails else 'PASS'} ops={ops} "
              f"{time.time() - t0:.0f}s conns={getattr(self, 'conns', '?')} "
              f"{self.stats} | {desc}", flush=True)
        for f in fails:
            print("  FAIL:", f, flush=True)
        return 1 if fails else 0

    def worker_safe(self, t, h, n):
        self.worker(t, h, n)


REQUESTS_DONE = "requests done"


def main():
    import faulthandler; faulthandler.register(signal.SIGUSR1, all_threads=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("seed", type=int)
    ap.add_argument("--ops", type=int, default=3000)
    ap.add_argument("--asan", action="store_true")
    ap.add_argument("--stack-json")
    ap.add_argument("--size", type=int)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--uri", action="append",
                    help="external mode: drive the server at URI (repeat for more "
                    "transports of one export; connections alternate among them)")
    ap.add_argument("--offset", default="0",
                    help="external mode: the window's start in the export, or 'end'")
    ap.add_argument("--stack-desc", help="external mode: the stack, for the log")
    ap.add_argument("--trim-any", action="store_true",
                    help="a trimmed byte may read as anything (NBD's rule), not "
                    "only as before or zero (files: holes; direct=true devices)")
    ap.add_argument("--dump", help="external mode: write the final model to "
                    "PREFIX.json, PREFIX.data, PREFIX.mask (see cmpdump.py)")
    ap.add_argument("--pick-stack", action="store_true",
                    help="print the stack the seed picks for an export of --size "
                    "bytes (--filter= options, then the parameters, then the cache "
                    "mode or none, one line each) and exit")
    a = ap.parse_args()
    if a.pick_stack:
        filters, opts, mode = pick_stack(random.Random(a.seed), a.size or 64 * M)
        print(" ".join("--filter=" + f for f in filters))
        print(" ".join(opts))
        print(mode or "none")
        return 0
    return Stress(a).run()


if __name__ == "__main__":
    sys.exit(main())
