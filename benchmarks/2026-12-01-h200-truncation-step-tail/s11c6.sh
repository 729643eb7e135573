#!/usr/bin/env bash
# Session 11, call 6 (one H200): ncu of the truncating call's chain at B = 1 (lp, walk) and warp-state sampling of the
# walk build's truncate_rows (where its time goes now).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; rm -rf x; xz -dc c5.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs6; mkdir -p $L
NCU=/usr/local/cuda/bin/ncu
chain() { local name=$1 v=$2; shift 2; local s=$(date +%s); timeout 100 $NCU --csv --metrics gpu__time_duration.sum -k "regex:(_tk|reduce_rows|truncate_rows|fallback)" -s 60 -c 8 ./x/$v-bench-lm_head --bench --shape 4096,151936 --truncation "$@" > $L/chain-$name.txt 2>&1; echo "chain $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)"; }
fine() { local name=$1 v=$2 k=$3; shift 3; local s=$(date +%s); timeout 120 $NCU --section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats --warp-sampling-interval 0 --import-source no -k "regex:^$k\$" -s 4 -c 1 -o $L/$name ./x/$v-bench-lm_head --bench --shape 4096,151936 --truncation "$@" > $L/full-$name.txt 2>&1; echo "fine $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)"; $NCU -i $L/$name.ncu-rep --page details > $L/details-$name.txt 2>&1; $NCU -i $L/$name.ncu-rep --page source --csv --print-source sass > $L/sass-$name.csv 2>&1; }
chain lp-b1 lp --batches 1
chain walk-b1 walk --batches 1
fine trunc-walk-b1 walk truncate_rows --batches 1
fine trunc-lp-b1 lp truncate_rows --batches 1
for f in $L/chain-*.txt; do echo "== $(basename $f)"; python3 chain.py $f; done
for f in $L/details-*.txt; do echo "== $(basename $f)"; grep -E "^ +Duration|Elapsed Cycles|Warp Cycles Per Issued" $f | head -4; done
tar -czf $OUT/logs6.tgz -C /tmp logs6
