#!/usr/bin/env bash
# Session 8, call 4 (run as s8call5.sh): tma_n64's truncation kernel with its top-list entries in shared memory (6caebc1) — A/B against cf5c7bf (old), tests, sanitizers, pytest.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=$PWD; cd gpu-lite; xz -dc b8e.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-200} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-30s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/gpu.txt
for r in 1 2; do
  run tk-new-r$r ./x/bench-lm_head --bench --truncation --batches 1,32,33,48,64 --out $L/tk-new-r$r
  run tk-old-r$r ./x/old-bench-lm_head --bench --truncation --batches 1,32,33,48,64 --out $L/tk-old-r$r
done
run top20-new ./x/bench-lm_head --bench --controls --modes top20 --batches 48,64 --out $L/top20-new
run top20-old ./x/old-bench-lm_head --bench --controls --modes top20 --batches 48,64 --out $L/top20-old
for t in gpu_truncation gpu_controls gpu_f16 gpu; do run test-$t ./x/test-$t --test-threads=1; done
CS=/usr/local/cuda/bin/compute-sanitizer
TO=170 run memcheck-tk $CS --tool memcheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 truncation_matches_the_cpu rows_that_keep
TO=120 run racecheck-tk $CS --tool racecheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 rows_that_keep
python3 -m pip install -q --no-index --no-deps --target /tmp/site ./wheels/*.whl > $L/pip.log 2>&1
cd $R; PYTHONPATH=/tmp/site run pytest-cuda python3 -m pytest -q -rs -p no:cacheprovider python/tests; cd gpu-lite
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in tk-new-r1 tk-old-r1 tk-new-r2 tk-old-r2 top20-new top20-old; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u -t'|' -k2,2 -k3,3n | head -10; done
for f in $L/test-*.log $L/pytest-cuda.log $L/memcheck-tk.log $L/racecheck-tk.log; do echo "== $(basename $f): $(grep -hE 'test result|passed|failed|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked" $f | head -5; done
grep -h "GPU truncation:\|took the fallback" $L/test-gpu_truncation.log | head -8
tar -czf $OUT/logs.tgz -C /tmp logs
