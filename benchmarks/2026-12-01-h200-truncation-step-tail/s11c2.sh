#!/usr/bin/env bash
# Session 11, call 2 (one H200): ncu of the truncating call's chain (durations) and of truncate_rows (full, SASS) for
# the builds of call 1 (c1.tar.xz, already unpacked on a warm machine or unpacked here).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; [ -d x ] || xz -dc c1.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs2; mkdir -p $L
NCU=/usr/local/cuda/bin/ncu
chain() { local name=$1 v=$2; shift 2; local s=$(date +%s); timeout 100 $NCU --csv --metrics gpu__time_duration.sum -k "regex:(_tk|reduce_rows|truncate_rows|fallback)" -s 60 -c 8 ./x/$v-bench-lm_head --bench --shape 4096,151936 --truncation "$@" > $L/chain-$name.txt 2>&1; echo "chain $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)"; }
full() { local name=$1 v=$2; shift 2; local s=$(date +%s); timeout 120 $NCU --set full --import-source no -k "regex:^truncate_rows\$" -s 10 -c 1 -o $L/$name ./x/$v-bench-lm_head --bench --shape 4096,151936 --truncation "$@" > $L/full-$name.txt 2>&1; echo "full $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)"; $NCU -i $L/$name.ncu-rep --page details > $L/details-$name.txt 2>&1; $NCU -i $L/$name.ncu-rep --page source --csv --print-source sass > $L/sass-$name.csv 2>&1; }
chain old-b1 old --batches 1
chain new-b1 new --batches 1
chain sel-b1 sel --batches 1
chain sel-b16 sel --batches 16
full new-b1 new --batches 1
full sel-b1 sel --batches 1
for f in $L/chain-*.txt; do echo "== $(basename $f)"; python3 chain.py $f; done
for f in $L/details-*.txt; do echo "== $(basename $f)"; grep -E "^ +Duration|Issued Instructions  |Warp Cycles Per Issued|Registers Per|Elapsed Cycles" $f | head -6; done
for f in $L/sass-*.csv; do echo "== $(basename $f)"; python3 segments.py $f 2>&1 | head -30; done
tar -czf $OUT/logs2.tgz -C /tmp logs2
