#!/usr/bin/env python3
"""ncu --csv --metrics gpu__time_duration.sum: per kernel name, the durations (us) in launch order."""
import csv, sys, collections
lines = [l for l in open(sys.argv[1], errors="replace") if l.startswith('"')]
d = collections.OrderedDict()
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    name = r["Kernel Name"].split("(")[0]
    v = float(r["Metric Value"].replace(",", ""))
    if r.get("Metric Unit") == "nsecond" or r.get("Metric Unit") == "ns": v /= 1000
    if r.get("Metric Unit") in ("msecond", "ms"): v *= 1000
    d.setdefault(name, []).append(v)
for k, v in d.items():
    print(f"{k:40s} n={len(v):3d} " + " ".join(f"{x:.1f}" for x in v[:9]))
