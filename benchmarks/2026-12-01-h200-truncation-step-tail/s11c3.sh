#!/usr/bin/env bash
# Session 11, call 3 (one H200): where truncate_rows' (sel) and reduce_rows' (old) time goes at B = 1: ncu warp-state
# sampling every 32 cycles, by SASS instruction.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; [ -d x ] || xz -dc c1.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs3; mkdir -p $L
NCU=/usr/local/cuda/bin/ncu
fine() { local name=$1 v=$2 k=$3; shift 3; local s=$(date +%s); timeout 120 $NCU --section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats --warp-sampling-interval 0 --import-source no -k "regex:^$k\$" -s 4 -c 1 -o $L/$name ./x/$v-bench-lm_head --bench --shape 4096,151936 --truncation "$@" > $L/full-$name.txt 2>&1; echo "fine $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)"; $NCU -i $L/$name.ncu-rep --page details > $L/details-$name.txt 2>&1; $NCU -i $L/$name.ncu-rep --page source --csv --print-source sass > $L/sass-$name.csv 2>&1; }
fine trunc-sel-b1 sel truncate_rows --batches 1
fine reduce-old-b1 old reduce_rows --batches 1
fine trunc-old-b1 old truncate_rows --batches 1
for f in $L/details-*.txt; do echo "== $(basename $f)"; grep -E "^ +Duration|Elapsed Cycles|Warp Cycles Per Issued" $f | head -4; done
for f in $L/sass-*.csv; do echo "== $(basename $f)"; python3 segments.py $f 2>&1 | head -60; done
tar -czf $OUT/logs3.tgz -C /tmp logs3
