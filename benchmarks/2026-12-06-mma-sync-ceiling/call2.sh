#!/usr/bin/env bash
# Issue 55, call 2: the plain n64t / n128 kernels with their 16 candidates a lane in shared memory (this session's
# kernels; build "new") against the shipped ones (1109be0, "old"): GPU tests with each forced, memcheck, then the
# same-call A/B of the portable family's variant sweep (old, new, new, old) and the library's choice against cuBLAS.
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
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-430} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-430} ] && to=$(( ${BUDGET:-430} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  local san=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/$label.log | tail -1)
  sum+=("$(printf '%-24s rc=%-3d %4ss %s %s' $label $rc $(( $(date +%s) - s )) "$res" "$san")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd ../.. # repository root: tests read it
export FLASHSAMPLING_PORTABLE=1
SWEEP="--bench --variants --only mma_tma_n64,mma_tma_n64t,mma_tma_n128 --shape 4096,151936 --shape 8192,128256 --batches 48,64,128,256 --runs 30"
run ab-old-1 60 $B/bench-old $SWEEP --out $L/ab-old-1
run ab-new-1 60 $B/bench $SWEEP --out $L/ab-new-1
for v in n128 n64t; do
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run gpu-$v 70 $B/test-gpu
done
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run controls-n128 60 $B/test-gpu_controls
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64t run memcheck-n64t 70 $SAN --tool memcheck $B/test-gpu --test-threads=1 fused_kernel_matches_the_cpu_backend every_fused large_batches stage_balanced
run ab-new-2 60 $B/bench $SWEEP --out $L/ab-new-2
run ab-old-2 60 $B/bench-old $SWEEP --out $L/ab-old-2
run quick-new 60 $B/bench --bench --quick --out $L/quick-new
for f in ab-old-1 ab-new-1 ab-new-2 ab-old-2; do echo "== $f"; grep -E "^\|" $L/$f.log | head -30; done
grep -E "^\|" $L/quick-new.log | head -30
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
