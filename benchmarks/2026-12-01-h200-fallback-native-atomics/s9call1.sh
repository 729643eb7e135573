#!/usr/bin/env bash
# Session 9, call 1: where the truncation tail's time goes (HEAD a7ac511): per-kernel durations of the
# truncating call's chain, ncu full + SASS source of truncate_rows and fallback_sample.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s9prof.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L
NCU=/usr/local/cuda/bin/ncu; $NCU --version | tail -1
B="./x/bench --bench --shape 4096,151936"
chain() { local name=$1; shift; local s=$(date +%s); timeout 120 $NCU --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size -k "regex:(_tk|reduce_rows|truncate_rows|fallback)" "$@" > $L/chain-$name.txt 2>&1; echo "chain $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)"; }
chain b1 -s 60 -c 12 $B --truncation --batches 1
chain b16 -s 60 -c 12 $B --truncation --batches 16
chain b64 -s 60 -c 12 $B --truncation --batches 64
full() { local name=$1 kern=$2; shift 2; local s=$(date +%s); timeout 150 $NCU --set full --import-source no -k "regex:^${kern}\$" -o $L/$name "$@" > $L/full-$name.txt 2>&1; echo "full $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)"; $NCU -i $L/$name.ncu-rep --page details > $L/details-$name.txt 2>&1; $NCU -i $L/$name.ncu-rep --page source --csv --print-source sass > $L/sass-$name.csv 2>&1; echo "  sass rc=$?"; }
full trunc-b1 truncate_rows -s 10 -c 1 $B --truncation --batches 1
full trunc-b64 truncate_rows -s 10 -c 1 $B --truncation --batches 64
full unfused-b1 fallback_sample -s 585 -c 1 $B --truncation --batches 1
full heavy-b1 fallback_sample -s 10 -c 1 $B --truncation --heavy-rows --batches 1
for f in $L/chain-*.txt; do echo "== $(basename $f)"; grep -E "^\s+[a-z_0-9]+.*\(|gpu__time_duration" $f | head -30; done
for f in $L/details-*.txt; do echo "== $(basename $f)"; grep -E "^ +Duration|DRAM Throughput|Registers Per|Warp Cycles Per Issued|Issued Warp|No Eligible|Achieved Occupancy|Executed Ipc A" $f | head -12; done
tar -czf $OUT/logs.tgz -C /tmp logs
