#!/usr/bin/env bash
# Issue 55, call 1: the shared-memory ring probe (run.py) and finding 50's mma.sync probe on this card; the library's
# choice (HEAD b723a21, shipped PTX) with the portable module and with the Hopper module (main tables at B = 1, 16, 64, 256); the
# GPU suites gpu, gpu_controls and gpu_score with the portable module.
set -u
here=$(cd "$(dirname "$0")" && pwd)
C=${C:-gpurun/c1}
mkdir -p $C/bin; [ -x $C/bin/bench ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-500} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-500} ] && to=$(( ${BUDGET:-500} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $L/machine.txt
run ring 120 python3 $here/run.py
run mma 90 python3 $here/../2026-12-06-mma-sync-ceiling/run.py
run quick-hopper 60 $B/bench --bench --batches 1,16,64,256 --out $L/quick-hopper
export FLASHSAMPLING_PORTABLE=1
run quick-portable 60 $B/bench --bench --batches 1,16,64,256 --out $L/quick-portable
run gpu 90 $B/test-gpu
run controls 40 $B/test-gpu_controls
run score 50 $B/test-gpu_score
cat $L/ring.log $L/mma.log
for q in hopper portable; do echo "-- $q"; grep -E "^(config|qwen|llama)" $L/quick-$q.log | head -8; done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
