#!/usr/bin/env bash
# Session 31, call 4: GPU scoring with caller-owned score outputs (ScoreOutputs) and Python's fs.score on CUDA
# tensors: the scoring, controls, graph and device-API tests, memcheck of the scoring tests, pytest, then the
# scoring bench on the Llama-3-70B head shape (the Qwen3-8B one ran in call 3).
set -u
cd "$(dirname "$0")"
rm -rf m; xz -dc main.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2; local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-22s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP" $L/$label.log | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd ..
for n in gpu_score gpu_controls gpu_graphs gpu; do
  run $n 150 gpurun/m/test-$n-main --test-threads=1
done
run san-score 150 $SAN --tool memcheck gpurun/m/test-gpu_score-main --test-threads=1 bad_input scoring_the_sampled sampling_and
grep -E 'ERROR SUMMARY' $L/san-score.log | tail -1
python3 -m pip install --quiet --no-index --no-deps --target /tmp/site gpurun/flashsampling-*.whl > $L/pip.log 2>&1
s=$(date +%s); PYTHONPATH=/tmp/site timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests > $L/pytest.log 2>&1
sum+=("$(printf '%-22s rc=%-3d %4ss %s' pytest $? $(( $(date +%s) - s )) "$(tail -1 $L/pytest.log)")"); echo "${sum[-1]}"
grep -E "^FAILED|^E " $L/pytest.log | head -10
echo "tests done at $(el)s"
timeout $(( 570 - $(el) )) gpurun/m/bench-lm_head-main --bench --score --shape 8192,128256 --batches 1024,4096,16384,32768 \
  --out $L/score > $L/score.log 2>&1; echo "score bench rc=$?"
tail -8 $L/score.log
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
