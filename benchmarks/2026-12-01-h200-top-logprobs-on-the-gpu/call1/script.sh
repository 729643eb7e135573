#!/usr/bin/env bash
# Session 8, call 1: top log-probabilities on the GPU (cf5c7bf) — tests, sanitizers, pytest; truncation A/B against 08fa01b; top20 cost.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=$PWD; cd gpu-lite; xz -dc b8a.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-200} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-30s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/gpu.txt
run test-gpu_truncation ./x/test-gpu_truncation --test-threads=1
run test-gpu_controls ./x/test-gpu_controls --test-threads=1
run test-gpu_f16 ./x/test-gpu_f16 --test-threads=1
CS=/usr/local/cuda/bin/compute-sanitizer
TO=150 run memcheck-top $CS --tool memcheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 top_logprobs_of_tied top_logprobs_match_an_f64 flat_rows
TO=150 run racecheck-top $CS --tool racecheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 top_logprobs_of_tied top_logprobs_match_an_f64
python3 -m pip install -q --no-index --no-deps --target /tmp/site ./wheels/*.whl > $L/pip.log 2>&1
cd $R; PYTHONPATH=/tmp/site run pytest-cuda python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_cuda.py -k "top_logprobs or per_row_controls or native_call or logprob_outputs or logprobs_equal"; cd gpu-lite
B="--batches 1,32,64,256"
run top20 ./x/bench-lm_head --bench --controls --modes temps+logprobs,top20 --batches 1,16,32,64,256 --out $L/top20
for r in 1 2; do
  run tk-new-r$r ./x/bench-lm_head --bench --truncation $B --out $L/tk-new-r$r
  run tk-old-r$r ./x/old-bench-lm_head --bench --truncation $B --out $L/tk-old-r$r
done
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in top20 tk-new-r1 tk-old-r1 tk-new-r2 tk-old-r2; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u | head -12; done
for f in $L/test-*.log $L/pytest-cuda.log $L/memcheck-top.log $L/racecheck-top.log; do echo "== $(basename $f): $(grep -hE 'test result|passed|failed|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked|assert" $f | head -5; done
grep -h "GPU top\|took the fallback" $L/test-gpu_truncation.log | head -30
tar -czf $OUT/logs.tgz -C /tmp logs
