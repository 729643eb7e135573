#!/usr/bin/env bash
# Session 23, call 2: deeper rings for the weight-as-A N = 16 / 32 plain kernels (12 / 11 stages instead of
# 10) against base 1654bb7 (same call), the top_k_on twin on the truncating calls, then a repeated sweep of the
# two hidden-as-A kernels at B = 65–512 (plain; forced, log-probs, mask and truncation too) for the batch-tile
# rule, then the GPU tests and sanitizers.
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
for v in tmat_n64 tmat_n64x2; do printf '#!/bin/sh\nFLASHSAMPLING_FUSED_VARIANT=fused_sample_wgmma_%s exec "$(dirname "$0")/bench-new" "$@"\n' $v > b/$v.sh; chmod +x b/$v.sh; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > $L/machine.txt
step "A/B plain x3"; FS_BENCH_ARGS="--batches 1,2,4,8,16,32,64" OUT=$OUT/abp timeout 170 b/ab.sh 3 base=b/bench-base new=b/bench-new > $L/ab-plain.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-plain.log | grep -E "^\||A/B"
step "sweep x2"; for r in 1 2; do timeout 80 b/bench-new --bench --variants --batches 65,80,96,112,128,160,192,224,256,384,512 --only tmat --out $OUT/var$r > $L/variants$r.log 2>&1; echo "rc=$?"; grep -E "^\|" $L/variants$r.log; done
step "A/B trunc x2"; FS_BENCH_ARGS="--truncation --batches 1,16,33,64" OUT=$OUT/abt timeout 100 b/ab.sh 2 base=b/bench-base new=b/bench-new > $L/ab-trunc.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-trunc.log | grep -E "^\||A/B"
step "forced controls"; FS_BENCH_ARGS="--controls --modes temps+logprobs,mask --batches 65,96,128,192,256" OUT=$OUT/abc timeout 100 b/ab.sh 1 n64=b/tmat_n64.sh x2=b/tmat_n64x2.sh > $L/ab-ctl.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-ctl.log | grep -E "^\||A/B"
step "forced trunc"; FS_BENCH_ARGS="--truncation --batches 65,128,192,256" OUT=$OUT/abtf timeout 80 b/ab.sh 1 n64=b/tmat_n64.sh x2=b/tmat_n64x2.sh > $L/ab-truncf.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-truncf.log | grep -E "^\||A/B"
for t in gpu gpu_truncation gpu_controls; do
  if [ $(el) -lt 470 ]; then step "tests $t"; timeout $(( 560 - $(el) )) b/test-$t > $L/t-$t.log 2>&1; echo "rc=$?"; grep -E "test result|panicked|FAILED" $L/t-$t.log | tail -4; fi
done
if [ $(el) -lt 520 ]; then step "memcheck"; FLASHSAMPLING_GPU_TEST_QUICK=1 timeout $(( 585 - $(el) )) $SAN --tool memcheck --error-exitcode 9 b/test-gpu every_fused_variant > $L/memcheck.log 2>&1; echo "rc=$?"; grep -E "ERROR SUMMARY|test result" $L/memcheck.log; fi
step "done"
cd $OUT && tar -czf all.tgz logs var1 var2 abp abt abc abtf 2>/dev/null; rm -rf logs var1 var2 abp abt abc abtf
