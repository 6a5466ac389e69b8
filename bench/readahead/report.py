#!/usr/bin/python3
# Medians and pass/miss from bench/readahead/run's results.jsonl.
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]


def med(case, layer, req, server, key="mibps"):
    v = [r["result"][key] for r in rows if r["case"] == case and
         r["layer"] == layer and r["req"] == req and r["server"] == server]
    return statistics.median(v) if v else float("nan"), len(v)


def stat_med(case, layer, server, key):
    v = [r.get("gmblock-readahead." + key) for r in rows if r["case"] == case
         and r["layer"] == layer and r["server"] == server]
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else float("nan")


print("### QD1 sequential reads (MiB/s, median of %d)\n" %
      med("seq", "disk", 4096, "ra")[1])
print("| layer | request | ra | plain | nbdkit ra+cache | ra/plain | target | ra/nbdkit | target 1.3x |")
print("|---|---:|---:|---:|---:|---:|---|---:|---|")
for layer, need in (("disk", 1.5), ("slow", 3.0)):
    for req in sorted({r["req"] for r in rows if r["case"] == "seq"}):
        a, _ = med("seq", layer, req, "ra")
        b, _ = med("seq", layer, req, "plain")
        c, _ = med("seq", layer, req, "nbdkit")
        x, y = a / b, a / c
        print(f"| {layer} | {req // 1024}K | {a:.1f} | {b:.1f} | {c:.1f} | {x:.2f}x | "
              f"{'pass' if x >= need else 'MISS'} (>= {need}x) | {y:.2f}x | "
              f"{'pass' if y >= 1.3 else 'MISS'} |")

print("\n### 4K random reads, QD32, disk (fio nbd engine)\n")
a, n = med("rand", "disk", 4096, "ra", "iops")
b, _ = med("rand", "disk", 4096, "plain", "iops")
# A run without the filter's counters (ra-stats not written: nbdkit died
# at exit, or the counter was renamed) measured no waste: not 0%.
wasted = [r["gmblock-readahead.wasted_bytes"] / max(r["result"]["bytes"], 1)
          if "gmblock-readahead.wasted_bytes" in r else None
          for r in rows if r["case"] == "rand" and r["server"] == "ra"]
w = statistics.median(wasted) if wasted and None not in wasted else float("nan")
print("| ra IOPS | plain IOPS | ra/plain | target | wasted / read | target |")
print("|---:|---:|---:|---|---:|---|")
print(f"| {a:.0f} | {b:.0f} | {a / b:.3f} | {'pass' if a / b >= 0.95 else 'MISS'} (>= 0.95) | "
      f"{w * 100:.3f}% | {'pass' if w < 0.05 else 'MISS'} (< 5%) |")

print("\n### 4 interleaved sequential streams on one connection, 16K QD1 (MiB/s)\n")
print("| layer | server | single stream | 4 streams total | slowest stream | slowest / (single/4) | target |")
print("|---|---|---:|---:|---:|---:|---|")
for layer in ("disk", "slow"):
    for srv in ("ra", "plain"):
        s1, _ = med("streams1", layer, 16384, srv)
        s4, _ = med("streams4", layer, 16384, srv)
        slow = [min(r["result"]["stream_mibps"]) for r in rows if r["case"] == "streams4"
                and r["layer"] == layer and r["server"] == srv]
        m = statistics.median(slow) if slow else float("nan")
        ratio = m / (s1 / 4)
        tgt = ("pass" if ratio >= 0.8 else "MISS") if srv == "ra" else "(reference)"
        print(f"| {layer} | {srv} | {s1:.1f} | {s4:.1f} | {m:.1f} | {ratio:.2f} | {tgt} |")
