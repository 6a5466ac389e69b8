# gmblock fault tests: run an nbd Python script with a few helpers.
#     /usr/bin/python3 tests/fault-nbd.py - ARGS... <<'EOF' ... EOF
# The script (stdin) sees sys.argv[1:] = ARGS and these helpers.  Every
# client call has its own timeout, so a hung server fails the test
# instead of blocking it.
import errno
import os
import sys
import time

import nbd

TIMEOUT = float(os.environ.get("FAULT_TIMEOUT", "20"))   # seconds per call


# The flag folder of tests/fault-syscalls.c (FAULT_DIR): a script that
# uses fault() or shim_log() sets it.
FAULTS = None


def fault(name, on=True, text=""):
    """Turn the shim's fault NAME on (its file, holding text) or off."""
    p = os.path.join(FAULTS, name)
    if on:
        with open(p, "w") as f:
            f.write(text)
    else:
        os.unlink(p)


def shim_log():
    """The shim's log so far, one call a line."""
    with open(os.path.join(FAULTS, "log")) as f:
        return f.read().split("\n")[:-1]


def die(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def connect(uri, strict=None, allocation=False):
    """allocation: ask for base:allocation (block_status)."""
    h = nbd.NBD()
    if strict is not None:
        h.set_strict_mode(strict)
    if allocation:
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(uri)
    return h


def _desc(op, args):
    if op == "pwrite":
        return "pwrite(len=%d, off=%d)" % (len(args[0]), args[1])
    return "%s%r" % (op, tuple(args))


def _wait(h, cookie, what):
    deadline = time.monotonic() + TIMEOUT
    while not h.aio_command_completed(cookie):
        left = deadline - time.monotonic()
        if left <= 0:
            die("%s: no reply within %gs (server hung?)" % (what, TIMEOUT))
        h.poll(int(left * 1000) + 1)


def call(h, op, *args, flags=0):
    """pread(count, off) -> bytes; pwrite(data, off); zero, trim,
    cache (count, off); flush(); block_status(count, off) -> the
    base:allocation extents [(length, flags)...].  Raises nbd.Error on
    an NBD error."""
    what = _desc(op, args)
    if op == "block_status":
        got = []

        def cb(meta, off, entries, err):
            if meta == nbd.CONTEXT_BASE_ALLOCATION:
                got.extend(zip(entries[0::2], entries[1::2]))
            return 0
        _wait(h, h.aio_block_status(args[0], args[1], cb, flags=flags), what)
        return got
    if op == "pread":
        buf = nbd.Buffer(args[0])
        _wait(h, h.aio_pread(buf, args[1], flags=flags), what)
        return bytes(buf.to_bytearray())
    if op == "pwrite":
        buf = nbd.Buffer.from_bytearray(bytearray(args[0]))
        _wait(h, h.aio_pwrite(buf, args[1], flags=flags), what)
        return None
    if op == "flush":
        _wait(h, h.aio_flush(flags=flags), what)
        return None
    fn = getattr(h, "aio_" + op)
    _wait(h, fn(args[0], args[1], flags=flags), what)
    return None


def expect_ok(h, op, *args, **kw):
    try:
        return call(h, op, *args, **kw)
    except nbd.Error as e:
        die("%s failed: %s (errno %s)" % (_desc(op, args), e.string,
                                         errno.errorcode.get(e.errnum, e.errnum)))


def expect_err(h, op, *args, errnos=(errno.EINVAL,), **kw):
    """The call must get an NBD error reply with one of errnos."""
    try:
        call(h, op, *args, **kw)
    except nbd.Error as e:
        name = errno.errorcode.get(e.errnum, str(e.errnum))
        if e.errnum not in errnos:
            die("%s: error %s, expected one of %s (%s)" %
                (_desc(op, args), name,
                 [errno.errorcode[x] for x in errnos], e.string))
        print("--- %s -> %s" % (_desc(op, args), name))
        return e.errnum
    die("%s succeeded but must fail" % _desc(op, args))


def outcome(h, op, *args, **kw):
    """Either result is fine: return "ok" or the errno name."""
    try:
        call(h, op, *args, **kw)
        r = "ok"
    except nbd.Error as e:
        r = errno.errorcode.get(e.errnum, str(e.errnum))
    print("--- %s -> %s" % (_desc(op, args), r))
    return r


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "-":
        die("usage: fault-nbd.py - ARGS... <script")
    src = sys.stdin.read()
    sys.argv = sys.argv[1:]
    exec(compile(src, "<test script>", "exec"))
