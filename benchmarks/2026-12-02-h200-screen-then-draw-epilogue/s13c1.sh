#!/usr/bin/env bash
# Session 13, call 1 (one H200). Builds: old = 4f1ba6e, final = HEAD's kernels (ad1d833). (1) The truncating
# calls at B = 33-64 (tma_n64_tk, whose spills grew with the pruned noise), old vs final, 2 interleaved rounds;
# (2) ncu warp-state sampling by SASS instruction of tmat_n64x2 at Qwen3-8B B = 256, T = 1 and T = 0 (final).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; rm -rf x; xz -dc c3.tar.xz | tar -xf -
L=/tmp/logs1; mkdir -p $L
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
for r in 1 2; do for v in old final; do TO=60 run tk-$v-r$r ./x/$v-bench-lm_head --bench --truncation --batches 33,48,64 --runs 30 --out $L/tk-$v-r$r; done; done
NCU=/usr/local/cuda/bin/ncu
fine() { local name=$1 skip=$2; shift 2; local s=$(date +%s); timeout 150 $NCU --section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats --section InstructionStats --section SchedulerStats --warp-sampling-interval 0 --import-source no -k "regex:^fused_sample_wgmma_tmat_n64x2\$" -s $skip -c 1 -o $L/$name ./x/final-bench-lm_head --bench --shape 4096,151936 --batches 256 --runs 5 --out /tmp/o-$name > $L/full-$name.txt 2>&1; echo "fine $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; $NCU -i $L/$name.ncu-rep --page details > $L/details-$name.txt 2>&1; $NCU -i $L/$name.ncu-rep --page source --csv --print-source sass > $L/sass-$name.csv 2>&1; }
fine x2-t1 4
fine x2-t0 18
python3 abtk.py $L old final > $L/tk-ab.txt 2>&1
rm -f $L/*.ncu-rep.bak
tar -czf $OUT/logs1.tgz -C /tmp logs1
cat $L/summary.txt; cat $L/tk-ab.txt | tail -20
for f in $L/details-*.txt; do echo "== $f"; grep -E "^ +Duration|Warp Cycles Per Issued|Issued Warp Per Scheduler|No Eligible" $f | head -5; done
for f in $L/sass-*.csv; do echo "== $f"; python3 segments.py $f 2>&1 | head -30; done
