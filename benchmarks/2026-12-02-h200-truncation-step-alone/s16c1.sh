#!/usr/bin/env bash
# Session 16, call 1 (one H200). Builds: base = 090b56e (session 15's kernels, its cfraw bench); new = base +
# lanes_best (quad_best/column_best merged; PTX reordered) + the truncation step as two entries of one body
# (truncate_rows: one block per multiprocessor, 96 registers, no spills, for rows <= SMs; truncate_rows_paired:
# the old bound, 64 registers, for more rows); alone = new with FLASHSAMPLING_TRUNCATE_STEP=alone (every B).
# GPU suites + memcheck of new; same-call A/Bs: full table (2 rounds), truncation (2 rounds, 3 labels),
# controls (1 round); ncu of the step at B = 1 and 256 both ways.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c1.tar.xz | tar -xf -
L=/tmp/logs1; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs1.tgz --exclude='*.ncu-rep' -C /tmp logs1; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=70 run test-gpu_truncation ./x/new-test-gpu_truncation --test-threads=1 --nocapture
for t in gpu_controls gpu_f16; do TO=40 run test-$t ./x/new-test-$t --test-threads=1; done
TO=150 run test-gpu ./x/new-test-gpu --test-threads=1 --nocapture
TO=60 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/new-test-gpu_truncation --test-threads=1 flat_rows tied_and_short rows_that_keep both_truncation_step
run warm ./x/base-bench-lm_head --bench --batches 1,256 --runs 5 --out /tmp/warm
OUT=$L/full TO=130 run ab bash ../scripts/gpu-ab.sh 2 base=./x/base-bench-lm_head new=./x/new-bench-lm_head
FS_BENCH_ARGS="--truncation --batches 1,16,33,64,256,512 --runs 30" OUT=$L/tk TO=170 run ab-tk bash ../scripts/gpu-ab.sh 2 base=./x/base-bench-lm_head new=./x/new-bench-lm_head alone=./alone.sh
FS_BENCH_ARGS="--controls --modes temps+logprobs,mask,top20 --batches 1,16,32,64" OUT=$L/ctl TO=60 run ab-ctl bash ../scripts/gpu-ab.sh 1 base=./x/base-bench-lm_head new=./x/new-bench-lm_head
NCU=/usr/local/cuda/bin/ncu
for step in alone paired; do for b in 1 256; do s=$(date +%s); FLASHSAMPLING_TRUNCATE_STEP=$step timeout 40 $NCU --metrics gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum -k "regex:^truncate_rows" -s 3 -c 1 ./x/new-bench-lm_head --bench --truncation --shape 4096,151936 --batches $b --runs 5 --out /tmp/o-$step > $L/ncu-step-$step-b$b.txt 2>&1; echo "ncu step $step b$b rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; done; done
save
cat $L/summary.txt; grep -E "GPU truncation step|test result|GPU truncation:" $L/test-gpu_truncation.log | head; tail -22 $L/ab.log; grep -A30 "truncating calls" $L/ab-tk.log | head -30; grep "^| " $L/ab-ctl.log | head -26
for f in $L/ncu-*.txt; do echo "== $f"; grep -E "gpu__time|inst_executed|local_op" $f | head -3; done
