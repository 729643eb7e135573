#!/usr/bin/env bash
# Issue 55, call 3: the n64t / n128 log-probability kernels with their candidates in shared memory too (build "new",
# 4 and 3 stages) against the shipped ones (1109be0, "old"; 6 and 4 stages): same-call A/B with log-probabilities
# and plain; GPU tests with each forced (gpu, gpu_controls, gpu_score), racecheck; whether
# the_callers_stream_orders_a_call_after_its_producer_with_no_host_sync (its round 1 took 114 ms on the host in
# call 2, n64t forced) fails with the old build too; the library's choice against cuBLAS.
set -u
cd "$(dirname "$0")"
mkdir -p bin; [ -x bin/bench ] || xz -dc bins.tar.xz | tar -xf - -C bin
B=$PWD/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-450} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-450} ] && to=$(( ${BUDGET:-450} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  local san=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/$label.log | tail -1)
  sum+=("$(printf '%-24s rc=%-3d %4ss %s %s' $label $rc $(( $(date +%s) - s )) "$res" "$san")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ|took" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd ../.. # repository root: tests read it
export FLASHSAMPLING_PORTABLE=1
LP="--bench --controls --modes logprobs --shape 4096,151936 --shape 8192,128256 --runs 30"
for b in old new; do
  bin=$B/bench; [ $b = old ] && bin=$B/bench-old
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64t run lp-n64t-$b 40 $bin $LP --batches 48,64 --out $L/lp-n64t-$b
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run lp-n128-$b 40 $bin $LP --batches 128,256 --out $L/lp-n128-$b
done
SWEEP="--bench --variants --only mma_tma_n64,mma_tma_n64t,mma_tma_n128 --shape 4096,151936 --shape 8192,128256 --batches 48,64,128,256 --runs 30"
run ab-new 40 $B/bench $SWEEP --out $L/ab-new
run ab-old 40 $B/bench-old $SWEEP --out $L/ab-old
for v in n64t n128; do
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run controls-$v 60 $B/test-gpu_controls
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run score-$v 60 $B/test-gpu_score
done
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64t run gpu-n64t 70 $B/test-gpu
run gpu-choice 70 $B/test-gpu
T=the_callers_stream_orders_a_call_after_its_producer_with_no_host_sync
for i in 1 2 3 4; do
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64t run stream-new-$i 20 $B/test-gpu $T
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64t run stream-old-$i 20 $B/test-gpu-old $T
done
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run racecheck-n128 70 $SAN --tool racecheck $B/test-gpu_controls --test-threads=1 log_probs_of_wide_rows
run quick-new 40 $B/bench --bench --quick --out $L/quick-new
for f in lp-n64t-old lp-n64t-new lp-n128-old lp-n128-new; do echo "== $f"; grep -E "^\| d" $L/$f.log | head -8; done
for f in ab-old ab-new; do echo "== $f"; grep -E "^\| d" $L/$f.log | head -10; done
grep -E "^\|" $L/quick-new.log | head -30
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
