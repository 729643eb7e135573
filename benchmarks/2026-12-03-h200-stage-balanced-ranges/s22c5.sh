#!/usr/bin/env bash
# Session 22, call 5: the truncation kernels back on whole tiles (no handoff code in their consumers): tests, and
# the same-call A/B against base f75f041 of the truncating calls, the plain table at B <= 32 and log-probs.
set -u
cd "$(dirname "$0")"
xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
step "tests"; timeout 90 b/test-gpu > $L/t-gpu.log 2>&1; echo "rc=$?"; grep -E "stage-balanced.*V=128256|test result|panicked" $L/t-gpu.log | tail -6
timeout 30 b/test-gpu_truncation > $L/t-gpu_truncation.log 2>&1; echo "rc=$?"; grep -E "test result|panicked" $L/t-gpu_truncation.log
step "A/B truncation x3"; FS_BENCH_ARGS="--truncation --batches 16,32,33,64" OUT=$OUT/abt timeout 170 b/ab.sh 3 base=b/bench-base new=b/bench-new > $L/ab-trunc.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-trunc.log
if [ $(el) -lt 230 ]; then step "A/B plain x2"; FS_BENCH_ARGS="--batches 1,8,32" OUT=$OUT/abp timeout 90 b/ab.sh 2 base=b/bench-base new=b/bench-new > $L/ab-plain.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-plain.log; fi
step "done"
cd $OUT && tar -czf all.tgz logs abt abp 2>/dev/null; rm -rf logs abt abp
