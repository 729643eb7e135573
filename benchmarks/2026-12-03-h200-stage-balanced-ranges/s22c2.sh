#!/usr/bin/env bash
# Session 22, call 2: stage-balanced ranges: a longer same-call A/B (base f75f041, new, new with whole tiles),
# log-probabilities, the forced tma_n64 at B = 48/64, then the GPU regression tests.
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
printf '#!/bin/sh\nFLASHSAMPLING_BALANCE_STAGES=0 exec "$(dirname "$0")/bench-new" "$@"\n' > b/whole.sh; chmod +x b/whole.sh
step "A/B plain x4"; FS_BENCH_ARGS="--batches 1,2,4,8,16,32" OUT=$OUT/abp timeout 260 b/ab.sh 4 base=b/bench-base new=b/bench-new whole=b/whole.sh > $L/ab-plain.log 2>&1; echo "rc=$?"
grep -v "^round" $L/ab-plain.log; grep "^round" $L/ab-plain.log | tr '\n' ' '; echo
step "A/B lp x2"; FS_BENCH_ARGS="--controls --modes temps+logprobs --shape 8192,128256 --batches 1,8,16" OUT=$OUT/abl timeout 100 b/ab.sh 2 base=b/bench-base new=b/bench-new whole=b/whole.sh > $L/ab-lp.log 2>&1; echo "rc=$?"
grep -v "^round" $L/ab-lp.log
step "variants"; timeout 40 b/bench-new --bench --variants --shape 8192,128256 --batches 48,64 --only tma_n64,tmat_n64 --out $OUT/var > $L/variants.log 2>&1; echo "rc=$?"; grep -E "^\|" $L/variants.log | tail -6
for t in gpu gpu_truncation gpu_controls; do
  if [ $(el) -lt 520 ]; then step "tests $t"; timeout $(( 580 - $(el) )) b/test-$t > $L/t-$t.log 2>&1; echo "rc=$?"; grep -E "test result|panicked|FAILED" $L/t-$t.log | tail -4; fi
done
step "done"
cd $OUT && tar -czf all.tgz logs abp abl var 2>/dev/null; rm -rf logs abp abl var
