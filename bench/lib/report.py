#!/usr/bin/python3
"""bench/RESULTS.md from meta.json and results.jsonl (see bench/run)."""
import json, sys
from collections import defaultdict
from statistics import median

meta = json.load(open(sys.argv[1]))
rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]

NAMES = {
    "gmblock": "gmblock (direct)",
    "gmblock-pc": "gmblock direct=false",
    "qemu-none": "qemu-nbd --cache=none --aio=io_uring",
    "qemu-def": "qemu-nbd (default: writeback, threads)",
    "nbdkit-file": "nbdkit file",
    "nbd-server": "nbd-server",
    "null": "nbdkit null (ceiling)",
}
def nice(s):
    if s.startswith("gmblock-ring="):
        return "gmblock " + s[len("gmblock-"):]
    return NAMES.get(s, s)

WL = {
    "seq": ("seq read (nbdcopy)", "MiB/s"),
    "rr32": ("4k randread QD32", "IOPS"),
    "rr1": ("4k randread QD1", "IOPS"),
    "rw32": ("4k randwrite QD32", "IOPS"),
    "sw1m": ("1M seq write QD8", "MiB/s"),
    "rss1": ("256k randread QD8, 1 conn", "MiB/s"),
    "rss8": ("256k randread QD8, 8 conns", "MiB/s"),
}
TARGETS = {
    "ram": "RAM-backed loop device (1 GiB, losetup --direct-io=on over /dev/shm)",
    "cold": "File on the root disk (2 GiB), cold: caches dropped before each run",
    "warm": "File on the root disk (2 GiB), warm page cache (read once before each run)",
    "write": "Writes, RAM-backed loop device",
    "rss": "RSS scaling, RAM-backed loop device: fio 256k randread QD8, numjobs=1 vs 8",
}

data = defaultdict(list)          # (target, wl, server) -> [row]
order = defaultdict(list)         # target -> servers in first-seen order
wls = defaultdict(list)
for r in rows:
    data[(r["target"], r["workload"], r["server"])].append(r)
    if r["server"] not in order[r["target"]]:
        order[r["target"]].append(r["server"])
    if r["workload"] not in wls[r["target"]]:
        wls[r["target"]].append(r["workload"])

SORT = ["gmblock"] + [v.split(":")[0] for v in meta.get("gm_variants", []) if v.split(":")[0] != "gmblock-pc"]
def server_sort(t):
    s = order[t]
    def key(x):
        if x in SORT: return (0, SORT.index(x), x)
        if x.startswith("gmblock"): return (1, 0, x)
        peers = ["qemu-none", "qemu-def", "nbdkit-file", "nbd-server", "null"]
        return (2, peers.index(x) if x in peers else 99, x)
    return sorted(s, key=key)

def med(t, wl, s, key):
    vals = [r.get(key) for r in data.get((t, wl, s), []) if r.get(key) is not None]
    return median(vals) if vals else None

def thr_key(wl):
    return "iops" if WL[wl][1] == "IOPS" else "mib_s"

def fmt(v, kind):
    if v is None: return "n/a"
    if kind == "IOPS": return f"{v/1000:.1f}k"
    if kind == "MiB/s": return f"{v:.0f}"
    if kind == "us": return f"{v:.0f}"
    if kind == "cpu": return f"{v:.2f}"
    if kind == "mib": return f"{v/1024:.1f}"
    if kind == "pct": return f"{100*v:.1f}%"
    if kind == "copies": return f"{v:.3f}"
    if kind == "x": return f"{v:.2f}x"
    return str(v)

out = []
P = out.append

P("# gmblock benchmark results\n")
P(f"- Date: {meta['date']}")
P(f"- Command: `{meta['command']}` (as root, from the repository root)")
P(f"- Repetitions: {meta['runs']} per case, interleaved (each repetition runs every server in turn "
  f"for each workload; the starting server rotates); tables show medians. fio cases {meta['dur']} s, "
  f"RSS cases {meta['rss_dur']} s; sequential reads copy the whole export (1 GiB RAM device, 2 GiB file).")
P(f"- Machine: {meta['nproc']} CPUs ({meta['cpu']}), {meta['mem']} RAM, kernel {meta['kernel']}")
P(f"- Tree: {meta['git']}; the built plugin was snapshotted at start (sha256 {meta['plugin_sha256']}…) and used for the whole run")
P("- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()))
if meta.get("packages"):
    P("- Debian packages: " + ", ".join(f"{k} {v}" for k, v in meta["packages"].items()))
q = meta.get("waited_quiet")
quiet_note = ("waited for a quiet machine: yes" if q == "1" else
              "waited for a quiet machine but it **never got quiet** (ran anyway)" if q == "0" else
              "did not wait for a quiet machine")
P(f"- Load average at start {meta['load_at_start']} ({meta['qemu_system_at_start']} qemu-system "
  f"processes), at end {meta['load_at_end']}; {quiet_note}. Client and server share the CPUs.")
P("- Transport: TCP on 127.0.0.1, one server process started fresh for every run and stopped "
  "with SIGTERM afterwards (gmblock writes its stats file then).")
if meta.get("quick"):
    P("\n**QUICK smoke run: 1 repetition, short cases. Not for conclusions.**")
P("")

# ---------------------------------------------------------------- targets
tg = []   # (target, what, gm, peer, ratio, goal_text, ok, miss)
def ge(what, t, gm_s, peer_s, wl, goal, key=None):
    key = key or thr_key(wl)
    a, b = med(t, wl, gm_s, key), med(t, wl, peer_s, key)
    if a is None or b is None: return
    ratio = a / b
    ok = ratio >= goal
    miss = 0 if ok else (goal - ratio) / goal
    tg.append((t, what, f"{fmt(a, WL[wl][1])} / {fmt(b, WL[wl][1])}", ratio, f">= {goal:.2f}x", ok, miss))
def le_cpu(what, t, gm_s, peer_s, wl):
    a, b = med(t, wl, gm_s, "cpu_s_per_gib"), med(t, wl, peer_s, "cpu_s_per_gib")
    if a is None or b is None: return
    ratio = a / b
    ok = ratio <= 1.0
    tg.append((t, what, f"{a:.2f} / {b:.2f} s/GiB", ratio, "<= 1.00x", ok, 0 if ok else ratio - 1.0))

variant_order = [v.split(":")[0] for v in meta.get("gm_variants", [])]
gm_direct = [s for s in {r["server"] for r in rows} if s.startswith("gmblock") and s != "gmblock-pc"]
gm_direct.sort(key=lambda s: (variant_order.index(s) if s in variant_order else 99, s))
for g in gm_direct:
    n = nice(g)
    ge(f"{n} vs qemu-nbd cache=none io_uring, RAM, 4k randread QD32 IOPS", "ram", g, "qemu-none", "rr32", 1.1)
    ge(f"{n} vs qemu-nbd cache=none io_uring, RAM, seq read MiB/s", "ram", g, "qemu-none", "seq", 1.1)
    le_cpu(f"{n} vs qemu-nbd cache=none io_uring, RAM, CPU s/GiB, seq read", "ram", g, "qemu-none", "seq")
    le_cpu(f"{n} vs qemu-nbd cache=none io_uring, RAM, CPU s/GiB, 4k randread QD32", "ram", g, "qemu-none", "rr32")
    ge(f"{n} vs nbdkit null (ceiling), RAM, 4k randread QD32 IOPS", "ram", g, "null", "rr32", 0.85)
ge("gmblock direct=false vs nbdkit file, warm, seq read MiB/s", "warm", "gmblock-pc", "nbdkit-file", "seq", 1.0)
ge("gmblock direct=false vs nbdkit file, warm, 4k randread QD32 IOPS", "warm", "gmblock-pc", "nbdkit-file", "rr32", 1.0)
for g in gm_direct:
    n = nice(g)
    le_cpu(f"{n} vs nbdkit file, cold, CPU s/GiB, seq read", "cold", g, "nbdkit-file", "seq")
    le_cpu(f"{n} vs nbdkit file, cold, CPU s/GiB, 4k randread QD32", "cold", g, "nbdkit-file", "rr32")
    for wl in ("seq",):   # rr32 moves too few bytes for Cached to be meaningful on a shared machine: table only
        a = med("cold", wl, g, "cache_growth")
        b = med("cold", wl, "nbdkit-file", "cache_growth")
        fa = med("cold", wl, g, "file_cache_growth")
        fb = med("cold", wl, "nbdkit-file", "file_cache_growth")
        if a is not None:
            ok = a < 0.05
            tg.append(("cold", f"{n}, cold, page cache (Cached) growth / bytes served, {WL[wl][0]}",
                       f"{fmt(a, 'pct')} (nbdkit file {fmt(b, 'pct')}); the file's own cached pages: "
                       f"{fmt(fa, 'pct')} (nbdkit file {fmt(fb, 'pct')})", None, "< 5%", ok,
                       0 if ok else a / 0.05 - 1))
    ge(f"{n} vs qemu-nbd cache=none, 4k randwrite QD32 IOPS", "write", g, "qemu-none", "rw32", 1.0)
    ge(f"{n} vs qemu-nbd cache=none, 1M seq write MiB/s", "write", g, "qemu-none", "sw1m", 1.0)
for g in gm_direct + ["gmblock-pc"]:
    a, b = med("rss", "rss8", g, "rss_kb"), med("rss", "rss1", g, "rss_kb")
    if a is not None and b is not None:
        ratio = a / b
        ok = ratio <= 1.25
        tg.append(("rss", f"{nice(g)}, peak RSS 8 connections / 1 connection",
                   f"{a/1024:.1f} / {b/1024:.1f} MiB", ratio, "<= 1.25x", ok, 0 if ok else ratio / 1.25 - 1))

P("## Targets (issue 2)\n")
P("| target | gmblock / peer (medians) | ratio | goal | result |")
P("|---|---|---:|---|---|")
for t, what, vals, ratio, goal, ok, miss in tg:
    res = "PASS" if ok else f"MISS by {100*miss:.1f}%"
    P(f"| {what} | {vals} | {fmt(ratio, 'x') if ratio is not None else ''} | {goal} | {res} |")
n_pass = sum(1 for x in tg if x[5])
import os
if os.path.exists(os.path.join(os.path.dirname(os.path.abspath(sys.argv[2])), "ANALYSIS.md")):
    P("What limits the misses (measurements, commands): see [ANALYSIS.md](ANALYSIS.md).\n")
P(f"\n{n_pass} of {len(tg)} targets pass. Miss percentage: for 'at least' goals (goal - ratio) / goal; "
  "for 'at most' goals ratio / limit - 1.\n")

# ---------------------------------------------------------------- per target tables
def target_table(t):
    servers = server_sort(t)
    cols = []   # (header, fn(server) -> str)
    for wl in wls[t]:
        label, unit = WL[wl]
        cols.append((f"{label} {unit}", lambda s, wl=wl, unit=unit: fmt(med(t, wl, s, thr_key(wl)), unit)))
        if wl != "seq":
            cols.append((f"{wl} p99 µs", lambda s, wl=wl: fmt(med(t, wl, s, "p99_us"), "us")))
        cols.append((f"{wl} CPU s/GiB", lambda s, wl=wl: fmt(med(t, wl, s, "cpu_s_per_gib"), "cpu")))
        if t == "cold":
            cols.append((f"{wl} Cached growth / bytes", lambda s, wl=wl: fmt(med(t, wl, s, "cache_growth"), "pct")))
            cols.append((f"{wl} file's cached pages growth / bytes", lambda s, wl=wl: fmt(med(t, wl, s, "file_cache_growth"), "pct")))
    def rss(s):
        v = [med(t, wl, s, "rss_kb") for wl in wls[t]]
        v = [x for x in v if x is not None]
        return fmt(max(v), "mib") if v else "n/a"
    cols.append(("peak RSS MiB", rss))
    def copies(s):
        v = [med(t, wl, s, "copies_per_byte") for wl in wls[t]]
        v = [fmt(x, "copies") for x in v if x is not None]
        if not v: return "n/a"
        return v[0] if len(set(v)) == 1 else " / ".join(v)
    cols.append(("copies per byte", copies))
    P("| server | " + " | ".join(h for h, _ in cols) + " |")
    P("|---|" + "---:|" * len(cols))
    for s in servers:
        P(f"| {nice(s)} | " + " | ".join(f(s) for _, f in cols) + " |")
    P("")

def ratio_table(t, gms, peers):
    for g in gms:
        if not any((t, wl, g) in data for wl in wls[t]): continue
        P(f"Ratios {nice(g)} ÷ peer (throughput; CPU s/GiB in parentheses, lower is better for gmblock when < 1):\n")
        P("| peer | " + " | ".join(WL[wl][0] for wl in wls[t]) + " |")
        P("|---|" + "---:|" * len(wls[t]))
        for p in server_sort(t):
            if p == g or p not in peers: continue
            cells = []
            for wl in wls[t]:
                a, b = med(t, wl, g, thr_key(wl)), med(t, wl, p, thr_key(wl))
                ca, cb = med(t, wl, g, "cpu_s_per_gib"), med(t, wl, p, "cpu_s_per_gib")
                if a is None or not b:
                    cells.append("n/a"); continue
                c = f"{a/b:.2f}x"
                if ca is not None and cb:
                    c += f" ({ca/cb:.2f}x)"
                cells.append(c)
            P(f"| {nice(p)} | " + " | ".join(cells) + " |")
        P("")

for t in ["ram", "cold", "warm", "write"]:
    if t not in order: continue
    P(f"## {TARGETS[t]}\n")
    target_table(t)
    allsrv = server_sort(t)
    gms = [s for s in allsrv if s.startswith("gmblock")]
    ratio_table(t, gms, [s for s in allsrv if not s.startswith("gmblock")])

if "rss" in order:
    t = "rss"
    P(f"## {TARGETS[t]}\n")
    P("| server | peak RSS 1 conn MiB | peak RSS 8 conns MiB | ratio 8/1 | growth MiB | growth beyond nbdkit null's MiB | MiB/s 1 conn | MiB/s 8 conns |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|")
    na, nb = med(t, "rss1", "null", "rss_kb"), med(t, "rss8", "null", "rss_kb")
    for s in server_sort(t):
        a, b = med(t, "rss1", s, "rss_kb"), med(t, "rss8", s, "rss_kb")
        g = f"{(b - a)/1024:.1f}" if a and b else "n/a"
        ex = f"{((b - a) - (nb - na))/1024:.1f}" if a and b and na and nb and s != "null" else ""
        P(f"| {nice(s)} | {fmt(a, 'mib')} | {fmt(b, 'mib')} | "
          f"{fmt(b/a, 'x') if a and b else 'n/a'} | {g} | {ex} | {fmt(med(t, 'rss1', s, 'mib_s'), 'MiB/s')} | "
          f"{fmt(med(t, 'rss8', s, 'mib_s'), 'MiB/s')} |")
    P("\nnbdkit null has no data path: its growth is nbdkit's own cost of 8 connections (a thread pool per "
      "connection, request buffers malloc'd per request); 'growth beyond nbdkit null's' is what the plugin "
      "adds on top.")
    P("\nnbd-server forks one process per connection: its RSS is the parent's VmHWM plus the sum of "
      "the children's VmHWM (sampled every 0.1 s), which counts shared pages once per process.\n")

# ---------------------------------------------------------------- notes
P("## How the numbers are taken\n")
P("- Sequential read: `nbdcopy --no-extents nbd://127.0.0.1:PORT null:` (whole export; default 4 "
  "connections when the server advertises multi-conn, 64 requests of 256 KiB); MiB/s = export size / client wall time.")
P("- fio: `fio --name=bench --ioengine=nbd --uri=nbd://127.0.0.1:PORT --time_based --group_reporting "
  "--rw=randread|randwrite|write --bs=4k|1M --iodepth=32|1|8` (one connection); the 'fio: connected' lines are "
  "stripped before the JSON. p99 = completion latency (clat) 99th percentile.")
P("- Server CPU s/GiB: utime+stime (+ reaped children for nbd-server) from /proc/PID/stat over the "
  "workload, divided by GiB transferred. Loop-device kernel work (the loop worker threads) is not in anyone's figure.")
P("- Peak RSS: VmHWM of the server process at the end of the run (max over the target's workloads).")
P("- Copies per byte: gmblock's stats file (memcpy_read_bytes / served_bytes for reads, "
  "memcpy_write_bytes / write_bytes for writes); n/a for the peers, which have no such counter.")
P("- Cold: `sync; echo 3 > /proc/sys/vm/drop_caches` before each run; page cache growth = "
  "(Cached after - Cached before, /proc/meminfo) / bytes served. Other processes on the machine move Cached "
  "too, so the file's own page-cache residency (`fincore -b` on the served file, before and after) is shown beside it; "
  "it counts only this file.")
P("- Writes go to the RAM-backed loop device (content changes, size does not); they run after the read benchmarks.")
P("- Servers: `./nbdkit -f [-r] -i 127.0.0.1 -p PORT gmblock file=F stats=S [direct=false]`; "
  "`qemu-nbd [-r] -f raw -t -e 16 -b 127.0.0.1 -p PORT --pid-file=P [--cache=none --aio=io_uring] F`; "
  "`nbdkit -f [-r] -i 127.0.0.1 -p PORT file F`; `nbd-server -C CONF -p PIDFILE` with "
  "`[generic] port, listenaddr=127.0.0.1` and an `[bench] exportname=F, readonly=` section; "
  "`nbdkit -f -r -i 127.0.0.1 -p PORT null SIZE`. Read benchmarks serve read-only.")
P("")

if meta.get("dropped_variants"):
    P("gmblock variants found in the source but refused by the built plugin (not measured):\n")
    P("```")
    P(meta["dropped_variants"].rstrip())
    P("```\n")
if meta.get("preflight"):
    P("gmblock's own start-up messages (`nbdkit -v`, preflight run):\n")
    P("```")
    P(meta["preflight"].rstrip())
    P("```\n")

warns = defaultdict(set)
for r in rows:
    for w in r.get("warnings", []):
        warns[r["server"]].add(w)
P("## Server stderr\n")
if not warns:
    P("No server wrote anything to stderr in any run.\n")
else:
    for s, ws in warns.items():
        P(f"- {nice(s)}:")
        for w in sorted(ws)[:10]:
            P(f"  - `{w}`")
    P("")

# ---------------------------------------------------------------- raw
P("## Raw per-run numbers\n")
P("All fields of every run are in `results.jsonl` beside this file. Per run (in repetition order):\n")
P("| target | workload | server | throughput | p99 µs | CPU s/GiB | peak RSS MiB |")
P("|---|---|---|---|---|---|---|")
for t in ["ram", "cold", "warm", "write", "rss"]:
    for wl in wls.get(t, []):
        for s in server_sort(t):
            rs = sorted(data.get((t, wl, s), []), key=lambda r: r["rep"])
            if not rs: continue
            unit = WL[wl][1]
            P(f"| {t} | {wl} | {nice(s)} | " +
              " / ".join(fmt(r.get(thr_key(wl)), unit) for r in rs) + f" {unit} | " +
              " / ".join(fmt(r.get("p99_us"), "us") for r in rs) + " | " +
              " / ".join(fmt(r.get("cpu_s_per_gib"), "cpu") for r in rs) + " | " +
              " / ".join(fmt(r.get("rss_kb"), "mib") for r in rs) + " |")
P("")
print("\n".join(out))
