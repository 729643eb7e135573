#!/usr/bin/env bash
# Session 8, call 5 (run as s8call4.sh): the final kernels (8457760) — GPU test suites and the CUDA pytest.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=$PWD; cd gpu-lite; xz -dc b8d.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-200} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-30s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/gpu.txt
for t in gpu_truncation gpu_controls gpu_f16 gpu; do run test-$t ./x/test-$t --test-threads=1; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site ./wheels/*.whl > $L/pip.log 2>&1
cd $R; PYTHONPATH=/tmp/site run pytest-cuda python3 -m pytest -q -rs -p no:cacheprovider python/tests; cd gpu-lite
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in $L/test-*.log $L/pytest-cuda.log; do echo "== $(basename $f): $(grep -hE 'test result|passed|failed' $f | tail -1)"; grep -E "FAILED|panicked" $f | head -5; done
grep -h "GPU top" $L/test-gpu_truncation.log | head -12
tar -czf $OUT/logs.tgz -C /tmp logs
