#!/usr/bin/env python3
"""Stall samples of an ncu SASS source CSV, by barrier-delimited segment (BAR.SYNC / BAR.RED splits)."""
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hi = next(i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r))
head = [c.strip() for c in rows[hi]]
src = head.index("Source")
samp = next(i for i, c in enumerate(head) if c.startswith("Warp Stall Sampling (All"))
exe = next((i for i, c in enumerate(head) if c.startswith("Instructions Executed")), None)
body = [r for r in rows[hi + 1:] if len(r) > max(src, samp)]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
total = sum(num(r[samp]) for r in body)
segs, cur = [], []
for k, r in enumerate(body):
    cur.append((k, r))
    if "BAR." in r[src] or "EXIT" in r[src]:
        segs.append(cur); cur = []
if cur: segs.append(cur)
print(f"total samples {total:.0f} instrs {len(body)}")
for s in segs:
    n = sum(num(r[samp]) for _, r in s)
    if n < 0.02 * total: continue
    ex = sum(num(r[exe]) for _, r in s) if exe is not None else 0
    print(f"seg start {s[0][0]} len {len(s)} samples {n:.0f} ({100*n/total:.1f}%) exec {ex:.0f} ends '{s[-1][1][src].strip()[:40]}'")
    for k, r in sorted(s, key=lambda kr: -num(kr[1][samp]))[:6]:
        print(f"   {num(r[samp]):5.0f} {k:5d} {r[src].strip()[:70]}")
