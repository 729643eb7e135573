import csv,sys,collections,re
rows=list(csv.reader(open(sys.argv[1],errors="replace")))
hi=next(i for i,r in enumerate(rows) if any("Source"==c.strip() for c in r))
head=[c.strip() for c in rows[hi]]
src=head.index("Source"); exe=next(i for i,c in enumerate(head) if c.startswith("Instructions Executed"))
samp=next(i for i,c in enumerate(head) if c.startswith("Warp Stall Sampling (All"))
body=[r for r in rows[hi+1:] if len(r)>max(src,exe)]
def num(x):
    try: return float(x.replace(",",""))
    except: return 0.0
lo,hi2=int(sys.argv[2]),int(sys.argv[3])
c=collections.Counter(); sm=collections.Counter()
for r in body[lo:hi2]:
    t=r[src].strip()
    t=re.sub(r'^@!?U?P\w+\s+','',t)
    op=t.split()[0] if t else '?'
    op=op.split('.')[0]
    c[op]+=num(r[exe]); sm[op]+=num(r[samp])
tot=sum(c.values())
for op,n in c.most_common(18): print(f"{op:10s} {n/1e6:7.2f}M {100*n/tot:5.1f}%  samples {sm[op]:.0f}")
print("total",tot/1e6)
