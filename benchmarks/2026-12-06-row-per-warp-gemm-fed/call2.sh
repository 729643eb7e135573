#!/usr/bin/env bash
# Session 40, call 2 (issue 55): the GEMM-fed kernels a warp per batch row (one candidate a lane) against HEAD's
# mma.sync-layout GEMM-fed kernels (bench-old = 5b04733), same call. bench-gGbB: ROW_GROUPS = G tiles a screen, registers
# for B blocks a multiprocessor. Sweeps, portable main tables, ncu of the new plain kernel, GPU suites with the new
# kernel forced and with the choice (tests built from g4b2), memcheck.
set -u
C=${C:-gpurun/e2}
mkdir -p $C/bin; [ -x $C/bin/bench-old ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-540} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-540} ] && to=$(( ${BUDGET:-540} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ|ERROR SUMMARY|== CPU" $L/$label.log | cut -c1-400 | head -6
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $L/machine.txt
export FLASHSAMPLING_PORTABLE=1
SW="--bench --variants --shape 4096,151936 --shape 8192,128256 --runs 30 --only mma_tma_n64,mma_tma_n128,gemm_logits --batches 64,96,128,136,160,192,256,512"
for x in old g4b2 g2b2 g2b3; do run sw-$x 50 $B/bench-$x $SW --out $L/sw-$x; done
run sw-old2 50 $B/bench-old $SW --out $L/sw-old2
for x in g4b2 g2b3; do run mp-$x 40 $B/bench-$x --bench --batches 1,16,64,128,160,256 --out $L/mp-$x; done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
[ -n "$NCU" ] && run ncu 60 $NCU --clock-control none -k regex:gemm_logits_sample -s 2 -c 1 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section MemoryWorkloadAnalysis --section InstructionStats $B/bench-g4b2 --bench --shape 4096,151936 --batches 256 --runs 3 --out $L/ncu-run
export FLASHSAMPLING_FUSED_VARIANT=gemm_logits_sample
run gpu-gemm 80 $B/test-gpu
run controls-gemm 50 $B/test-gpu_controls
run score-gemm 50 $B/test-gpu_score
run trunc-gemm 60 $B/test-gpu_truncation
unset FLASHSAMPLING_FUSED_VARIANT
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
[ -n "$SAN" ] && run memcheck 60 $SAN --tool memcheck $B/test-gpu_controls large_portable
run lp 40 $B/bench-g4b2 --bench --controls --modes logprobs,top20 --shape 4096,151936 --shape 8192,128256 --batches 160,256 --out $L/lp
run gpu 80 $B/test-gpu
for x in old g4b2 g2b2 g2b3 old2; do echo "== sw-$x"; grep -E "^\| (d|q|l)" $L/sw-$x.log | head -16; done
for x in g4b2 g2b3; do echo "== mp-$x"; grep -E "^(qwen|llama)" $L/mp-$x.log | tail -12; done
echo "== ncu"; grep -E "Duration|Issue Slots Busy|Executed Ipc A|Achieved Occupancy|Registers Per|No Eligible|Warp Cycles Per Issued|Eligible Warps|Spilling Req|Executed Instructions  |DRAM Through" $L/ncu.log | head -20
echo "== lp"; grep -E "^\| (d|q|l)" $L/lp.log | head -6
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
