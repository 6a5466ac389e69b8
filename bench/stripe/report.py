"""bench/stripe: the table in RESULTS.md from results.jsonl (see run).

Usage: report.py RESULTS.jsonl RESULTS.md COMMAND SECONDS
"""
import datetime
import json
import os
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cmd, took = sys.argv[3], sys.argv[4]
runs = max(r["run"] for r in rows)


def pick(test, array, stripe):
    return [r for r in rows if r["test"] == test and r["array"] == array
            and r["stripe"] == stripe]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def ratio(a, b):
    return a / b if b else float("inf") if a else float("nan")


def mibs(r):
    return r["bytes"] / 2**20 / r["secs"]


def rpb(r):
    return r["member_read_bytes"] / r["bytes"]


out = ["# gmblock-stripe on md: write-back in stripes, reads (guest lab)\n"]
iops = int(os.environ.get("LAB_BENCH_IOPS", "150"))
cache_args = os.environ.get("LAB_BENCH_CACHE", "cache-size=128M writeback-interval=600")
sustained = "writeback-interval=600" not in cache_args
load = os.environ.get("LAB_BENCH_LOAD", "?").split()
out.append(f"Command: `{cmd}`, {datetime.date.today()}, {took} s, on the 2-core "
           "project machine running the guest under TCG (other agents' jobs "
           "sharing it: 1-minute load average %s).\n"
           % (" at the start, ".join(load) + " at the end" if len(load) == 2 else "?"))
disks = ("throttled by QEMU to %d I/Os per second each (`virtio:96M:iops=%d`, "
         "reads and writes together, any size: a rotating disk)" % (iops, iops)
         if iops else "unthrottled (TCG serves them from the host's page cache)")
out.append(f"Guest: Debian 6.1 kernel, 4 virtio disks of 96M {disks}, md RAID5 then RAID0 "
           "on them (64K chunks, `--assume-clean`). Server: `nbdkit "
           "--filter=gmblock-cache [--filter=gmblock-stripe] gmblock "
           "file=/dev/md0 cache-mode=writeback %s` (%s); "
           % (cache_args, "the cache is smaller than the region and flushed "
              "every second: the client waits for the write-back to the disks"
              if sustained else "the flusher's interval is longer than a run: the "
              "write-back happens at the flush, or earlier when a quarter of "
              "the cache is dirty; with gmblock-stripe on RAID5, when three "
              "quarters are, whole stripes first: see gmblock-cache's "
              "`writeback-hold`") +
           "client: `nbd-client` on /dev/nbd0 and fio with direct I/O. "
           f"Medians of {runs} interleaved runs (the starting stack alternates); "
           "each figure is the stack with gmblock-stripe against the same stack "
           "without it in the same run.\n")
out.append("**TCG emulates the CPU and the disks: absolute speeds mean nothing. "
           "Only the ratios and the I/O counts (member bytes from "
           "/sys/block/vdX/stat) are meaningful%s.**\n"
           % ("; the throttle makes member I/Os cost time as on real disks, "
              "but the CPU (fio, nbdkit, md's parity) is still TCG's" if iops else ""))

out.append("## Writes on RAID5 (3 data disks: 192K stripes)\n")
out.append("| test | stack | member reads / byte written | member reads / byte written back "
           "| member writes / byte written back | MiB/s (incl. the flush) | flush s | full-stripe writes "
           "| partial | merged | blocks written back | cache block |")
out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
summary = []
for test, what in (("randwrite4k", "random 4K, QD16, then flush"),
                   ("seqwrite1m", "sequential 1M, QD4, then flush")):
    m = {}
    for s in (0, 1):
        rs = pick(test, "raid5", s)
        if not rs:
            continue
        wbb = lambda r: r["writebacks"] * r["block_size"]
        m[s] = dict(rpb=med([rpb(r) for r in rs]),
                    rpwb=med([r["member_read_bytes"] / wbb(r) for r in rs]),
                    wpwb=med([r["member_write_bytes"] / wbb(r) for r in rs]),
                    mibs=med([mibs(r) for r in rs]),
                    flush=med([r.get("flush_secs", 0) for r in rs]))
        out.append("| %s | %s | %.3f | %.3f | %.3f | %.2f | %.2f | %s | %s | %s | %s | %s |" % (
            what, "with gmblock-stripe" if s else "without", m[s]["rpb"], m[s]["rpwb"], m[s]["wpwb"],
            m[s]["mibs"], m[s]["flush"], med([r["wb_full"] for r in rs]),
            med([r["wb_partial"] for r in rs]), med([r["wb_merged"] for r in rs]),
            med([r["writebacks"] for r in rs]), rs[0]["block_size"]))
    if 0 in m and 1 in m:
        summary.append((test, m))
out.append("")

out.append("## Sequential reads at QD1, stripe-sized requests\n")
out.append("| array | request | MiB/s without | MiB/s with | with / without | member reads / byte, without / with |")
out.append("|---|---|---|---|---|---|")
read_ratios = {}
for array, req in (("raid5", "192K"), ("raid0", "256K")):
    a, b = pick("seqread", array, 0), pick("seqread", array, 1)
    if not a or not b:
        continue
    x, y = med([mibs(r) for r in a]), med([mibs(r) for r in b])
    read_ratios[array] = ratio(y, x)
    out.append("| %s | %s | %.1f | %.1f | %.2f | %.2f / %.2f |" % (
        array, req, x, y, ratio(y, x), med([rpb(r) for r in a]), med([rpb(r) for r in b])))
out.append("")

out.append("## Against the targets of issue 11\n")
out.append("| figure | target | measured | met |")
out.append("|---|---|---|---|")
for test, m in summary:
    r = ratio(m[1]["rpb"], m[0]["rpb"])
    if test == "randwrite4k":
        out.append("| RAID5 random 4K: member reads per byte, with / without | <= 0.2x | %.3fx | %s |"
                   % (r, "yes" if r <= 0.2 else "no"))
        t = ratio(m[1]["mibs"], m[0]["mibs"])
        out.append("| RAID5 random 4K: write throughput (incl. flush), with / without | >= 1.5x | %.2fx | %s |"
                   % (t, "yes" if t >= 1.5 else "no"))
        f = ratio(m[0]["flush"], m[1]["flush"])
        out.append("| RAID5 random 4K: write-back rate (the same dirty blocks, flush time), with / without | (not a target) | %.2fx | |"
                   % f)
    else:
        out.append("| RAID5 sequential 1M: member reads per byte written, with | <= 0.05 | %.3f (without: %.3f) | %s |"
                   % (m[1]["rpb"], m[0]["rpb"], "yes" if m[1]["rpb"] <= 0.05 else "no"))
for array, r in read_ratios.items():
    out.append("| %s sequential read QD1, with / without | >= 1.0x | %.2fx | %s |"
               % (array.upper(), r, "yes" if r >= 1.0 else "no (within noise?)" if r >= 0.95 else "no"))
out.append("")
# What the figures mean, written by hand after a run (kept across runs).
# results[-X].jsonl: NOTES[-X].md beside it.
try:
    d, f = os.path.split(sys.argv[1])
    out.append(open(os.path.join(d, "NOTES" + f[len("results"):-len(".jsonl")] + ".md")).read())
except FileNotFoundError:
    pass
open(sys.argv[2], "w").write("\n".join(out) + "\n")
