#!/usr/bin/python3
# gmblock-readahead fault injection: reads that must all succeed and be
# right while the prefetches below them fail.
#   readahead-faults.py URI IMAGE [START END]
# Compares with IMAGE, the file the server serves, over [START, END)
# (default: the whole export):
#   - one connection reading 3 interleaved sequential streams (64K);
#   - one connection scanning at queue depth 8 (completions out of order);
#   - two connections splitting one scan between them, turn about.
# Any failed request or wrong byte is an error (exit 1).
import sys
import threading

import nbd

uri, image = sys.argv[1], sys.argv[2]
K = 1024
REQ = 64 * K
src = open(image, "rb").read()
start = int(sys.argv[3]) if len(sys.argv) > 3 else 0
end = int(sys.argv[4]) if len(sys.argv) > 4 else len(src)
errors = []


def connect():
    h = nbd.NBD()
    h.connect_uri(uri)
    if h.get_size() != len(src):
        sys.exit(f"export size {h.get_size()} != {len(src)}")
    return h


def check(who, off, data):
    if data != src[off:off + len(data)]:
        errors.append(f"{who}: wrong data at {off}+{len(data)}")


def offsets(lo, hi):
    return [(o, min(REQ, hi - o)) for o in range(lo, hi, REQ)]


def interleaved():
    h = connect()
    third = (end - start) // 3 // REQ * REQ
    streams = [offsets(start + i * third, start + (i + 1) * third if i < 2 else end)
               for i in range(3)]
    for i in range(max(len(s) for s in streams)):
        for n, s in enumerate(streams):
            if i < len(s):
                off, ln = s[i]
                check(f"interleaved stream {n}", off, h.pread(ln, off))
    h.shutdown()


def deep_queue():
    h = connect()
    pending = []
    for off, ln in offsets(start, end):
        buf = nbd.Buffer(ln)
        pending.append((off, buf, h.aio_pread(buf, off)))
        while h.aio_in_flight() >= 8:
            h.poll(-1)
    while h.aio_in_flight() > 0:
        h.poll(-1)
    for off, buf, cookie in pending:
        h.aio_command_completed(cookie)     # raises if the read failed
        check("queue depth 8", off, buf.to_bytearray())
    h.shutdown()


def split_scan():
    hs = [connect(), connect()]
    for i, (off, ln) in enumerate(offsets(start, end)):
        check(f"split scan conn {i % 2}", off, hs[i % 2].pread(ln, off))
    for h in hs:
        h.shutdown()


def run(fn):
    try:
        fn()
    except nbd.Error as e:
        errors.append(f"{fn.__name__}: request failed: {e}")


threads = [threading.Thread(target=run, args=(fn,))
           for fn in (interleaved, deep_queue, split_scan)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for e in errors[:10]:
    print(e, file=sys.stderr)
sys.exit(1 if errors else 0)
