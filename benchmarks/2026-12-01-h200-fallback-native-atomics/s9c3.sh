#!/usr/bin/env bash
# Session 9, call 3: ncu of the fallback sampler on native 32-bit atomics (build A), racecheck of the fallback's top-n selection.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s9c3.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L
NCU=/usr/local/cuda/bin/ncu; B="./x/bench --bench --shape 4096,151936"
full() { local name=$1 kern=$2; shift 2; local s=$(date +%s); timeout 150 $NCU --set full --import-source no -k "regex:^${kern}\$" -o $L/$name "$@" > $L/full-$name.txt 2>&1; echo "full $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)"; $NCU -i $L/$name.ncu-rep --page details > $L/details-$name.txt 2>&1; $NCU -i $L/$name.ncu-rep --page source --csv --print-source sass > $L/sass-$name.csv 2>&1; }
full unfused-b1 fallback_sample -s 585 -c 1 $B --truncation --batches 1
full heavy-b1 fallback_sample -s 10 -c 1 $B --truncation --heavy-rows --batches 1
s=$(date +%s); timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 tied_and_short > $L/racecheck-tied.log 2>&1; echo "racecheck rc=$? $(( $(date +%s) - s ))s"
tail -3 $L/racecheck-tied.log
for f in $L/details-*.txt; do echo "== $(basename $f)"; grep -E "^ +Duration|Registers Per|Warp Cycles Per Issued|Issued Warp|No Eligible|Executed Ipc A|L1/TEX Hit|Mem Busy|Max Bandwidth" $f | head -12; done
rm -f $L/*.ncu-rep; tar -czf $OUT/logs.tgz -C /tmp logs
