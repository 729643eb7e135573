#!/usr/bin/env bash
# Issue 55, call 7 (d80471a: the portable choice takes n64t up to 64 rows at D <= 4096): the GPU suites with the
# portable module and the library's choice (gpu, gpu_controls, gpu_score, gpu_graphs, gpu_f16), and its main table.
set -u
cd "$(dirname "$0")"
mkdir -p bin; [ -x bin/bench ] || xz -dc bins.tar.xz | tar -xf - -C bin
B=$PWD/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-280} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-280} ] && to=$(( ${BUDGET:-280} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd ../.. # repository root: tests read it
export FLASHSAMPLING_PORTABLE=1
run quick 40 $B/bench --bench --quick --out $L/quick
run gpu 70 $B/test-gpu
run controls 30 $B/test-gpu_controls
run score 40 $B/test-gpu_score
run graphs 30 $B/test-gpu_graphs
run f16 30 $B/test-gpu_f16
grep -E "^(config|qwen|llama)" $L/quick.log | head -8
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
