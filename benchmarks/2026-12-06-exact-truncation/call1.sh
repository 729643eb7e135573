#!/usr/bin/env bash
# Session 43, call 1 (issue 52): the exact path's truncating calls (fallback_sample_exact) — gpu_score's exact
# module, compute-sanitizer over the new test, the truncation suite, tp's exact test; then where an exact call's
# time goes (every kernel, Qwen3-8B's head, B = 1 and 64) and the `gpu` suite (not run in session 42).
C=${C:-gpurun/f2}  # the carried folder: bins.tar.xz of the stripped test and bench binaries and the wheel (not kept)
BUDGET=${BUDGET:-540}
. scripts/device-call.sh
machine
run exact 150 $B/test-gpu_score exact
run san-exact-trunc 150 $SAN --tool memcheck --error-exitcode 9 $B/test-gpu_score exact_truncating
run truncation 120 $B/test-gpu_truncation
run tp-exact 60 $B/test-tp exact
python3 -m pip install --quiet --no-index --no-deps --target /tmp/site $B/*.whl > $L/pip.log 2>&1
PYTHONPATH=/tmp/site run pytest 120 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib python/tests/test_cuda.py -k "exact or score"
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size
for b in 1 64; do
  run k-exact-$b 60 $NCU --clock-control none -k regex:"fused|reduce|gemm|exact|fallback|logits" -s 40 -c 10 --metrics $M $B/bench --bench --controls --modes exact --shape 4096,151936 --batches $b --runs 3 --out $L/o-$b
done
run ctl 120 $B/bench --bench --controls --modes logprobs,exact,top20,exact+top20 --batches 1,16,64 --runs 30 --out $L/ctl
run gpu 150 $B/test-gpu
grep -E "^\| (config|qwen|llama)" $L/ctl.log
for f in k-exact-1 k-exact-64; do echo "== $f"; grep -E "^  [a-z_0-9]+.*\(|gpu__time_duration" $L/$f.log | head -40; done
finish
