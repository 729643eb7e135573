#!/usr/bin/env bash
# Session 14, call 1 (one H200). Builds: base = 3cd98ca (session 13's kernels); regs = setmaxnreg 24/240 in the
# N = 64 weight-as-A kernels + `.minnctapersm 1` on the entries that move registers (ptxas honours setmaxnreg).
# GPU suites + memcheck of regs; same-call A/B: full table (2 rounds), truncation (2 rounds), controls;
# forced tma_n64 for log-probs at B = 48/64; ncu of tma_n64_tk at Qwen3-8B B = 64. Logs under /tmp/logs1, one tarball to $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c1.tar.xz | tar -xf -
L=/tmp/logs1; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs1.tgz --exclude='*.ncu-rep' -C /tmp logs1; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=60 run test-gpu_truncation ./x/regs-test-gpu_truncation --test-threads=1
for t in gpu_controls gpu_f16; do TO=40 run test-$t ./x/regs-test-$t --test-threads=1; done
TO=150 run test-gpu ./x/regs-test-gpu --test-threads=1 --nocapture
TO=40 run memcheck-ctl /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/regs-test-gpu_controls --test-threads=1
TO=60 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/regs-test-gpu_truncation --test-threads=1 flat_rows tied_and_short rows_that_keep
run warm ./x/base-bench-lm_head --bench --batches 1,256 --runs 5 --out /tmp/warm
OUT=$L TO=150 run ab bash ../scripts/gpu-ab.sh 2 base=./x/base-bench-lm_head regs=./x/regs-bench-lm_head
for r in 1 2; do for v in base regs; do TO=40 run tk-$v-r$r ./x/$v-bench-lm_head --bench --truncation --batches 1,16,33,48,64,256 --runs 30 --out $L/tk-$v-r$r; done; done
for v in base regs; do TO=40 run ctl-$v ./x/$v-bench-lm_head --bench --controls --modes temps+logprobs,mask,top20 --batches 16,32,48,64,128,256 --out $L/ctl-$v; done
FLASHSAMPLING_FUSED_VARIANT=fused_sample_wgmma_tma_n64 TO=30 run ctl-regs-n64 ./x/regs-bench-lm_head --bench --controls --modes temps+logprobs,top20 --batches 48,64 --out $L/ctl-regs-n64
NCU=/usr/local/cuda/bin/ncu
for v in base regs; do s=$(date +%s); timeout 80 $NCU --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis -k "regex:^fused_sample_wgmma_tma_n64_tk\$" -s 3 -c 1 ./x/$v-bench-lm_head --bench --truncation --shape 4096,151936 --batches 64 --runs 5 --out /tmp/o-$v > $L/ncu-tk-$v.txt 2>&1; echo "ncu $v rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; save; done
python3 abtk.py $L base regs > $L/tk-ab.txt 2>&1
save
cat $L/summary.txt; tail -32 $L/ab.log; cat $L/tk-ab.txt
for f in $L/ctl-*.log; do echo "== $f"; grep "^| " $f | head -16; done
for f in $L/ncu-tk-*.txt; do echo "== $f"; grep -E "^ +Duration|DRAM Throughput|Local Memory|Warp Cycles Per Issued" $f | head -6; done
