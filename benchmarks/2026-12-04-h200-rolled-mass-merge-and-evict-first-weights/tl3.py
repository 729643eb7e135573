#!/usr/bin/env python3
"""Summarise the light timeline (timeline-light.patch) of the hidden-as-A kernels: per block the producer's end,
each consumer's return from `consume` (its last epilogue done), its block-merge step 1 (`put_rows`) and `finish`,
and the block's end (thread 0, after the producer warpgroup's `finish`); medians over the blocks, µs from the
first block's start."""
import statistics as st, struct, sys
PER = 256
def load(p):
    d = open(p, 'rb').read(); w = struct.unpack('<%dQ' % (len(d) // 8), d)
    return [w[b * PER:(b + 1) * PER] for b in range(264)]
for f in sys.argv[1:]:
    B = [b for b in load(f) if b[0] and b[250]]
    if not B:
        print(f, "no blocks"); continue
    t0 = min(b[0] for b in B)
    us = lambda x: (x - t0) / 1e3
    last = [max(b[240], b[241]) for b in B]
    q = lambda xs: f"{st.median(xs):7.2f} (max {max(xs):7.2f})"
    print(f"{f.split('/')[-1][:-3]:32s} blocks {len(B)} | producer end {q([us(b[2]) for b in B])} | block end {q([us(b[250]) for b in B])}")
    print(f"{'':32s} last epilogue -> put done {q([(max(b[244], b[245]) - l) / 1e3 for b, l in zip(B, last)])}"
          f" -> finish done {q([(max(b[246], b[247]) - max(b[244], b[245])) / 1e3 for b in B])}"
          f" | last epilogue after producer end {q([(l - b[2]) / 1e3 for b, l in zip(B, last)])}")
