#!/usr/bin/env bash
# Session 36, call 8: the host changes after the kernels (ScoreTargets::top_and_ranks; alloc_samples sizing the handoff
# slots for the smallest and largest D; a forced variant's epilogues): the scoring, tensor-parallel (two ranks on one
# GPU) and graph suites with the Hopper module and with the portable module only.
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
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-200} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-200} ] && to=$(( ${BUDGET:-200} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:" $L/$label.log | cut -c1-400 | head -6
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/machine.txt
cd .. ; cd ..
run gpu_graphs 40 $B/test-gpu_graphs --test-threads=1
run gpu_score 60 $B/test-gpu_score --test-threads=1
run tp 60 $B/test-tp --test-threads=1
FLASHSAMPLING_PORTABLE=1 run gpu_graphs-portable 40 $B/test-gpu_graphs --test-threads=1
FLASHSAMPLING_PORTABLE=1 run gpu_score-portable 60 $B/test-gpu_score --test-threads=1
echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
