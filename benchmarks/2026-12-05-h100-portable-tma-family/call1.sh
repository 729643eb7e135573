#!/usr/bin/env bash
# Session 32, call A: the portable TMA family (issue 55) and the session-31 leftovers on a GPU. Every GPU suite
# (they run every loaded variant: the new family included), then the same suites with the sm_90a module unloaded
# (FLASHSAMPLING_PORTABLE=1: the block-staging and portable TMA families only), memcheck + racecheck of the TMA
# kernels' device-API and stage-balance tests, memcheck of session 31's scoring / rejection tests, pytest.
set -u
cd "$(dirname "$0")"
rm -rf gpu-bundle; xz -dc bundle.tar.xz | tar -xf -
B=$PWD/gpu-bundle/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-560} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-560} ] && to=$(( ${BUDGET:-560} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  local san=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/$label.log | tail -1)
  sum+=("$(printf '%-24s rc=%-3d %4ss %s %s' $label $rc $(( $(date +%s) - s )) "$res" "$san")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:" $L/$label.log | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd .. # repository root: tests read it
run sample 60 $B/sample --batch 1
for n in gpu gpu_controls gpu_truncation gpu_score gpu_f16 gpu_graphs speculative tp; do
  run $n 170 $B/test-$n --test-threads=1
done
grep -hE "^variant |^stage-balanced|mma_tma" $L/gpu.log | head -40
for n in gpu gpu_controls gpu_truncation gpu_score; do
  run portable-$n 120 env FLASHSAMPLING_PORTABLE=1 $B/test-$n --test-threads=1
done
run memcheck-tma 120 env FLASHSAMPLING_GPU_TEST_QUICK=1 $SAN --tool memcheck $B/test-gpu --test-threads=1 tma_kernels_follow stage_balanced
run racecheck-tma 120 env FLASHSAMPLING_GPU_TEST_QUICK=1 $SAN --tool racecheck $B/test-gpu --test-threads=1 tma_kernels_follow
run memcheck-score 90 $SAN --tool memcheck $B/test-gpu_score --test-threads=1 bad_input
run memcheck-rejection 90 $SAN --tool memcheck $B/test-speculative --test-threads=1 rejection
python3 -m pip install --quiet --no-index --no-deps --target /tmp/site gpurun/flashsampling-*.whl > $L/pip.log 2>&1
run pytest 150 env PYTHONPATH=/tmp/site python3 -m pytest -q -rs -p no:cacheprovider python/tests
tail -3 $L/pytest.log
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
