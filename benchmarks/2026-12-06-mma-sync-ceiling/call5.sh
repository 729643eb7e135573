#!/usr/bin/env bash
# Issue 55, call 5: reading ahead across stages (each stage of a portable TMA consumer warp waits for the next and
# reads its first fragments before its own last MMAs) against the landed build (24e5488, "base"): the portable TMA
# family's variant sweep base, ahead, ahead, base; gpu and gpu_controls with the new build.
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
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-330} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-330} ] && to=$(( ${BUDGET:-330} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd ../.. # repository root: tests read it
export FLASHSAMPLING_PORTABLE=1
SWEEP="--bench --variants --only mma_tma --shape 4096,151936 --shape 8192,128256 --batches 1,16,32,64,128,256 --runs 30"
run ab-base-1 50 $B/bench-base $SWEEP --out $L/ab-base-1
run ab-ahead-1 50 $B/bench $SWEEP --out $L/ab-ahead-1
run gpu-ahead 70 $B/test-gpu
run controls-ahead 40 $B/test-gpu_controls
run ab-ahead-2 50 $B/bench $SWEEP --out $L/ab-ahead-2
run ab-base-2 50 $B/bench-base $SWEEP --out $L/ab-base-2
for f in ab-base-1 ab-ahead-1 ab-ahead-2 ab-base-2; do echo "== $f"; grep -E "^\| (config|d)" $L/$f.log | head -14; done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
