#!/usr/bin/env bash
# Session 24, call 2: the rolled mass merge (roll) and roll + evict-first weights (hint) against
# c674d84 (base): the timeline of roll (diag build), A/B of controls, truncation and plain; GPU tests
# of the hint build.
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L $OUT/tl
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > $L/machine.txt
step "timeline roll"
FS_TL_DIR=$OUT/tl timeout 120 b/bench-tl-roll --bench --controls --modes logprobs --batches 1,16,32,64 --out $OUT/tl/run > $L/tl.log 2>&1; echo "rc=$?"
python3 tl2.py $OUT/tl/*.tl > $L/tl-summary.txt 2>&1; cat $L/tl-summary.txt
step "A/B controls x2"; FS_BENCH_ARGS="--controls --modes temps+logprobs,mask --batches 1,16,32,64,128" OUT=$OUT/abc timeout 200 b/ab.sh 2 base=b/bench-base roll=b/bench-roll hint=b/bench-hint > $L/ab-controls.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-controls.log | grep -E "^\||A/B|x plain" | head -40
step "A/B truncation x2"; FS_BENCH_ARGS="--truncation --batches 1,16,33,64,256" OUT=$OUT/abt timeout 200 b/ab.sh 2 base=b/bench-base roll=b/bench-roll hint=b/bench-hint > $L/ab-trunc.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-trunc.log | grep -E "^\|" | head -30
step "A/B plain x2"; FS_BENCH_ARGS="--batches 1,16,32,64,128,256,512" OUT=$OUT/abp timeout 200 b/ab.sh 2 base=b/bench-base hint=b/bench-hint > $L/ab-plain.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-plain.log | grep -E "^\|" | head -30
for t in gpu gpu_controls gpu_truncation; do
  if [ $(el) -lt 500 ]; then step "tests $t"; timeout $(( 580 - $(el) )) b/test-$t > $L/t-$t.log 2>&1; echo "rc=$?"; grep -E "test result|panicked|FAILED" $L/t-$t.log | tail -4; fi
done
step "done"
cd $OUT && tar -czf all.tgz logs tl abc abt abp 2>/dev/null; rm -rf logs abc abt abp tl; true
