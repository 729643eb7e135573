#!/usr/bin/env bash
# Session 34, call 1: scoring with top log-probabilities and the given tokens' ranks on the GPU (issue 52:
# truncate_rows_scored ranks from its sorted prefix, fallback_sample_scored counts the rest). Every GPU suite,
# memcheck + racecheck of the scoring device calls, pytest, the scoring and truncation suites with the sm_90a
# module unloaded.
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
for n in gpu_score tp gpu_truncation; do
  run $n 170 $B/test-$n --test-threads=1
done
grep -hE "top lists and ranks|truncating scores|two ranks" $L/gpu_score.log $L/tp.log | head -16
run memcheck-score 90 $SAN --tool memcheck $B/test-gpu_score --test-threads=1 bad_input
run racecheck-score 90 $SAN --tool racecheck $B/test-gpu_score --test-threads=1 bad_input
python3 -m pip install --quiet --no-index --no-deps --target /tmp/site gpurun/flashsampling-*.whl > $L/pip.log 2>&1
run pytest 150 env PYTHONPATH=/tmp/site python3 -m pytest -q -rs -p no:cacheprovider python/tests
tail -3 $L/pytest.log
run bench-score 100 $B/bench-lm_head --bench --score --score-top 20 --shape 4096,151936 --batches 1024,4096 --runs 5 --out $L/score
grep -E "^\|" $L/bench-score.log | head -8
for n in gpu_controls gpu_graphs speculative gpu_f16 gpu; do
  run $n 120 $B/test-$n --test-threads=1
done
run memcheck-tp-score 100 $SAN --tool memcheck $B/test-tp --test-threads=1 scoring_over_two_ranks
for n in gpu_score gpu_truncation; do
  run portable-$n 150 env FLASHSAMPLING_PORTABLE=1 $B/test-$n --test-threads=1
done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
