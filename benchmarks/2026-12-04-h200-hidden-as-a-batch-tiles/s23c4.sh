#!/usr/bin/env bash
# Session 23, call 4: tmat_n64 against tmat_n64x2 at B = 65–256 over other LM-head shapes (D 2048–16384), for the
# D dependence of the 80–128-row choice (Qwen3-8B prefers tmat_n64 there, Llama-3-70B tmat_n64x2).
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > $L/machine.txt
timeout 60 b/bench-new --bench --variants --batches 96 --only tmat --shape 4096,151936 --out $OUT/warm > /dev/null 2>&1
for s in 2048,128256 3072,128256 4096,128256 5120,152064 6144,128256 8192,152064 12288,32768 16384,128256 4096,151936 8192,128256; do
  if [ $(el) -lt 520 ]; then step "shape $s"; timeout 120 b/bench-new --bench --variants --batches 65,80,96,112,128,160,192,256 --only tmat --shape $s --out $OUT/v-${s/,/-} > $L/v-${s/,/-}.log 2>&1; echo "rc=$?"; grep -E "^\| d" $L/v-${s/,/-}.log; fi
done
step "done"
cd $OUT && cat v-*/variants.csv > variants-all.csv; tar -czf all.tgz logs variants-all.csv 2>/dev/null; rm -rf logs v-* warm
