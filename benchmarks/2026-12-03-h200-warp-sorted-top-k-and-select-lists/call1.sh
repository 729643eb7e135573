#!/usr/bin/env bash
# Session 20, call 1 (one H200): three builds of the truncation path against each other in one call.
#   base = 662497c (bb25d95's kernels); step = base + the truncation step's k + 1 selection sorted by one
#   warp and warp 0's decision searched 32 counts at a time; asc = step + the lanes' top lists updated
#   with selects only (TopList::update_ascending). Suites + memcheck/racecheck of asc, A/B of truncating
#   calls (3 builds, 2 rounds), ncu of tma_n64_tk (Qwen3-8B B = 64) and truncate_rows (B = 1) base/asc.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc s20.tar.xz | tar -xf -
L=$OUT
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
run test-gpu_truncation ./x/test-gpu_truncation --test-threads=1
run test-gpu_controls ./x/test-gpu_controls --test-threads=1
TO=150 run test-gpu ./x/test-gpu --test-threads=1
TO=100 run memcheck /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 ./x/test-gpu_truncation --test-threads=1
TO=60 run racecheck /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 1 ./x/test-gpu_truncation --test-threads=1 both_truncation_step_entries
TO=60 run warm ./x/base-bench --bench --truncation --batches 64 --runs 5 --out /tmp/warm
FS_BENCH_ARGS="--truncation --batches 1,16,33,64,256" OUT=$L/tk TO=240 run ab-tk bash ../scripts/gpu-ab.sh 2 base=./x/base-bench step=./x/step-bench asc=./x/asc-bench
rm -rf $L/tk/ab/*-r*/*.png
NCU=/usr/local/cuda/bin/ncu
M=gpu__time_duration.sum,smsp__inst_executed.sum,local_load_requests:l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum
for v in base asc; do
  s=$(date +%s); timeout 45 $NCU --metrics gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum -k "regex:tma_n64_tk" -s 2 -c 1 ./x/$v-bench --bench --truncation --shape 4096,151936 --batches 64 --runs 3 --out /tmp/o-$v > $L/ncu-n64tk-$v.txt 2>&1; echo "ncu n64tk $v rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt
  s=$(date +%s); timeout 40 $NCU --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k "regex:^truncate_rows\$" -s 3 -c 1 ./x/$v-bench --bench --truncation --shape 4096,151936 --batches 1 --runs 3 --out /tmp/o-$v > $L/ncu-step-$v.txt 2>&1; echo "ncu step $v rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt
done
cat $L/summary.txt; grep -E "test result" $L/test-*.log; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $L/memcheck.log $L/racecheck.log
grep -A20 "^A/B" $L/ab-tk.log
for f in $L/ncu-*.txt; do echo "== $f"; grep -E "gpu__time|inst_executed|l1tex" $f | awk '{print $1, $(NF-1), $NF}'; done
