import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hi = next(i for i, r in enumerate(rows) if "Source" in [c.strip() for c in r])
head = [c.strip() for c in rows[hi]]
body = [r for r in rows[hi+1:] if len(r) == len(head)]
ix = {h: i for i, h in enumerate(head)}
def num(x):
    try: return float(x.replace(",", ""))
    except: return 0.0
reasons = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]
# segments: [a, b) instruction index ranges
segs = [(int(a), int(b), n) for a, b, n in (s.split(":") for s in sys.argv[2:])]
for a, b, n in segs:
    tot = {r: sum(num(body[k][ix[r]]) for k in range(a, min(b, len(body)))) for r in reasons}
    s = sum(tot.values()); ex = sum(num(body[k][ix["Instructions Executed"]]) for k in range(a, min(b, len(body))))
    top = sorted(tot.items(), key=lambda kv: -kv[1])[:8]
    print(f"{n}: samples {s:.0f} exec {ex:.0f} :: " + ", ".join(f"{r[6:]} {100*v/s:.1f}%" for r, v in top))
