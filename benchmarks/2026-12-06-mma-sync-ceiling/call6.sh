#!/usr/bin/env bash
# Issue 55, call 6 (the landed build, 24e5488): which portable TMA kernel is fastest at 1-64 rows now that n64t keeps
# its candidates in shared memory (call 5's sweep had n64t ahead of n16 / n32 at 1-32 rows): the plain sweep twice,
# and log-probabilities with n16, n32 and n64t forced.
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
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-300} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-300} ] && to=$(( ${BUDGET:-300} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  sum+=("$(printf '%-24s rc=%-3d %4ss' $label $rc $(( $(date +%s) - s )))")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd ../.. # repository root
export FLASHSAMPLING_PORTABLE=1
SWEEP="--bench --variants --only mma_tma_n16,mma_tma_n32,mma_tma_n64,mma_tma_n64t --shape 4096,151936 --shape 8192,128256 --batches 1,8,16,24,32,48,64 --runs 30"
run sweep-1 50 $B/bench $SWEEP --out $L/sweep-1
for v in n16 n32 n64t; do
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run lp-$v 40 $B/bench --bench --controls --modes logprobs --shape 4096,151936 --shape 8192,128256 --batches 8,16,24,32 --runs 30 --out $L/lp-$v
done
run sweep-2 50 $B/bench $SWEEP --out $L/sweep-2
for f in sweep-1 sweep-2; do echo "== $f"; grep -E "^\| (config|d)" $L/$f.log | head -16; done
for v in n16 n32 n64t; do echo "== lp-$v"; grep -E "^\| d" $L/lp-$v.log | head -8; done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
