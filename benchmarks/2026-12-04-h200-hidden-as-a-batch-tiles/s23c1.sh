#!/usr/bin/env bash
# Session 23, call 1: the weight-as-A N = 128 variant (tma_n128) against the chosen kernels at B >= 65
# (plain sweep, forced log-probs and truncation), the same-call A/B of base 1654bb7 against the new build
# (N = 128 not chosen; the whole-piece and top_k_on patches applied), then the GPU regression tests.
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
printf '#!/bin/sh\nFLASHSAMPLING_FUSED_VARIANT=fused_sample_wgmma_tma_n128 exec "$(dirname "$0")/bench-new" "$@"\n' > b/n128.sh; chmod +x b/n128.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > $L/machine.txt
step "variants"; timeout 150 b/bench-new --bench --variants --batches 65,96,128,192,256,512 --only tma_n64,tma_n128,tmat_n64 --out $OUT/var > $L/variants.log 2>&1; echo "rc=$?"; grep -E "^\|" $L/variants.log
step "lp forced n128"; FS_BENCH_ARGS="--controls --modes temps+logprobs --batches 128,256" OUT=$OUT/abl timeout 80 b/ab.sh 1 new=b/bench-new n128=b/n128.sh > $L/ab-lp.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-lp.log | grep -E "^\||A/B"
step "A/B full x2"; FS_BENCH_ARGS="" OUT=$OUT/abf timeout 150 b/ab.sh 2 base=b/bench-base new=b/bench-new > $L/ab-full.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-full.log | grep -E "^\||A/B"
step "A/B trunc x2"; FS_BENCH_ARGS="--truncation --batches 1,16,33,64,128" OUT=$OUT/abt timeout 100 b/ab.sh 2 base=b/bench-base new=b/bench-new > $L/ab-trunc.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-trunc.log | grep -E "^\||A/B"
for t in gpu gpu_truncation gpu_controls; do
  if [ $(el) -lt 500 ]; then step "tests $t"; timeout $(( 585 - $(el) )) b/test-$t > $L/t-$t.log 2>&1; echo "rc=$?"; grep -E "test result|panicked|FAILED" $L/t-$t.log | tail -4; fi
done
step "done"
cd $OUT && tar -czf all.tgz logs var abl abf abt 2>/dev/null; rm -rf logs var abl abf abt
