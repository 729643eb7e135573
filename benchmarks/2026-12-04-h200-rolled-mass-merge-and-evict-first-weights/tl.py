#!/usr/bin/env python3
"""Summarise FS_TL timeline dumps: per block start/end, per consumer piece MMA/epilogue times."""
import struct, sys, statistics as st
PER, BLOCKS = 256, 264
def load(path):
    data = open(path, 'rb').read()
    w = struct.unpack('<%dQ' % (len(data) // 8), data)
    return [w[b * PER:(b + 1) * PER] for b in range(BLOCKS)]
def summ(path):
    blocks = [b for b in load(path) if b[0] != 0]
    t0 = min(b[0] for b in blocks)
    starts = [(b[0] - t0) / 1e3 for b in blocks]
    ends = [(b[250] - t0) / 1e3 for b in blocks if b[250]]
    pend = [(b[2] - t0) / 1e3 for b in blocks if b[2]]
    mma, epi, turn, retr, gap = [], [], [], [], []
    firstp, lastp = [], []
    for b in blocks:
        for c in range(2):
            prev_epi_end = None
            for n in range(20):
                base = 40 + (c * 20 + n) * 5
                s0, s1, s2, s3, r = b[base:base + 5]
                if s0 == 0:
                    break
                mma.append((s2 - s1) / 1e3); epi.append((s3 - s2) / 1e3); turn.append((s1 - s0) / 1e3); retr.append(r)
                if n == 0: firstp.append((s2 - s1) / 1e3)
    cyc = [(b[252] - b[251]) for b in blocks if b[252]]
    q = lambda xs: f"{st.median(xs):7.2f} [{min(xs):7.2f}..{max(xs):7.2f}]" if xs else "-"
    print(f"== {path}: {len(blocks)} blocks")
    print(f"  start spread  {q(starts)} us")
    print(f"  block end     {q(ends)} us   (end spread {max(ends)-min(ends):.2f})")
    print(f"  producer end  {q(pend)} us")
    print(f"  piece mma     {q(mma)} us  (n={len(mma)}; first piece {q(firstp)})")
    print(f"  piece epilogue{q(epi)} us")
    print(f"  turn wait     {q(turn)} us")
    print(f"  full retries  median {st.median(retr) if retr else 0}  mean {st.mean(retr) if retr else 0:.1f}  max {max(retr) if retr else 0}  total {sum(retr)}")
    if cyc: print(f"  clock cycles  median {st.median(cyc):.0f}  -> {st.median(cyc)/ (st.median([e - s for s, e in zip(starts, ends)]) or 1) / 1e3:.3f} GHz")
    return blocks
if __name__ == '__main__':
    for p in sys.argv[1:]:
        summ(p)
