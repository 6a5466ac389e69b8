#!/usr/bin/python3
# gmblock tests: check `nbdinfo --json` output against expectations.
#   nbdinfo --json URI | data-info-check.py KEY=VALUE...
# VALUE is an integer, true or false.  The block sizes must also be
# consistent: powers of two, minimum <= preferred <= maximum, preferred
# at least 4096 and maximum at most 64 MiB.  Exits 1 naming every
# mismatch.
import json
import sys

info = json.load(sys.stdin)["exports"][0]
bad = []

for arg in sys.argv[1:]:
    key, want = arg.split("=", 1)
    if want in ("true", "false"):
        want = want == "true"
    else:
        want = int(want)
    got = info.get(key)
    if got != want:
        bad.append(f"{key}: expected {want!r}, got {got!r}")

mn = info.get("block_size_minimum")
pref = info.get("block_size_preferred")
mx = info.get("block_size_maximum")
if None in (mn, pref, mx):
    bad.append(f"block sizes missing: {mn}, {pref}, {mx}")
else:
    for name, v in (("minimum", mn), ("preferred", pref), ("maximum", mx)):
        if v <= 0 or v & (v - 1):
            bad.append(f"block_size_{name} {v} is not a power of two")
    if not mn <= pref <= mx:
        bad.append(f"block sizes out of order: {mn} <= {pref} <= {mx}")
    if pref < 4096:
        bad.append(f"block_size_preferred {pref} < 4096")
    if mx > 64 * 1024 * 1024 or mx < 1024 * 1024:
        bad.append(f"block_size_maximum {mx} not in [1M, 64M]")
    if info.get("export-size", 0) % mn:
        bad.append(f"size {info.get('export-size')} is not a multiple "
                   f"of the minimum block size {mn}")

if bad:
    print("nbdinfo mismatch:\n  " + "\n  ".join(bad), file=sys.stderr)
    print(json.dumps(info, indent=1), file=sys.stderr)
    sys.exit(1)
