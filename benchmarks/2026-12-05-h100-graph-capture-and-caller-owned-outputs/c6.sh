#!/usr/bin/env bash
# Session 30, call 2: main after CUDA-graph capture (51.6) and caller-owned outputs (51.2:
# sample_device_into; Python writes into PyTorch's tensors, no copies): main's GPU tests with
# FLASHSAMPLING_REQUIRE_GPU=1, memcheck of the graph tests and of the caller-owned-outputs test,
# then the Python tests against the wheel.
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
  sum+=("$(printf '%-30s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP" $L/$label.log | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd .. # repository root: tests read it
for n in gpu_graphs gpu gpu_truncation gpu_controls gpu_f16 speculative tp; do
  run main-$n 150 gpurun/m/test-$n-main --test-threads=1
done
run san-graphs 120 $SAN --tool memcheck gpurun/m/test-gpu_graphs-main --test-threads=1
grep -E 'ERROR SUMMARY' $L/san-graphs.log | tail -1
run san-into 120 $SAN --tool memcheck gpurun/m/test-gpu-main --test-threads=1 results_into_caller_owned
grep -E 'ERROR SUMMARY' $L/san-into.log | tail -1
python3 -m pip install --quiet --no-index --no-deps --target /tmp/site gpurun/flashsampling-*.whl > $L/pip.log 2>&1
s=$(date +%s); PYTHONPATH=/tmp/site timeout 120 python3 -m pytest -q -rs -p no:cacheprovider python/tests > $L/pytest.log 2>&1
sum+=("$(printf '%-30s rc=%-3d %4ss %s' pytest $? $(( $(date +%s) - s )) "$(tail -1 $L/pytest.log)")"); echo "${sum[-1]}"
grep -E "^FAILED|Error" $L/pytest.log | head -8
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
