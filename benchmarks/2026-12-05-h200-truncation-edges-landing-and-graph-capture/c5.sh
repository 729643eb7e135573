#!/usr/bin/env bash
# Session 30: c4 with main's CUDA-graph capture tests (issue 51.6) first among main's tests.
# Session 29: c3 plus this session's main (the caller's stream, issue 51.2): its GPU tests when time is left.
# Session 28, one call: HEAD (602cdb1, "old") against HEAD + findings 37 and 38 ("new", each build in a
# target directory of its own): the new build's GPU tests, memcheck of its truncation tests, and the
# same-call A/B of the truncating calls (random head, and heavy-tailed rows for the fallback).
set -u
cd "$(dirname "$0")"
[ -d c ] || xz -dc bundle.tar.xz | tar -xf -
[ -d m ] || xz -dc main.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2; local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-30s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP" $L/$label.log | head -6
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
run sample-b1 120 c/example-sample-new --batch 1; grep -iE "self-check|median" $L/sample-b1.log | head -3
cd .. # repository root: tests read it
for n in gpu_truncation tp gpu_controls gpu_f16 speculative gpu; do
  run test-$n 200 gpurun/c/test-$n-new --test-threads=1
done
cd gpurun
step "memcheck"
run san-trunc 120 $SAN --tool memcheck c/test-gpu_truncation-new --test-threads=1
grep -E 'ERROR SUMMARY' $L/san-trunc.log | tail -1
step "A/B truncation x3"
FS_BENCH_ARGS="--truncation --batches 1,16,33,64,256" OUT=$OUT/abt timeout 150 ../scripts/gpu-ab.sh 3 old=c/bench-lm_head-old new=c/bench-lm_head-new > $L/ab-trunc.log 2>&1; echo "rc=$?"
step "A/B truncation heavy rows x3"
FS_BENCH_ARGS="--truncation --heavy-rows --batches 1,16,64,256" OUT=$OUT/abh timeout 150 ../scripts/gpu-ab.sh 3 old=c/bench-lm_head-old new=c/bench-lm_head-new > $L/ab-heavy.log 2>&1; echo "rc=$?"
cd ..
for n in gpu_graphs gpu gpu_truncation gpu_controls speculative tp; do
  [ $(el) -lt 470 ] && run main-$n 100 gpurun/m/test-$n-main --test-threads=1
done
if [ $(el) -lt 500 ]; then
  python3 -m pip install --quiet --no-index --no-deps --target /tmp/site gpurun/flashsampling-*.whl > $L/pip.log 2>&1
  s=$(date +%s); PYTHONPATH=/tmp/site timeout 90 python3 -m pytest -q -rs -p no:cacheprovider python/tests > $L/pytest.log 2>&1
  sum+=("$(printf '%-30s rc=%-3d %4ss %s' pytest $? $(( $(date +%s) - s )) "$(tail -1 $L/pytest.log)")"); echo "${sum[-1]}"
  grep -E "^FAILED|Error" $L/pytest.log | head -8
fi
cd gpurun
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
grep -E "^\||^A/B" $L/ab-trunc.log $L/ab-heavy.log | sed 's/^[^:]*://' | cut -c1-230
cd $OUT && tar -czf all.tgz logs abt abh 2>/dev/null && rm -rf logs abt abh; true
