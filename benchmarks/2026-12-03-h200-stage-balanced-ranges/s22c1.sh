#!/usr/bin/env bash
# Session 22, call 1: stage-balanced ranges (issue 15.1): the new exactness test, same-call A/B, sanitizers.
set -u
cd "$(dirname "$0")"
xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/gpu.txt
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
step "new test"; timeout 150 b/test-gpu stage_balanced --nocapture > $L/t-balanced.log 2>&1; echo "rc=$?"; grep -E "stage-balanced|test result|panicked|FAIL" $L/t-balanced.log | tail -30
printf '#!/bin/sh\nFLASHSAMPLING_BALANCE_STAGES=0 exec "$(dirname "$0")/bench-new" "$@"\n' > b/whole.sh; chmod +x b/whole.sh
step "A/B plain"; FS_BENCH_ARGS="--batches 1,8,16,32" OUT=$OUT/abp timeout 300 b/ab.sh 2 base=b/bench-base new=b/bench-new whole=b/whole.sh > $L/ab-plain.log 2>&1; echo "rc=$?"
grep -v "^round" $L/ab-plain.log; grep "^round" $L/ab-plain.log | tr '\n' ' '; echo
if [ $(el) -lt 420 ]; then step "memcheck"; FLASHSAMPLING_GPU_TEST_QUICK=1 timeout 120 $SAN --tool memcheck --error-exitcode 9 b/test-gpu stage_balanced > $L/memcheck.log 2>&1; echo "rc=$?"; grep -E "ERROR SUMMARY|test result" $L/memcheck.log; fi
if [ $(el) -lt 450 ]; then
  step "truncation Llama"; for arm in base new whole; do exe=b/bench-$arm; [ $arm = whole ] && exe=b/whole.sh
    timeout 45 $exe --bench --truncation --shape 8192,128256 --batches 1,16,32 --out $OUT/tr-$arm > $L/tr-$arm.log 2>&1; echo "$arm rc=$?"
    grep -E "^\|" $L/tr-$arm.log | tail -4; done
fi
if [ $(el) -lt 520 ]; then step "racecheck"; FLASHSAMPLING_GPU_TEST_QUICK=1 timeout 60 $SAN --tool racecheck --error-exitcode 9 b/test-gpu stage_balanced > $L/racecheck.log 2>&1; echo "rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|test result" $L/racecheck.log; fi
step "done"
cd $OUT && tar -czf all.tgz logs abp tr-* 2>/dev/null; rm -rf logs abp tr-*
