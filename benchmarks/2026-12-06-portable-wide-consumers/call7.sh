#!/usr/bin/env bash
# Issue 55, call 7 (same build as calls 4-6): the portable TMA kernels' stall reasons at B = 64 and 256 (Qwen3-8B's
# head, portable module only): n64 at 64 (the choice for D = 8192 and the split layout), n64t at 64, n128 at 256.
set -u
cd "$(dirname "$0")"
mkdir -p bin; [ -x bin/bench ] || xz -dc bins.tar.xz | tar -xf - -C bin
B=$PWD/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 FLASHSAMPLING_PORTABLE=1
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || command -v ncu)
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd .. ; cd ..
for vb in n64:64 n64t:64 n128:256; do
  v=${vb%:*}; b=${vb#*:}; s=$(date +%s)
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v timeout 120 $NCU --clock-control none -k "regex:^fused_sample_mma_tma" -s 5 -c 1 \
    --section SpeedOfLight --section WarpStateStats --section InstructionStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active" \
    $B/bench --bench --variants --only mma_tma_$v --shape 4096,151936 --batches $b --runs 10 --out /tmp/o-$v > $L/ncu-$v-b$b.txt 2>&1
  echo "ncu $v B=$b rc=$? $(( $(date +%s) - s ))s"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|hmma|stalled" $L/ncu-$v-b$b.txt | awk '{ if ($0 ~ /stalled/) { if ($NF+0 >= 0.1) print } else print }' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -24
done
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
