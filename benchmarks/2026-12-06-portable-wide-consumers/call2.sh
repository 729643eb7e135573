#!/usr/bin/env bash
# Issue 55, call 2: the portable TMA family's NB = 8 variants (n64t, n128) with the 16 columns' masses in shared
# memory (_lp: 6 and 4 stages) and chosen by variant_for_batch (33-64 rows n64t; beyond, n128 where it pads no
# more rows than n64). Same call: log-probabilities, top-20 and top-k/top-p forced on n64 / n64t / n128 (the portable
# module only), the plain sweep over B to check the rule, then the gpu suite with the library's choice and the
# truncation suite forced on each new variant.
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
Q="--shape 4096,151936"
for v in n64 n64t n128; do
  export FLASHSAMPLING_PORTABLE=1 FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v
  run ctrl-$v 60 $B/bench --bench --controls --modes logprobs,top20 $Q --batches 48,64,128,256 --runs 30 --out $L/ctrl-$v
  run trunc-$v 60 $B/bench --bench --truncation $Q --batches 64,128,256 --runs 30 --out $L/trunc-$v
  unset FLASHSAMPLING_PORTABLE FLASHSAMPLING_FUSED_VARIANT
done
run variants 120 $B/bench --bench --variants --only mma_tma_n64,mma_tma_n128 --shape 4096,151936 --shape 8192,128256 --batches 40,64,96,128,160,192,224,256 --runs 30 --out $L/variants
FLASHSAMPLING_PORTABLE=1 run gpu-portable 100 $B/test-gpu --test-threads=1
for v in n64t n128; do
  FLASHSAMPLING_PORTABLE=1 FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run trunc-tests-$v 100 $B/test-gpu_truncation --test-threads=1
done
for f in $L/ctrl-*.log $L/trunc-n*.log; do echo "== $(basename $f)"; grep -E "^\||^config|^d4096" $f | head -12; done
grep -E "^\|" $L/variants.log | head -20
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
