#!/usr/bin/env bash
# Session 30, call 4 (re-run after the relaxed-mode queries): Python CUDA-graph capture (the backend context without cudarc event tracking; a
# call on another stream that finished counts as the warm-up): graph tests, the device-API tests, pytest.
set -u
cd "$(dirname "$0")"
rm -rf m; xz -dc main.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/machine.txt
cd ..
timeout 60 gpurun/m/test-gpu_graphs-main --test-threads=1 > $L/main-gpu_graphs.log 2>&1; echo "gpu_graphs rc=$? $(grep '^test result' $L/main-gpu_graphs.log)"
timeout 200 gpurun/m/test-gpu-main --test-threads=1 > $L/main-gpu.log 2>&1; echo "gpu rc=$? $(grep "^test result" $L/main-gpu.log)"
python3 -m pip install --quiet --no-index --no-deps --target /tmp/site gpurun/flashsampling-*.whl > $L/pip.log 2>&1
PYTHONPATH=/tmp/site timeout 120 python3 -m pytest -q -rs -p no:cacheprovider python/tests > $L/pytest.log 2>&1; echo "pytest rc=$? $(tail -1 $L/pytest.log)"
grep -E "^E |^FAILED" $L/pytest.log | head -10
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
