#!/usr/bin/env bash
# Session 16, call 2 (one H200). Builds: base = 090b56e (session 15's kernels); new = call 1's (lanes_best + the
# truncation step's two entries); raw = new + the log-probability kernels skip the raw log-mass when a one-GPU
# call asks for no raw log-probabilities (null raw_logprobs). GPU suites + memcheck of raw; same-call A/Bs:
# controls (2 rounds, 3 builds), full table (1 round, base/raw: plain kernels unchanged); ncu of the _lp kernels.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c2.tar.xz | tar -xf -
L=/tmp/logs2; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs2.tgz --exclude='*.ncu-rep' -C /tmp logs2; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=40 run test-gpu_controls ./x/raw-test-gpu_controls --test-threads=1 --nocapture
TO=70 run test-gpu_truncation ./x/raw-test-gpu_truncation --test-threads=1
TO=40 run test-gpu_f16 ./x/raw-test-gpu_f16 --test-threads=1
TO=150 run test-gpu ./x/raw-test-gpu --test-threads=1
TO=60 run memcheck-ctl /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/raw-test-gpu_controls --test-threads=1
run warm ./x/base-bench-lm_head --bench --batches 1,256 --runs 5 --out /tmp/warm
FS_BENCH_ARGS="--controls --modes temps+logprobs,mask,top20 --batches 1,16,32,64,256" OUT=$L/ctl TO=220 run ab-ctl bash ../scripts/gpu-ab.sh 2 base=./x/base-bench-lm_head new=./x/new-bench-lm_head raw=./x/raw-bench-lm_head
OUT=$L/full TO=80 run ab bash ../scripts/gpu-ab.sh 1 base=./x/base-bench-lm_head raw=./x/raw-bench-lm_head
NCU=/usr/local/cuda/bin/ncu
for v in base raw; do for b in 1 32 64; do s=$(date +%s); timeout 40 $NCU --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k "regex:^fused_sample_wgmma_tma_n(16|32|64)_lp\$" -s 3 -c 1 ./x/$v-bench-lm_head --bench --controls --modes temps+logprobs --shape 4096,151936 --batches $b --runs 5 --out /tmp/o-$v > $L/ncu-lp-$v-b$b.txt 2>&1; echo "ncu lp $v b$b rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; done; done
save
cat $L/summary.txt; grep -E "test result" $L/test-*.log; grep "ERROR SUMMARY" $L/memcheck-ctl.log; grep "^| " $L/ab-ctl.log | grep -v "| plain |" | head -60; tail -24 $L/ab.log
for f in $L/ncu-*.txt; do echo "== $f"; grep -E "Profiling|gpu__time|inst_executed" $f | head -3; done
