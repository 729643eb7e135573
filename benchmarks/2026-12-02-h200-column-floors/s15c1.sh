#!/usr/bin/env bash
# Session 15, call 1 (one H200). Builds: base = 61628b4 (session 14's kernels); cf = base + column floors in the
# weight-as-A adapters (best of the 8 lanes sharing a batch column); cfraw = cf + truncation kernels skip the raw
# log-mass when nothing reads it. GPU suites + memcheck of cfraw; same-call A/Bs: full table (2 rounds, 3 builds),
# truncation (2 rounds), controls (1 round); ncu instruction counts of tma_n64 / tma_n64_tk at Qwen3-8B B = 64.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c1.tar.xz | tar -xf -
L=/tmp/logs1; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs1.tgz --exclude='*.ncu-rep' -C /tmp logs1; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=60 run test-gpu_truncation ./x/cfraw-test-gpu_truncation --test-threads=1
for t in gpu_controls gpu_f16; do TO=40 run test-$t ./x/cfraw-test-$t --test-threads=1; done
TO=150 run test-gpu ./x/cfraw-test-gpu --test-threads=1 --nocapture
TO=40 run memcheck-ctl /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/cfraw-test-gpu_controls --test-threads=1
TO=60 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/cfraw-test-gpu_truncation --test-threads=1 flat_rows tied_and_short rows_that_keep
run warm ./x/base-bench-lm_head --bench --batches 1,256 --runs 5 --out /tmp/warm
OUT=$L/full TO=170 run ab bash ../scripts/gpu-ab.sh 2 base=./x/base-bench-lm_head cf=./x/cf-bench-lm_head cfraw=./x/cfraw-bench-lm_head
FS_BENCH_ARGS="--truncation --batches 1,16,33,48,64,256 --runs 30" OUT=$L/tk TO=150 run ab-tk bash ../scripts/gpu-ab.sh 2 base=./x/base-bench-lm_head cf=./x/cf-bench-lm_head cfraw=./x/cfraw-bench-lm_head
FS_BENCH_ARGS="--controls --modes temps+logprobs,mask,top20 --batches 1,16,32,48,64" OUT=$L/ctl TO=80 run ab-ctl bash ../scripts/gpu-ab.sh 1 base=./x/base-bench-lm_head cfraw=./x/cfraw-bench-lm_head
NCU=/usr/local/cuda/bin/ncu
for v in base cfraw; do for k in tma_n64 tma_n64_tk; do mode=""; [ $k = tma_n64_tk ] && mode="--truncation"; s=$(date +%s); timeout 60 $NCU --metrics gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum -k "regex:^fused_sample_wgmma_${k}\$" -s 3 -c 1 ./x/$v-bench-lm_head --bench $mode --shape 4096,151936 --batches 64 --runs 5 --out /tmp/o-$v > $L/ncu-$k-$v.txt 2>&1; echo "ncu $k $v rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; done; done
save
cat $L/summary.txt; tail -30 $L/ab.log; grep -A40 "truncating calls" $L/ab-tk.log | head -20; grep "^| " $L/ab-ctl.log | head -34
for f in $L/ncu-*.txt; do echo "== $f"; grep -E "gpu__time|inst_executed|local_op" $f | head -3; done
