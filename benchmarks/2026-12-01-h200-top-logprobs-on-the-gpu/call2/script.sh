#!/usr/bin/env bash
# Session 8, call 2: no raw log-mass unless asked (1da077f) — A/B against cf5c7bf (b8a) on the log-probability modes; tests; pytest.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=$PWD; cd gpu-lite; xz -dc b8b.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-200} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-30s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/gpu.txt
B="--batches 1,16,32,48,64,128,256"
for r in 1 2; do
  run lp-new-r$r ./x/bench-lm_head --bench --controls --modes logprobs,temps+logprobs,temps+raw,all $B --out $L/lp-new-r$r
  run lp-old-r$r ./x/old-bench-lm_head --bench --controls --modes logprobs,temps+logprobs,all $B --out $L/lp-old-r$r
done
run test-gpu_controls ./x/test-gpu_controls --test-threads=1
run test-gpu_truncation ./x/test-gpu_truncation --test-threads=1
run test-gpu_f16 ./x/test-gpu_f16 --test-threads=1
run test-gpu ./x/test-gpu --test-threads=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site ./wheels/*.whl > $L/pip.log 2>&1
cd $R; PYTHONPATH=/tmp/site run pytest-cuda python3 -m pytest -q -rs -p no:cacheprovider python/tests; cd gpu-lite
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in lp-new-r1 lp-old-r1 lp-new-r2 lp-old-r2; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u -t'|' -k2,2 -k3,3n | head -14; done
for f in $L/test-*.log $L/pytest-cuda.log; do echo "== $(basename $f): $(grep -hE 'test result|passed|failed' $f | tail -1)"; grep -E "FAILED|panicked" $f | head -5; done
grep -h "GPU top" $L/test-gpu_truncation.log | tail -4
tar -czf $OUT/logs.tgz -C /tmp logs
