import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hi = next(i for i, r in enumerate(rows) if "Source" in [c.strip() for c in r])
head=[c.strip() for c in rows[hi]]; col={c:i for i,c in enumerate(head)}
body=[r for r in rows[hi+1:] if len(r) > 10]
st=[h for h in head if h.startswith('stall_') and 'Not Issued' not in h]
def num(r,c):
    try: return float(r[col[c]].replace(",",""))
    except: return 0.0
segs=[];cur=[]
for k,r in enumerate(body):
    cur.append((k,r))
    if "BAR." in r[col["Source"]] or "EXIT" in r[col["Source"]]: segs.append(cur); cur=[]
segs.append(cur)
tot=sum(num(r,"Warp Stall Sampling (All Samples)") for r in body)
print("total", tot)
for s in segs:
    n=sum(num(r,"Warp Stall Sampling (All Samples)") for _,r in s)
    if n < 0.01*tot: continue
    reasons=collections.Counter()
    for _,r in s:
        for h in st: reasons[h]+=num(r,h)
    ex=sum(num(r,"Instructions Executed") for _,r in s)
    thr=sum(num(r,"Thread Instructions Executed") for _,r in s)
    print(f"{s[0][0]:5d}-{s[-1][0]:5d} samples {n:5.0f} ({100*n/tot:4.1f}%) exec {ex:6.0f} thr/ins {thr/max(ex,1):4.1f}  " + ", ".join(f"{k[6:]} {v:.0f}" for k,v in reasons.most_common(3)))
