#!/usr/bin/env bash
# Session 23, call 6: the kernels of B = 17-64 over ten LM-head shapes (plain sweep, final build), to check the
# largest-vocab-range rule there across shapes (issue 15.3).
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
timeout 60 b/bench-new --bench --variants --batches 32 --only tma_n32 --shape 4096,151936 --out $OUT/warm > /dev/null 2>&1
for s in 2048,128256 3072,128256 4096,128256 5120,152064 6144,128256 8192,152064 12288,32768 16384,128256 4096,151936 8192,128256; do
  if [ $(el) -lt 240 ]; then step "shape $s"; timeout 60 b/bench-new --bench --variants --batches 17,24,32,33,48,64 --only tma_n32,tma_n64,tmat_n64 --shape $s --out $OUT/v-${s/,/-} > $L/v-${s/,/-}.log 2>&1; echo "rc=$?"; grep -E "^\| d" $L/v-${s/,/-}.log; fi
done
step "done"
cd $OUT && cat v-*/variants.csv > variants-17-64.csv; tar -czf all.tgz logs 2>/dev/null; rm -rf logs v-* warm
