#!/usr/bin/env bash
# Session 32, call B: issue 55's measurement, one call: the variant sweep (block-staging, portable TMA and sm_90a
# kernels; ms and ms / HBM floor) on Qwen3-8B's and Llama-3-70B's heads, the main table (--quick: cuBLAS GEMM and
# the floor beside the default), the same with the sm_90a module unloaded, then session 31's verify bench.
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
timeout 240 $B/bench-lm_head --bench --variants --only block,mma_tma,wgmma $S --batches 1,4,16,32,64,128,256 --runs 30 \
  --out $L/variants > $L/variants.log 2>&1; echo "variants rc=$? at $(el)s"
grep -E "^\||HBM floor|occupancy" $L/variants.log
timeout 120 $B/bench-lm_head --bench --quick $S --runs 30 --out $L/main > $L/main.log 2>&1; echo "main rc=$? at $(el)s"
tail -14 $L/main.log
FLASHSAMPLING_PORTABLE=1 timeout 90 $B/bench-lm_head --bench --quick $S --runs 30 --out $L/portable > $L/portable.log 2>&1; echo "portable main rc=$? at $(el)s"
tail -14 $L/portable.log
[ $(el) -lt 460 ] && { timeout $(( 560 - $(el) )) $B/bench-lm_head --bench --verify --shape 4096,151936 --batches 1,8,32,64 --runs 30 \
  --out $L/verify > $L/verify.log 2>&1; echo "verify rc=$? at $(el)s"; tail -30 $L/verify.log; }
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
