#!/usr/bin/env bash
# Session 14, call 2 (one H200). Builds: regs = 665e7c0 (setmaxnreg in the N = 64 weight-as-A kernels);
# scr = regs + the top lists' screened update of four (TopList::update4; only the _tk kernels change).
# scr's truncation/controls suites + memcheck; same-call A/B of truncation (2 rounds) and top-20 log-probs;
# every control at B = 1-256 (scr: the controls table); ncu source counters of tma_n64_tk (scr) and tma_n64 (regs) at Qwen3-8B B = 64. Logs under /tmp/logs2, one tarball to $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c1.tar.xz | tar -xf -; xz -dc c2.tar.xz | tar -xf -
L=/tmp/logs2; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs2.tgz --exclude='*.ncu-rep' -C /tmp logs2; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=60 run test-gpu_truncation ./x/scr-test-gpu_truncation --test-threads=1
TO=40 run test-gpu_controls ./x/scr-test-gpu_controls --test-threads=1
TO=60 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/scr-test-gpu_truncation --test-threads=1 flat_rows tied_and_short rows_that_keep
run warm ./x/regs-bench-lm_head --bench --batches 1,256 --runs 5 --out /tmp/warm
for r in 1 2; do for v in regs scr; do TO=40 run tk-$v-r$r ./x/$v-bench-lm_head --bench --truncation --batches 1,16,33,48,64,128,256 --runs 30 --out $L/tk-$v-r$r; done; done
for v in regs scr; do TO=40 run ctl-$v ./x/$v-bench-lm_head --bench --controls --modes top20 --batches 1,16,32,48,64,128,256 --out $L/ctl-$v; done
TO=90 run controls-scr ./x/scr-bench-lm_head --bench --controls --out $L/controls-scr
NCU=/usr/local/cuda/bin/ncu
fine() { local name=$1 v=$2 k=$3; shift 3; local s=$(date +%s); timeout 100 $NCU --section SourceCounters --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section InstructionStats --warp-sampling-interval 0 --import-source no -k "regex:^$k\$" -s 3 -c 1 -o $L/$name ./x/$v-bench-lm_head --bench "$@" --shape 4096,151936 --batches 64 --runs 5 --out /tmp/o-$name > $L/full-$name.txt 2>&1; echo "fine $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; $NCU -i $L/$name.ncu-rep --page details > $L/details-$name.txt 2>&1; $NCU -i $L/$name.ncu-rep --page source --csv --print-source sass > $L/sass-$name.csv 2>&1; save; }
fine tk-scr scr fused_sample_wgmma_tma_n64_tk --truncation
fine n64-regs regs fused_sample_wgmma_tma_n64
python3 abtk.py $L regs scr > $L/tk-ab.txt 2>&1
save
cat $L/summary.txt; cat $L/tk-ab.txt
for f in $L/ctl-*.log; do echo "== $f"; grep "^| " $f | head -15; done
for f in $L/details-*.txt; do echo "== $f"; grep -E "^ +Duration|DRAM Throughput|Local Memory Spilling Requests  |Warp Cycles Per Issued|Executed Instructions  " $f | head -6; done
for f in $L/sass-*.csv; do echo "== $f"; python3 segments.py $f 2>&1 | head -14; done
