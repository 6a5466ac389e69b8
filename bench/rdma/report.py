"""bench/rdma: the tables of RESULTS.md from results.jsonl (see run).

Usage: report.py RESULTS.jsonl META.json RESULTS.md COMMAND
"""
import json
import os
import re
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
meta = json.load(open(sys.argv[2]))
cmd = sys.argv[4]
runs = max(r["run"] for r in rows)
GiB = 2**30
ORDER = ["seq64K", "seq256K", "seq1M", "seq4M", "rand4K-qd1", "rand4K-qd32"]
workloads = [w for w in ORDER if any(r["workload"] == w for r in rows)]
seqs = [w for w in workloads if w.startswith("seq")]
rands = [w for w in workloads if w.startswith("rand")]
SERVERS = ("rdma", "tcp", "qemu")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pick(w, t):
    return [r for r in rows if r["workload"] == w and r["target"] == t]


def ratio(a, b):
    return a / b if a is not None and b else None


def f(x, fmt="%.2f"):
    return "-" if x is None else fmt % x


def mibs(r):
    if r["target"] == "link":
        return r.get("mibs")
    return r["bytes"] / 2**20 / r["secs"] if r["secs"] else None


def iops(r):
    if r["target"] == "link":
        if "lat_avg_us" in r:
            return 1e6 / r["lat_avg_us"]
        return r["mpps"] * 1e6
    return r["iops"]


def per_gib(r, key):
    return r[key] / (r["bytes"] / GiB) if r.get("bytes") and key in r else None


def m(w, t, fn):
    return med([fn(r) for r in pick(w, t)])


def label(w):
    return {"seq64K": "seq 64K", "seq256K": "seq 256K", "seq1M": "seq 1M",
            "seq4M": "seq 4M", "rand4K-qd1": "rand 4K QD1",
            "rand4K-qd32": "rand 4K QD32"}[w]


seq_qd = next((r["qd"] for r in rows if r["workload"].startswith("seq")), "?")
out = ["# RDMA transport vs NBD/TCP, qemu-nbd and the link (guest lab)\n"]
out.append(f"Command: `{cmd}`, {meta['date']}, commit {meta['commit']}, took "
           f"{meta['took_s']} s, on the 2-core project machine running the guest "
           f"under TCG, shared with other agents' jobs (load average "
           f"{meta['load_before']} before, {meta['load_after']} after).\n")
out.append("Guest (tests/vm/scenarios/bench-rdma.sh): Debian 6.1 kernel, 2 vCPUs, "
           "md RAID0 on 4 virtio disks of 80M (64K chunks), its first "
           f"{meta.get('mib', '?')} MiB filled "
           "by fio and read; soft-RoCE `rxe0` on the veth end gmr0 (10.77.0.1): "
           "**both ends in the guest's one network namespace**, rxe0 loops the "
           "RDMA traffic back and TCP to 10.77.0.1 goes through `lo`. Targets, "
           "each started fresh for every measurement:\n")
out.append("- **rdma**: `nbdkit --filter=gmblock-rdma --filter=gmblock-stripe gmblock "
           "file=/dev/md0 rdma=10.77.0.1 rdma-stats=F stats=F` (also listening on "
           "10.77.0.1:10809), client `nbdkit -U SOCK gmblock-rdma server=10.77.0.1 "
           "stats=F` (the bridge), fio to `nbd+unix:///?socket=SOCK`;")
out.append("- **tcp**: the same server command, fio to `nbd://10.77.0.1:10809`;")
out.append("- **qemu**: `qemu-nbd -f raw -t -e 32 --cache=none --aio=native -b "
           "10.77.0.1 -p 10811 /dev/md0`, fio to `nbd://10.77.0.1:10811`;")
out.append("- **link**: perftest on rxe0, server and client in the guest: "
           "`ib_write_bw -d rxe0 -s SIZE -N -n (%s MiB / SIZE) [10.77.0.1]` (MiB/s, "
           "128 WRITEs in flight; at 4K its message rate is the QD32 ceiling), "
           "`ib_read_lat -d rxe0 -s 4096 -n 2000` (1 / t_avg is the QD1 ceiling).\n"
           % meta.get("link_mib", 64))
out.append(f"Workloads: fio 3.33, `--ioengine=nbd`, one connection, `--time_based` "
           f"runs; sequential `--rw=read` at QD {seq_qd}, random `--rw=randread` "
           f"4K at QD1 and QD32. Medians of {runs} repetitions; in each, every "
           "target runs every workload in turn, the order of targets rotating "
           "with the repetition. Every measurement is in results.jsonl.\n")
out.append("**TCG emulates the CPU, the disks and (soft-RoCE) the NIC: absolute "
           "numbers mean nothing. Only the ratios between targets measured side "
           "by side are meaningful, and even they say how soft-RoCE on an "
           "emulated CPU compares with loopback TCP, not how a real NIC would.**\n")

out.append("## Throughput\n")
out.append("| workload | rdma | tcp | qemu | link | rdma / link | rdma / tcp | rdma / qemu |")
out.append("|---|---|---|---|---|---|---|---|")
thr = {}
for w in workloads:
    fn = mibs if w in seqs else iops
    v = {t: m(w, t, fn) for t in SERVERS + ("link",)}
    thr[w] = v
    fmt = "%.1f" if w in seqs else "%.0f"
    out.append("| %s (%s) | %s | %s | %s | %s | %s | %s | %s |" % (
        label(w), "MiB/s" if w in seqs else "IOPS",
        *(f(v[t], fmt) for t in SERVERS + ("link",)),
        f(ratio(v["rdma"], v["link"])), f(ratio(v["rdma"], v["tcp"])),
        f(ratio(v["rdma"], v["qemu"]))))
out.append("")

out.append("## CPU seconds per GiB read\n")
out.append("Server: the server process's utime+stime (/proc/PID/stat) over the "
           "measurement. Kernel threads: every child of kthreadd (kworker, "
           "ksoftirqd, md, rxe's), and irq+softirq: the guest's /proc/stat; "
           "soft-RoCE does the NIC's work on the CPU, in these and in the "
           "posting process, and with both ends in one guest they carry the "
           "client's side too (as loopback TCP does). Bridge: the rdma client's "
           "nbdkit. Guest: all non-idle CPU time.\n")
out.append("| workload | server rdma | server tcp | server qemu | rdma / tcp | "
           "kthreads rdma / tcp / qemu / link | irq+softirq rdma / tcp / qemu / link "
           "| bridge | guest busy rdma / tcp / qemu |")
out.append("|---|---|---|---|---|---|---|---|---|")
cpu = {}
for w in workloads:
    s = {t: m(w, t, lambda r: per_gib(r, "server_cpu_s")) for t in SERVERS}
    k = {t: m(w, t, lambda r: per_gib(r, "kthread_cpu_s")) for t in SERVERS}
    q = {t: m(w, t, lambda r: per_gib(r, "irq_cpu_s")) for t in SERVERS}
    b = {t: m(w, t, lambda r: per_gib(r, "busy_cpu_s")) for t in SERVERS}
    lk = m(w, "link", lambda r: per_gib(r, "kthread_cpu_s"))
    lq = m(w, "link", lambda r: per_gib(r, "irq_cpu_s"))
    cpu[w] = s
    out.append("| %s | %s | %s | %s | %s | %s / %s / %s / %s | %s / %s / %s / %s | %s | %s / %s / %s |" % (
        label(w), *(f(s[t]) for t in SERVERS), f(ratio(s["rdma"], s["tcp"])),
        *(f(k[t]) for t in SERVERS), f(lk), *(f(q[t]) for t in SERVERS), f(lq),
        f(m(w, "rdma", lambda r: per_gib(r, "bridge_cpu_s"))),
        *(f(b[t]) for t in SERVERS)))
out.append("")

out.append("## Copies and overlap (rdma)\n")
out.append("Server copies: the gmblock plugin's `memcpy_read_bytes` / `served_bytes` "
           "(its stats= file; tcp: the same counter for the TCP server, which "
           "also has the kernel's copy into the socket, not counted there). "
           "Bridge: `bytes_copied` / `read_bytes` (its registered bounce buffer). "
           "Overlap: the server's `overlap_<size>` from rdma-stats (time disk "
           "and network were busy at once / request time, per READ size the "
           "server saw; the bridge cuts requests at the server's 1M max_request).\n")
out.append("| workload | server memcpy / byte rdma | tcp | bridge copies / byte | overlap (size: value) |")
out.append("|---|---|---|---|---|")
overlap = {}
for w in workloads:
    keys = sorted({k for r in pick(w, "rdma") for k in r["rdma"]
                   if re.fullmatch(r"overlap_[0-9]+[KMG]", k)},
                  key=lambda k: int(k[8:-1]) << "KMG".index(k[-1]) * 10)
    ov = {k: med([r["rdma"].get(k) for r in pick(w, "rdma")]) for k in keys}
    overlap[w] = ov
    cp = lambda t: m(w, t, lambda r: ratio(r["server"].get("memcpy_read_bytes"),
                                           r["server"].get("served_bytes")))
    out.append("| %s | %s | %s | %s | %s |" % (
        label(w), f(cp("rdma")), f(cp("tcp")),
        f(m(w, "rdma", lambda r: ratio(r["bridge"].get("bytes_copied"),
                                       r["bridge"].get("read_bytes")))),
        "; ".join("%s: %.3f (disk busy %s, network busy %s, %s ms a request)" % (
            k[len("overlap_"):], v,
            f(m(w, "rdma", lambda r: r["rdma"].get(k + "_disk_busy"))),
            f(m(w, "rdma", lambda r: r["rdma"].get(k + "_net_busy"))),
            f(m(w, "rdma", lambda r: r["rdma"].get(k + "_mean_us", 0) / 1000), "%.1f"))
            for k, v in ov.items() if v is not None) or "-"))
out.append("")

out.append("## Against the targets of issue 10\n")
out.append("| figure | target | measured | met |")
out.append("|---|---|---|---|")


def verdict(x, ok):
    return "-" if x is None else "met" if ok(x) else "not met"


for w in seqs:
    x = ratio(thr[w]["rdma"], thr[w]["link"])
    out.append("| %s: rdma / ib_write_bw | >= 0.9x | %s | %s |" % (
        label(w), f(x, "%.2fx"), verdict(x, lambda v: v >= 0.9)))
for w in seqs:
    x = ratio(thr[w]["rdma"], thr[w]["tcp"])
    out.append("| %s: rdma / gmblock over TCP | >= 1.3x | %s | %s |" % (
        label(w), f(x, "%.2fx"), verdict(x, lambda v: v >= 1.3)))
for w in seqs:
    x = ratio(cpu[w]["rdma"], cpu[w]["tcp"])
    out.append("| %s: server CPU s/GiB, rdma / tcp | <= 0.5x | %s | %s |" % (
        label(w), f(x, "%.2fx"), verdict(x, lambda v: v <= 0.5)))
if "seq1M" in overlap:
    x = overlap["seq1M"].get("overlap_1M")
    out.append("| seq 1M on RAID0: overlap_1M | >= 0.6 | %s | %s |" % (
        f(x, "%.3f"), verdict(x, lambda v: v >= 0.6)))
out.append("")
out.append("All figures are ratios of targets measured in the same guest minutes "
           "apart; the per-run spread is in results.jsonl.\n")
# What the figures mean, written by hand after a run (kept across runs).
notes = os.path.join(os.path.dirname(sys.argv[1]), "NOTES.md")
if os.path.exists(notes):
    out.append(open(notes).read())
open(sys.argv[3], "w").write("\n".join(out) + "\n")
