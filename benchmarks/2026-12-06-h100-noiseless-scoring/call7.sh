#!/usr/bin/env bash
# Session 35, call 7: the scoring launches split by one helper (GpuBackend::score_in_launches) for one GPU and the ranks:
# gpu_score and tp (host change only; the shipped modules).
set -u
cd "$(dirname "$0")"
mkdir -p bin; xz -dc bins.tar.xz | tar -xf - -C bin
B=$PWD/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-560} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-560} ] && to=$(( ${BUDGET:-560} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  local san=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/$label.log | tail -1)
  sum+=("$(printf '%-24s rc=%-3d %4ss %s %s' $label $rc $(( $(date +%s) - s )) "$res" "$san")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd .. # repository root: tests read it
run gpu_score 120 $B/test-gpu_score --test-threads=1
run tp 120 $B/test-tp --test-threads=1
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
