# Column kernels' draw loop: iterations per (warp, tile, column index) with and without an 8-lane floor.
# Model: tma_n64 at Qwen3-8B B = 64: each consumer takes every other tile of its block's range (~4.5 tiles);
# a warp's column index i covers 4 batch rows (q) x 8 lane groups (g), each lane 4 consecutive vocab rows per tile.
# Logits ~ N(0, 2^2) (the bench's synthetic head), T = 1, Gumbel noise; an entry is drawn when its score bound
# (score + slack) reaches max(lane candidate, floor); the warp runs max over its 32 lanes of drawn entries.
import numpy as np
rng = np.random.default_rng(1)
def sim(tiles_list, floor, slack=2**-8, trials=20000):
    iters = []; 
    for T in tiles_list:
        y = rng.normal(0, 2, size=(trials, T, 4, 8, 4))          # trial, tile, q, g, entry
        g = -np.log(-np.log(rng.uniform(size=y.shape)))
        s = y + g
        cand = np.full((trials, 4, 8), -np.inf)
        for t in range(T):
            fl = cand.max(axis=2, keepdims=True) if floor else np.full_like(cand, -np.inf)
            lim = np.maximum(cand, fl)
            drawn = (s[:, t] + slack >= lim[..., None]).sum(axis=-1)   # per lane
            iters.append(drawn.reshape(trials, -1).max(axis=1))
            cand = np.maximum(cand, np.where(s[:, t] + slack >= lim[..., None], s[:, t], -np.inf).max(axis=-1))
    return np.mean(np.concatenate(iters))
tiles = [4, 5]   # 1187 tiles over 132 blocks, two consumers taking turns
a, b = sim(tiles, False), sim(tiles, True)
print(f"draw-loop iterations per group and warp: own candidate {a:.2f}, 8-lane floor {b:.2f} ({b/a:.2f}x)")
