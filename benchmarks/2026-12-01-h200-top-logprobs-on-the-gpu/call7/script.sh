#!/usr/bin/env bash
# Session 8, call 7: fallback_sample's branch for rows whose sample stands (the review commit) — gpu_truncation, memcheck, heavy-row A/B against 8457760 (old).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cd gpu-lite; xz -dc b8f.tar.xz | tar -xf -
L=/tmp/logs; mkdir -p $L
./x/test-gpu_truncation --test-threads=1 > $L/test-gpu_truncation.log 2>&1; echo "test rc=$?"
/usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 top_logprobs_of_tied top_logprobs_match_an_f64 flat_rows > $L/memcheck.log 2>&1; echo "memcheck rc=$?"
for r in 1 2; do
  ./x/bench-lm_head --bench --truncation --heavy-rows --batches 1,64 --out $L/heavy-new-r$r > $L/heavy-new-r$r.log 2>&1
  ./x/old-bench-lm_head --bench --truncation --heavy-rows --batches 1,64 --out $L/heavy-old-r$r > $L/heavy-old-r$r.log 2>&1
done
grep -hE 'test result|ERROR SUMMARY' $L/test-gpu_truncation.log $L/memcheck.log; grep -E 'FAILED|panicked' $L/*.log | head
for f in heavy-new-r1 heavy-old-r1 heavy-new-r2 heavy-old-r2; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u; done
tar -czf $OUT/logs.tgz -C /tmp logs
