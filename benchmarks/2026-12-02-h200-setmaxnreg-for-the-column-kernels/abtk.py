#!/usr/bin/env python3
"""Same-call A/B of truncation benches: DIR/tk-LABEL-rN/truncation.csv -> median over rounds per (config, B)."""
import csv, glob, statistics, sys
d, labels = sys.argv[1], sys.argv[2:]
data = {}
for l in labels:
    for f in sorted(glob.glob(f"{d}/tk-{l}-r*/truncation.csv")):
        for row in csv.DictReader(open(f)):
            k = (row["config"], int(row["b"]))
            data.setdefault(k, {}).setdefault(l, []).append(row)
med = lambda rows, c: statistics.median(float(r[c]) for r in rows)
print("| config | B | " + " | ".join(f"{l} ms (b2b)" for l in labels) + " | " + " | ".join(f"{l}/{labels[0]}" for l in labels[1:]) + " | plain ms | unfused ms | fallback | equal |")
for k in sorted(data):
    m = data[k]
    if any(l not in m for l in labels):
        continue
    t = {l: (med(m[l], "truncated_ms"), med(m[l], "truncated_b2b_ms")) for l in labels}
    cells = [f"{t[l][0]:.4f} ({t[l][1]:.4f})" for l in labels]
    rat = [f"{t[l][0]/t[labels[0]][0]:.3f} ({t[l][1]/t[labels[0]][1]:.3f})" for l in labels[1:]]
    last = m[labels[-1]]
    print(f"| {k[0]} | {k[1]} | " + " | ".join(cells) + " | " + " | ".join(rat) +
          f" | {med(last,'plain_ms'):.4f} | {med(last,'unfused_ms'):.4f} | {max(float(r['fallback_share']) for r in last):.4f} | {min(float(r['equal_share']) for r in last):.4f} |")
