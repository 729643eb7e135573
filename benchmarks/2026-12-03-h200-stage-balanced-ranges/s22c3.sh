#!/usr/bin/env bash
# Session 22, call 3: the full table (every B, both configurations), base f75f041 against the new build, 2 rounds;
# then the hidden-as-A kernels' log-probability and truncation calls at B = 64-512 (their consumer loop changed too).
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
step "A/B full x3"; OUT=$OUT/abf timeout 400 b/ab.sh 3 base=b/bench-base new=b/bench-new > $L/ab-full.log 2>&1; echo "rc=$?"
grep -v "^round" $L/ab-full.log; grep "^round" $L/ab-full.log | tr '\n' ' '; echo
if [ $(el) -lt 470 ]; then step "A/B lp+trunc large B"; FS_BENCH_ARGS="--controls --modes temps+logprobs --batches 64,128,256" OUT=$OUT/abl timeout $(( 560 - $(el) )) b/ab.sh 1 base=b/bench-base new=b/bench-new > $L/ab-lp.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-lp.log; fi
if [ $(el) -lt 500 ]; then step "A/B truncation"; FS_BENCH_ARGS="--truncation --batches 1,16,64,256" OUT=$OUT/abt timeout $(( 580 - $(el) )) b/ab.sh 1 base=b/bench-base new=b/bench-new > $L/ab-trunc.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-trunc.log; fi
step "done"
cp $OUT/abf/ab/new-r3/results.csv $L/full-new-r3.csv 2>/dev/null; cp $OUT/abf/ab/new-r3.log $L/full-new-r3.log 2>/dev/null
cd $OUT && tar -czf all.tgz logs abf abl abt 2>/dev/null; rm -rf logs abf abl abt
