#!/usr/bin/env bash
# Session 33, call 2: issue 55's measurement on the final build: the variant sweep (block-staging, portable TMA and
# sm_90a kernels; ms and ms / HBM floor) on Qwen3-8B's and Llama-3-70B's heads at the issue's batch sizes, then the
# main table (--quick: cuBLAS GEMM and the floor beside the default) with the sm_90a module unloaded (the portable
# family chosen).
set -u
cd "$(dirname "$0")"
[ -d gpu-bundle ] || { xz -dc bundle.tar.xz | tar -xf -; }
B=$PWD/gpu-bundle/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd ..
S="--shape 4096,151936 --shape 8192,128256"
timeout 230 $B/bench-lm_head --bench --variants --only block,mma_tma,wgmma $S --batches 1,4,16,64,256 --runs 20 \
  --out $L/variants > $L/variants.log 2>&1; echo "variants rc=$? at $(el)s"
grep -E "^\||HBM floor|occupancy" $L/variants.log
FLASHSAMPLING_PORTABLE=1 timeout 120 $B/bench-lm_head --bench --quick $S --runs 30 --out $L/portable > $L/portable.log 2>&1; echo "portable main rc=$? at $(el)s"
tail -14 $L/portable.log
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
