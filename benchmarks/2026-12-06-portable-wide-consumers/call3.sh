#!/usr/bin/env bash
# Issue 55, call 3: the build that chooses the NB = 8 portable TMA variants (n64t at 33-64 rows, n128 beyond where it
# pads no more rows than n64; truncation stays on n64, the new variants have no truncation kernel). Correctness in
# portable mode: the f16, scoring and controls suites with the library's choice, then forced on n64t and n128.
set -u
cd "$(dirname "$0")"
mkdir -p bin; xz -dc bins.tar.xz | tar -xf - -C bin
B=$PWD/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-570} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-570} ] && to=$(( ${BUDGET:-570} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd .. ; cd .. # repository root: tests read it
for t in gpu_f16 gpu_score gpu_controls; do
  FLASHSAMPLING_PORTABLE=1 run $t-portable 120 $B/test-$t --test-threads=1
done
for v in n64t n128; do
  for t in gpu_f16 gpu_score gpu_controls; do
    FLASHSAMPLING_PORTABLE=1 FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run $t-$v 100 $B/test-$t --test-threads=1
  done
done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
