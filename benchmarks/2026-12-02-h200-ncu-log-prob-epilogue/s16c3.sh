#!/usr/bin/env bash
# Session 16, call 3 (one H200): ncu full sets with SASS source counters of the committed build (2dd0472) for the
# next steps of issues 12 and 13: tma_n32_lp vs tma_n32 at Qwen3-8B B = 32 (temps + log-probs vs plain),
# truncate_rows at B = 1, tma_n64_tk at B = 64.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c3.tar.xz | tar -xf -
L=/tmp/logs3; rm -rf $L; mkdir -p $L
NCU=/usr/local/cuda/bin/ncu
full() { local name=$1 k=$2; shift 2; local s=$(date +%s); timeout 150 $NCU --set full --import-source no -k "regex:^$k\$" -s 3 -c 1 -o $L/$name ./x/raw-bench-lm_head --bench --shape 4096,151936 --runs 5 --out /tmp/o "$@" > $L/full-$name.txt 2>&1; echo "full $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; $NCU -i $L/$name.ncu-rep --page details > $L/details-$name.txt 2>&1; $NCU -i $L/$name.ncu-rep --page source --csv --print-source sass > $L/sass-$name.csv 2>&1; rm -f $L/$name.ncu-rep; xz -T4 $L/sass-$name.csv; tar -czf $OUT/logs3.tgz -C /tmp logs3; }
full lp32 fused_sample_wgmma_tma_n32_lp --controls --modes temps+logprobs --batches 32
full plain32 fused_sample_wgmma_tma_n32 --batches 32
full step1 truncate_rows --truncation --batches 1
full tk64 fused_sample_wgmma_tma_n64_tk --truncation --batches 64
cat $L/summary.txt
for n in lp32 plain32 step1 tk64; do echo "== $n"; grep -E "^    (Duration|Executed Ipc Active|Registers Per|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Local Memory Spilling)" $L/details-$n.txt | head -12; done
