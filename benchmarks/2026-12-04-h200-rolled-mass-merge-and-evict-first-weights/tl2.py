#!/usr/bin/env python3
import struct, statistics as st, sys
PER=256
def load(p):
    d=open(p,'rb').read(); w=struct.unpack('<%dQ'%(len(d)//8),d)
    return [w[b*PER:(b+1)*PER] for b in range(264)]
for f in sys.argv[1:]:
    B=[b for b in load(f) if b[0] and b[250]]
    if not B: print(f, "no blocks"); continue
    t0=min(b[0] for b in B)
    ends=[(b[250]-t0)/1e3 for b in B]; post=[]; mid=[]
    for b in B:
        ps=[]
        for c in range(2):
            for n in range(20):
                s=b[40+(c*20+n)*5:45+(c*20+n)*5]
                if s[0]==0: break
                ps.append((s[1],s[2],s[3]))
        if not ps: continue
        ps.sort()
        post.append((b[250]-max(p[2] for p in ps))/1e3)
        mid += [(p[1]-p[0])/1e3 for p in ps[1:-1]]
    q=lambda x: f"{st.median(x):7.2f} (max {max(x):7.2f})" if x else "-"
    print(f"{f.split('/')[-1][:-3]:32s} blocks {len(B):3d} end {q(ends)} | mid tile {q(mid)} | after last epilogue -> end {q(post)}")
