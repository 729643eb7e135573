#!/usr/bin/env bash
# Session 24, call 4: the final build against c674d84 (base): truncating calls x3 and every
# per-request control x3 (the BENCHMARKS.md tables of issues 12 and 13).
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > $L/machine.txt
step "A/B truncation x3"; FS_BENCH_ARGS="--truncation" OUT=$OUT/abt timeout 260 b/ab.sh 3 base=b/bench-base new=b/bench-new > $L/ab-truncation.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-truncation.log | grep -E "^\|" | head -24; grep "^round" $L/ab-truncation.log | tr '\n' ' '; echo
step "A/B controls x3"; FS_BENCH_ARGS="--controls" OUT=$OUT/abc timeout 300 b/ab.sh 3 base=b/bench-base new=b/bench-new > $L/ab-controls.log 2>&1; echo "rc=$?"; grep "^round" $L/ab-controls.log | tr '\n' ' '; echo
grep -v "^round" $L/ab-controls.log | grep -E "temps\+logprobs|mask" | head -30
step "done"
cd $OUT && tar -czf all.tgz logs abt abc 2>/dev/null; rm -rf logs abt abc; true
