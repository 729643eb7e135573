#!/usr/bin/env bash
# Session 8, call 3: ncu of what limits the log-probability and truncation kernels (cf5c7bf = HEAD's kernels), Qwen3-8B shape.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc b8a.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters"
prof() { local name=$1 kern=$2; shift 2; local s=$(date +%s); timeout 150 $NCU $SEC -k "regex:^${kern}\$" -s 3 -c 1 ./x/bench-lm_head --bench --shape 4096,151936 --runs 5 "$@" > $L/ncu-$name.txt 2>&1; echo "$name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)"; }
prof tma_n64-b48 fused_sample_wgmma_tma_n64 --controls --modes temps+logprobs --batches 48
prof tmat_n64_lp-b48 fused_sample_wgmma_tmat_n64_lp --controls --modes temps+logprobs --batches 48
prof tma_n64_tk-b64 fused_sample_wgmma_tma_n64_tk --truncation --batches 64
prof tma_n32_lp-b32 fused_sample_wgmma_tma_n32_lp --controls --modes temps+logprobs --batches 32
for f in $L/ncu-*.txt; do echo "== $(basename $f)"; grep -E "Duration|DRAM Throughput|Registers Per|Local Memory|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Achieved Occupancy|spill|Local" $f | head -24; done
tar -czf $OUT/logs.tgz -C /tmp logs
