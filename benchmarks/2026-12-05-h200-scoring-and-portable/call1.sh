#!/usr/bin/env bash
# Session 33, call 1: session 32's final build (the portable TMA family chosen: issue 55), finding 41's patch
# (scoring over vocab shards) and scoring with top-k / top-p / min-p (issue 52: truncate_rows_scored,
# fallback_sample_scored). Every GPU suite, then every one-GPU suite with the sm_90a module unloaded
# (FLASHSAMPLING_PORTABLE=1: the portable family is what variant_for_batch picks), memcheck + racecheck of the
# portable family's tests and of the scoring tests' device calls, memcheck of the two-rank scoring test, pytest.
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
run memcheck-score 90 $SAN --tool memcheck $B/test-gpu_score --test-threads=1 bad_input
run racecheck-score 90 $SAN --tool racecheck $B/test-gpu_score --test-threads=1 bad_input
run memcheck-tp-score 120 $SAN --tool memcheck $B/test-tp --test-threads=1 scoring_over_two_ranks
python3 -m pip install --quiet --no-index --no-deps --target /tmp/site gpurun/flashsampling-*.whl > $L/pip.log 2>&1
run pytest 150 env PYTHONPATH=/tmp/site python3 -m pytest -q -rs -p no:cacheprovider python/tests
tail -3 $L/pytest.log
for n in gpu gpu_controls gpu_truncation gpu_score gpu_f16 gpu_graphs speculative; do
  run portable-$n 120 env FLASHSAMPLING_PORTABLE=1 $B/test-$n --test-threads=1
done
run racecheck-portable 120 env FLASHSAMPLING_PORTABLE=1 FLASHSAMPLING_GPU_TEST_QUICK=1 $SAN --tool racecheck $B/test-gpu --test-threads=1 tma_kernels_follow
run memcheck-portable 120 env FLASHSAMPLING_PORTABLE=1 FLASHSAMPLING_GPU_TEST_QUICK=1 $SAN --tool memcheck $B/test-gpu --test-threads=1 tma_kernels_follow stage_balanced
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
