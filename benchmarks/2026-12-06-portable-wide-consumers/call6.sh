#!/usr/bin/env bash
# Issue 55, call 6 (same build): Nsight Compute on the portable TMA kernels at B = 256 (Qwen3-8B's head): n128 and n64,
# the sections that say what bounds an mma.sync mainloop (speed of light, compute and memory workloads, warp states).
set -u
cd "$(dirname "$0")"
mkdir -p bin; [ -x bin/bench ] || xz -dc bins.tar.xz | tar -xf - -C bin
B=$PWD/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 FLASHSAMPLING_PORTABLE=1
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || command -v ncu)
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd .. ; cd ..
for v in n128 n64; do
  s=$(date +%s)
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v timeout 150 $NCU --clock-control none -k "regex:^fused_sample_mma_tma" -s 5 -c 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    $B/bench --bench --variants --only mma_tma_$v --shape 4096,151936 --batches 256 --runs 10 --out /tmp/o-$v > $L/ncu-$v.txt 2>&1
  echo "ncu $v rc=$? $(( $(date +%s) - s ))s"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache|Executed Ipc|Issue Slots Busy|SM Busy|Pipe|Stall|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Shared Memory Configuration" $L/ncu-$v.txt | head -40
done
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
