#!/usr/bin/python3
# gmblock-readahead benchmark client (libnbd, Debian's python).
#   reader.py seq URI REQ SECONDS [NSTREAMS]
# QD1: one request at a time, REQ bytes each, for SECONDS (or until the
# export is read).  With NSTREAMS > 1 the requests go round robin to
# NSTREAMS sequential streams starting at i * size / NSTREAMS, on the
# one connection.  Prints one JSON line: total and per-stream MiB/s.
import json
import sys
import time

import nbd

mode, uri, req, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
nstreams = int(sys.argv[5]) if len(sys.argv) > 5 else 1
if mode != "seq":
    sys.exit("unknown mode " + mode)
h = nbd.NBD()
h.connect_uri(uri)
size = h.get_size()
span = size // nstreams // req * req
pos = [i * span for i in range(nstreams)]
done = [0] * nstreams
t0 = time.monotonic()
deadline = t0 + secs
n = 0
while True:
    i = n % nstreams
    if done[i] + req > span:
        break
    h.pread(req, pos[i] + done[i])      # QD1: synchronous
    done[i] += req
    n += 1
    if n % 16 == 0 and time.monotonic() >= deadline:
        break
el = time.monotonic() - t0
h.shutdown()
mib = 1024 * 1024
print(json.dumps({
    "mibps": sum(done) / mib / el,
    "stream_mibps": [d / mib / el for d in done],
    "bytes": sum(done), "seconds": el,
}))
