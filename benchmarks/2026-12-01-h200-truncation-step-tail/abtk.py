#!/usr/bin/env python3
"""Median over rounds of each build's truncation.csv: truncated_ms and truncated_b2b_ms, with ratios to the first build."""
import csv, glob, statistics, sys
L, labels = sys.argv[1], sys.argv[2:]
data = {}
for lab in labels:
    for f in sorted(glob.glob(f"{L}/tk-{lab}-r*/truncation.csv")):
        for r in csv.DictReader(open(f)):
            k = (r["config"], int(r["b"]))
            d = data.setdefault(k, {}).setdefault(lab, {"t": [], "b2b": [], "plain": []})
            d["t"].append(float(r["truncated_ms"])); d["b2b"].append(float(r["truncated_b2b_ms"])); d["plain"].append(float(r["plain_ms"]))
print("| config | B | " + " | ".join(f"{l} ms (b2b)" for l in labels) + " | " + " | ".join(f"{l}/{labels[0]}" for l in labels[1:]) + " | plain ms |")
for k in sorted(data):
    m = {l: (statistics.median(data[k][l]["t"]), statistics.median(data[k][l]["b2b"])) for l in labels if l in data[k]}
    plain = statistics.median(x for l in m for x in data[k][l]["plain"])
    print(f"| {k[0]} | {k[1]} | " + " | ".join(f"{m[l][0]:.4f} ({m[l][1]:.4f})" for l in labels if l in m) + " | " +
          " | ".join(f"{m[l][0]/m[labels[0]][0]:.3f} ({m[l][1]/m[labels[0]][1]:.3f})" for l in labels[1:] if l in m) + f" | {plain:.4f} |")
