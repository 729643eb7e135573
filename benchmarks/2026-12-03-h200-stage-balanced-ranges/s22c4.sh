#!/usr/bin/env bash
# Session 22, call 4: the single-round outliers of call 3, 3 rounds: truncating calls at B = 16, 33, 64 (tma_n64_tk
# at 33-64, more spills in the new build) and temps+log-probs at B = 128, 256 (hidden-as-A), base / new / whole.
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
printf '#!/bin/sh\nFLASHSAMPLING_BALANCE_STAGES=0 exec "$(dirname "$0")/bench-new" "$@"\n' > b/whole.sh; chmod +x b/whole.sh
step "A/B truncation x3"; FS_BENCH_ARGS="--truncation --batches 16,33,64" OUT=$OUT/abt timeout 300 b/ab.sh 3 base=b/bench-base new=b/bench-new whole=b/whole.sh > $L/ab-trunc.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-trunc.log; grep "^round" $L/ab-trunc.log | tr '\n' ' '; echo
if [ $(el) -lt 380 ]; then step "A/B lp x3"; FS_BENCH_ARGS="--controls --modes temps+logprobs --batches 128,256" OUT=$OUT/abl timeout $(( 560 - $(el) )) b/ab.sh 3 base=b/bench-base new=b/bench-new > $L/ab-lp.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-lp.log; fi
step "done"
cd $OUT && tar -czf all.tgz logs abt abl 2>/dev/null; rm -rf logs abt abl
