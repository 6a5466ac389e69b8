#!/usr/bin/python3
"""Turn one measurement into one JSON line (bench/run), or print a
one-line summary of such a line (--brief, reading stdin)."""
import argparse, json, os, re, sys

GIB = 1 << 30
MIB = 1 << 20

def brief():
    r = json.loads(sys.stdin.read())
    parts = [f"{r['target']:5} {r['workload']:5} {r['server']:14} #{r['rep']}"]
    if r.get("iops") is not None:
        p99 = r["p99_us"]
        parts.append(f"{r['iops']:9.0f} IOPS p99 " + (f"{p99:7.0f} us" if p99 is not None else "    n/a"))
    parts.append(f"{r['mib_s']:7.0f} MiB/s")
    if r.get("cpu_s_per_gib") is not None:
        parts.append(f"cpu {r['cpu_s_per_gib']:.2f} s/GiB")
    parts.append(f"rss {r['rss_kb'] / 1024:.1f} MiB")
    if r.get("copies_per_byte") is not None:
        parts.append(f"copies {r['copies_per_byte']:.3f}")
    if r.get("cache_growth") is not None:
        parts.append(f"cache +{100 * r['cache_growth']:.1f}%")
    if r.get("file_cache_growth") is not None:
        parts.append(f"file in cache +{100 * r['file_cache_growth']:.1f}%")
    if r.get("warnings"):
        parts.append("WARN: " + " | ".join(r["warnings"])[:200])
    print("  " + "  ".join(parts))

def read_stats(path):
    st = {}
    if path and os.path.exists(path):
        for line in open(path):
            m = re.match(r"\S+?\.(\S+)\s+(\S+)", line)
            if m:
                try:
                    st[m.group(1)] = float(m.group(2))
                except ValueError:
                    pass
    return st

def main():
    if "--brief" in sys.argv:
        return brief()
    ap = argparse.ArgumentParser()
    for a in ["target", "workload", "server", "fio", "stats", "stderr",
              "cached0", "cached1", "file-cached0", "file-cached1"]:
        ap.add_argument("--" + a, default="")
    for a in ["rep", "cpu-ticks", "clk-tck", "hwm-kb", "kids-hwm-kb", "size"]:
        ap.add_argument("--" + a, type=int, default=0)
    ap.add_argument("--elapsed", type=float, default=0)
    a = ap.parse_args()

    r = {"target": a.target, "workload": a.workload, "server": a.server,
         "rep": a.rep, "elapsed_s": round(a.elapsed, 3),
         "cpu_s": a.cpu_ticks / a.clk_tck,
         "hwm_kb": a.hwm_kb, "kids_hwm_kb": a.kids_hwm_kb,
         "rss_kb": a.hwm_kb + a.kids_hwm_kb}
    r["iops"] = r["p99_us"] = r["p50_us"] = None
    if a.fio and os.path.exists(a.fio):
        j = json.load(open(a.fio))["jobs"][0]
        nbytes = 0
        iops = 0.0
        bw = 0.0
        main_op = None
        for op in ("read", "write"):
            o = j[op]
            if o["io_bytes"] > 0:
                nbytes += o["io_bytes"]
                iops += o["iops"]
                bw += o["bw_bytes"]
                main_op = o
        r["bytes"] = nbytes
        r["iops"] = iops
        r["mib_s"] = bw / MIB
        if main_op:
            # A percentile fio did not report is not measured (not 0 us).
            pct = main_op["clat_ns"].get("percentile", {})
            r["p99_us"] = pct["99.000000"] / 1000 if "99.000000" in pct else None
            r["p50_us"] = pct["50.000000"] / 1000 if "50.000000" in pct else None
        r["fio_errors"] = j.get("error", 0)
    else:
        r["bytes"] = a.size
        r["mib_s"] = a.size / MIB / a.elapsed if a.elapsed > 0 else 0
    r["cpu_s_per_gib"] = r["cpu_s"] / (r["bytes"] / GIB) if r["bytes"] else None

    st = read_stats(a.stats)
    r["copies_per_byte"] = None
    if st:
        r["stats"] = st
        # Both counters or no figure: a missing (renamed) memcpy counter
        # would read as 0 copies per byte, the claim this column checks.
        if a.workload in ("rw32", "sw1m"):
            cp, n = st.get("memcpy_write_bytes"), st.get("write_bytes")
        else:
            cp, n = st.get("memcpy_read_bytes"), st.get("served_bytes")
        r["copies_per_byte"] = cp / n if cp is not None and n else None

    r["cache_growth"] = None
    if a.cached0 and a.cached1:
        r["cached0_kb"] = int(a.cached0)
        r["cached1_kb"] = int(a.cached1)
        if r["bytes"]:
            r["cache_growth"] = (int(a.cached1) - int(a.cached0)) * 1024 / r["bytes"]

    r["file_cache_growth"] = None
    if a.file_cached0 and a.file_cached1 and r["bytes"]:
        r["file_cached0"] = int(a.file_cached0)
        r["file_cached1"] = int(a.file_cached1)
        r["file_cache_growth"] = (int(a.file_cached1) - int(a.file_cached0)) / r["bytes"]

    warn = []
    if a.stderr and os.path.exists(a.stderr):
        for line in open(a.stderr, errors="replace"):
            line = line.strip()
            if line:
                warn.append(line)
    r["warnings"] = warn[:5]
    print(json.dumps(r))

main()
