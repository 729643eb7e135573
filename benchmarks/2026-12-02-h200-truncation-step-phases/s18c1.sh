#!/usr/bin/env bash
# Session 18, call 1 (one H200): the truncation step's phases by %clock64 (diagnostic build, block 0 thread 0).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cd .gl; rm -rf x; xz -dc s18a.tar.xz | tar -xf -
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem --format=csv > $OUT/clocks.txt
./x/stamp-bench --truncation --batches 1,16,64 --runs 10 --out /tmp/t1 > $OUT/trunc.log 2>&1
FLASHSAMPLING_TRUNCATE_STEP=paired ./x/stamp-bench --truncation --batches 1 --runs 10 --out /tmp/t2 > $OUT/trunc-paired.log 2>&1
nvidia-smi --query-gpu=clocks.sm --format=csv >> $OUT/clocks.txt
grep -E "STAMPS|^\| " $OUT/trunc.log $OUT/trunc-paired.log
