#!/usr/bin/env bash
# Issue 55, call 1: the mma.sync ceiling. The probe kernels of gen.py (pure MMAs; MMAs fed by ldmatrix at the
# portable consumers' warp tiles) and cuBLAS's GEMM at Qwen3-8B's and Llama-3-70B's heads through PyTorch.
set -u
cd "$(dirname "$0")"
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
timeout 240 python3 run.py 2>&1 | tee $L/probe.txt
timeout 120 python3 - <<'PY' 2>&1 | tee $L/gemm.txt
import torch, statistics
for d, v in ((4096, 151936), (8192, 128256)):
    w = torch.randn(v, d, device="cuda", dtype=torch.bfloat16)
    for b in (64, 256):
        h = torch.randn(b, d, device="cuda", dtype=torch.bfloat16)
        for _ in range(3): y = h @ w.T
        ts = []
        for _ in range(20):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); y = h @ w.T; e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
        t = statistics.median(ts)
        print(f"cuBLAS GEMM D={d} V={v} B={b}: {t:.4f} ms, {2*b*d*v/t/1e9:.1f} TFLOP/s")
PY
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
