#!/usr/bin/env bash
# Issue 55, call 4: the landed build (candidates in shared memory for n64t / n128, plain and log-probability; the
# stream test reading the producer's event instead of the host's clock): GPU tests with the library's choice and each
# new kernel forced; the shipped build's (1109be0) gpu suite with n64t forced (does its host-clock stream test fail
# there too?); a last same-call A/B (old, new); Nsight Compute on n128 at B = 256 for what bounds it now.
set -u
cd "$(dirname "$0")"
mkdir -p bin; [ -x bin/bench ] || xz -dc bins.tar.xz | tar -xf - -C bin
B=$PWD/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || command -v ncu)
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
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ|took" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd ../.. # repository root: tests read it
run gpu-choice-hopper 70 $B/test-gpu
export FLASHSAMPLING_PORTABLE=1
run gpu-choice 70 $B/test-gpu
for v in n64t n128; do
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run gpu-$v 70 $B/test-gpu
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run controls-$v 40 $B/test-gpu_controls
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run score-$v 40 $B/test-gpu_score
done
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64t run gpu-n64t-old 70 $B/test-gpu-old
SWEEP="--bench --variants --only mma_tma_n64,mma_tma_n64t,mma_tma_n128 --shape 4096,151936 --shape 8192,128256 --batches 48,64,128,256 --runs 30"
run ab-old 40 $B/bench-old $SWEEP --out $L/ab-old
run ab-new 40 $B/bench $SWEEP --out $L/ab-new
s=$(date +%s)
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 timeout 90 $NCU --clock-control none -k "regex:^fused_sample_mma_tma" -s 5 -c 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  $B/bench --bench --variants --only mma_tma_n128 --shape 4096,151936 --batches 256 --runs 10 --out /tmp/o-n128 > $L/ncu-n128.txt 2>&1
echo "ncu n128 rc=$? $(( $(date +%s) - s ))s"
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Executed Ipc|Issue Slots Busy|Pipe|Stall|Warp Cycles Per Issued|Achieved Occupancy" $L/ncu-n128.txt | head -30
for f in ab-old ab-new; do echo "== $f"; grep -E "^\| d" $L/$f.log | head -10; done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
