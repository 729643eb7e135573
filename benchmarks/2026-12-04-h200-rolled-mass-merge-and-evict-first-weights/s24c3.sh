#!/usr/bin/env bash
# Session 24, call 3: the final build (roll + evict-first weights for one batch tile) against c674d84
# (base): full cargo bench x2 (the new BENCHMARKS.md table), controls x2; GPU tests and memcheck.
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > $L/machine.txt
step "A/B full x2"; OUT=$OUT/abf timeout 200 b/ab.sh 2 base=b/bench-base new=b/bench-new > $L/ab-full.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-full.log | grep -E "^\|" | head -30
step "A/B controls x2"; FS_BENCH_ARGS="--controls --modes temps+logprobs,mask,top20,adjust" OUT=$OUT/abc timeout 220 b/ab.sh 2 base=b/bench-base new=b/bench-new > $L/ab-controls.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab-controls.log | grep -E "^\|" | grep -v "| plain |" | head -40
for t in gpu gpu_controls gpu_truncation; do
  if [ $(el) -lt 470 ]; then step "tests $t"; timeout $(( 560 - $(el) )) b/test-$t > $L/t-$t.log 2>&1; echo "rc=$?"; grep -E "test result|panicked|FAILED" $L/t-$t.log | tail -4; fi
done
if [ $(el) -lt 530 ]; then step "memcheck controls"; timeout $(( 590 - $(el) )) $SAN --tool memcheck --error-exitcode 9 b/test-gpu_controls > $L/memcheck-controls.log 2>&1; echo "rc=$?"; grep -E "ERROR SUMMARY|test result" $L/memcheck-controls.log; fi
step "done"
cd $OUT && tar -czf all.tgz logs abf abc 2>/dev/null; rm -rf logs abf abc; true
