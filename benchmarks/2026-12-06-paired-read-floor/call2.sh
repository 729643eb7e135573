#!/usr/bin/env bash
# Session 41, call 2 (issue 55): where the portable path's last 3% at B <= 16 goes (HEAD fa616ba, H100 or H200).
# Every kernel of a call with its duration (portable and Hopper, B = 1 and 16, Qwen3-8B's head), then Nsight
# Compute sections of the fused kernel: portable n64t at B = 1, Hopper tma_n16 at B = 1, portable n64t at B = 16.
C=${C:-gpurun/e8}
BUDGET=420
. scripts/device-call.sh
machine
Q="--bench --shape 4096,151936 --runs 3"
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,launch__grid_size,launch__block_size,launch__registers_per_thread
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats"
for mode in portable hopper; do
  if [ $mode = portable ]; then export FLASHSAMPLING_PORTABLE=1; else unset FLASHSAMPLING_PORTABLE; fi
  for b in 1 16; do
    run k-$mode-$b 40 $NCU --clock-control none -k regex:"fused|reduce|gemm_logits|expand|adjust" -s 30 -c 8 --metrics $M $B/bench $Q --batches $b --out $L/o-$mode-$b
  done
done
export FLASHSAMPLING_PORTABLE=1
run ncu-p1 60 $NCU --clock-control none -k regex:fused_sample -s 10 -c 1 $SEC --metrics $M $B/bench $Q --batches 1 --out $L/n1
run ncu-p16 60 $NCU --clock-control none -k regex:fused_sample -s 10 -c 1 $SEC --metrics $M $B/bench $Q --batches 16 --out $L/n2
unset FLASHSAMPLING_PORTABLE
run ncu-h1 60 $NCU --clock-control none -k regex:fused_sample -s 10 -c 1 $SEC --metrics $M $B/bench $Q --batches 1 --out $L/n3
for f in k-portable-1 k-portable-16 k-hopper-1 k-hopper-16; do echo "== $f"; grep -E "^  [a-z_0-9]+.*\(|gpu__time_duration|dram__throughput|sm__cycles_active" $L/$f.log | head -40; done
for f in ncu-p1 ncu-p16 ncu-h1; do echo "== $f"; grep -E "fused_sample|Duration|DRAM Throughput|Memory Throughput|sm__cycles_active|Achieved Occupancy|Theoretical Occ|Registers Per|Issue Slots|No Eligible|Warp Cycles Per Issued|Eligible Warps|Stall|L2 Hit|Block Size|Grid Size|Shared Memory Config|Dynamic Shared" $L/$f.log | head -40; done
finish
