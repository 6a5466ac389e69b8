#!/usr/bin/python3
# Where a READ's time goes, from the gmblock-rdma filter's trace lines
# (nbdkit -v -D gmblock-rdma.trace=1; bench/rdma/overlap NBDKIT_OPTS=...):
# per log, the mean over READs of each phase, in ms and as a share of
# the request (its receive to its reply's completion):
#   start     receive -> the first piece's read begins (queue, worker)
#   first     receive -> the first piece lands (its WRITE is posted)
#   disk_only time only the disk is busy; net_only: only the network
#   tail      the last read's end -> the last WRITE's completion
# and how many pieces were still being sent when the last read ended.
#   reply     the last WRITE's completion -> the reply's completion
# Usage: bench/rdma/trace.py LOG...
import re, statistics, sys

line_re = re.compile(r"trace: off (\d+) len (\d+) end (\d+) (.*)")
piece_re = re.compile(r"\| (\d+) disk (\d+)-(\d+) net (\d+)-(\d+)")


def union(spans):
    t, end = 0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            t += b - a
            end = b
        elif b > end:
            t += b - end
            end = b
    return t


def cover(spans, t):
    return any(a <= t < b for a, b in spans)


def phases(end, pieces):
    disk = [(p[1], p[2]) for p in pieces]
    net = [(p[3], p[4]) for p in pieces]
    # both, disk only, net only: by 1 us steps would be slow; by events
    pts = sorted({0, end} | {x for s in disk + net for x in s})
    both = donly = nonly = 0
    for a, b in zip(pts, pts[1:]):
        d, n = cover(disk, a), cover(net, a)
        both += (b - a) * (d and n)
        donly += (b - a) * (d and not n)
        nonly += (b - a) * (n and not d)
    last_read = max(p[2] for p in pieces)
    last_net = max(p[4] for p in pieces)
    return {
        "total": end,
        "start": min(p[1] for p in pieces),
        "first": min(p[2] for p in pieces),
        "both": both, "disk_only": donly, "net_only": nonly,
        "tail": last_net - last_read,
        "unsent": sum(1 for p in pieces if p[4] > last_read and p[3] <= last_read),
        "reply": end - last_net,
    }


for path in sys.argv[1:]:
    rows = []
    for l in open(path, errors="replace"):
        m = line_re.search(l)
        if not m:
            continue
        pieces = [tuple(int(x) for x in p.groups()) for p in piece_re.finditer(m.group(4))]
        if len(pieces) > 1:
            rows.append(phases(int(m.group(3)), pieces))
    if not rows:
        print("%s: no split READs traced" % path)
        continue
    keys = ["total", "start", "first", "both", "disk_only", "net_only", "tail", "reply"]
    mean = {k: statistics.mean(r[k] for r in rows) for k in keys}
    print("%s: %d READs; mean ms (share): %s; pieces still unsent when the last read ends %.1f"
          % (path, len(rows),
             ", ".join("%s %.1f (%.2f)" % (k, mean[k] / 1000, mean[k] / mean["total"])
                       for k in keys),
             statistics.mean(r["unsent"] for r in rows)))
