#!/usr/bin/env bash
# Session 24, call 1: timeline stamps (diagnostic build) of the plain and log-probability kernels at
# B = 1 / 16 / 32 on both configurations; then the full cargo bench of main (c674d84) for BENCHMARKS.md.
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L $OUT/tl
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > $L/machine.txt
step "timeline (diag build)"
FS_TL_DIR=$OUT/tl timeout 200 b/bench-tl --bench --controls --modes logprobs,temps+logprobs --batches 1,16,32 --out $OUT/tl/run > $L/tl.log 2>&1; echo "rc=$?"; grep "^|" $L/tl.log | head -12
python3 tl.py $OUT/tl/*.tl > $L/tl-summary.txt 2>&1; head -60 $L/tl-summary.txt
step "full bench main"
timeout 330 b/bench-main --bench --out $OUT/full > $L/full.log 2>&1; echo "rc=$?"; grep "^|" $L/full.log | head -40
step "done"
cd $OUT && tar -czf all.tgz logs tl full 2>/dev/null; rm -rf logs full; rm -f tl/*.tl 2>/dev/null; true
