#!/usr/bin/env bash
# Session 40, call 1 (issue 55): the H200 measurement of HEAD 5b04733 (portable main table, the 129-row sweep, the
# Hopper table in the same call), ncu of gemm_logits_sample at Qwen3-8B B = 256, the flaky stream-order test x6.
set -u
C=${C:-gpurun/e1}
mkdir -p $C/bin; [ -x $C/bin/bench ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-470} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-470} ] && to=$(( ${BUDGET:-470} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ|ERROR SUMMARY|== CPU" $L/$label.log | cut -c1-400 | head -6
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $L/machine.txt
export FLASHSAMPLING_PORTABLE=1
run main-portable 70 $B/bench --bench --batches 1,16,64,128,160,256 --out $L/mp
SW="--bench --variants --shape 4096,151936 --shape 8192,128256 --runs 30 --only mma_tma_n64,mma_tma_n128,gemm_logits --batches 128,136,160,192,256,512"
run sweep 70 $B/bench $SW --out $L/sw
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
[ -n "$NCU" ] && run ncu 90 $NCU --clock-control none -k regex:gemm_logits_sample -s 2 -c 1 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section LaunchStats --section MemoryWorkloadAnalysis --section InstructionStats \
  $B/bench --bench --shape 4096,151936 --batches 256 --runs 3 --out $L/ncu-run
for i in 1 2 3 4 5 6; do run order$i 30 $B/test-gpu the_callers_stream_orders; done
unset FLASHSAMPLING_PORTABLE
run main-hopper 60 $B/bench --bench --batches 1,16,64,128,256 --out $L/mh
export FLASHSAMPLING_PORTABLE=1
run gpu 90 $B/test-gpu
for f in main-portable main-hopper; do echo "== $f"; grep -E "^(qwen|llama)" $L/$f.log | tail -12; done
echo "== sweep"; grep -E "^\| (d|q|l)" $L/sweep.log | head -14
echo "== ncu"; grep -E "Duration|Throughput|Issue Slots Busy|Executed Ipc|Achieved Occupancy|Registers Per|No Eligible|Warp Cycles Per Issued|Eligible Warps|Local|Stall|Theoretical Occ" $L/ncu.log | head -40
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
