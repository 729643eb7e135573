#!/usr/bin/env bash
# Session 23, call 3: the hidden-as-A batch-tile rule (tmat_n64 where it pads fewer rows or its second tile is
# at least a quarter full, else tmat_n64x2) against base 1654bb7 at the batch sizes it changes, a finer sweep of
# the two kernels around its boundaries, then the GPU tests.
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > $L/machine.txt
step "A/B plain x2"; FS_BENCH_ARGS="--batches 64,65,72,80,128,129,160,192,256,288,320,576" OUT=$OUT/abp timeout 200 b/ab.sh 2 base=b/bench-base new=b/bench-new > $L/ab-plain.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-plain.log | grep -E "^\||A/B"
step "sweep"; timeout 90 b/bench-new --bench --variants --batches 65,68,72,76,80,129,136,144,160,176,192,257,288,320,513,576 --only tmat --out $OUT/var > $L/variants.log 2>&1; echo "rc=$?"; grep -E "^\|" $L/variants.log
step "A/B controls"; FS_BENCH_ARGS="--controls --modes temps+logprobs,mask --batches 65,160,192" OUT=$OUT/abc timeout 90 b/ab.sh 1 base=b/bench-base new=b/bench-new > $L/ab-ctl.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-ctl.log | grep -E "^\||A/B"
step "A/B trunc"; FS_BENCH_ARGS="--truncation --batches 65,160,192" OUT=$OUT/abt timeout 80 b/ab.sh 1 base=b/bench-base new=b/bench-new > $L/ab-trunc.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-trunc.log | grep -E "^\||A/B"
for t in gpu gpu_truncation gpu_controls; do
  if [ $(el) -lt 480 ]; then step "tests $t"; timeout $(( 575 - $(el) )) b/test-$t > $L/t-$t.log 2>&1; echo "rc=$?"; grep -E "test result|panicked|FAILED" $L/t-$t.log | tail -4; fi
done
step "done"
cd $OUT && tar -czf all.tgz logs var abp abc abt 2>/dev/null; rm -rf logs var abp abc abt
