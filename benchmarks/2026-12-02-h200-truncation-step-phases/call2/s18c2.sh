#!/usr/bin/env bash
# Session 18, call 2 (one H200): the truncation step's unit passes with more loads in flight (truncate_rows: 24 bound
# loads, 8 list loads a thread; truncate_rows_paired unchanged), against a7f6cf8 (= bb25d95's kernels). GPU suites and
# memcheck of the new build, same-call A/B of truncating calls, ncu of the step, the phases of the new build.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc s18b.tar.xz | tar -xf -
L=$OUT
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
run test-gpu_truncation ./x/test-gpu_truncation --test-threads=1
run test-gpu ./x/test-gpu --test-threads=1
run test-gpu_controls ./x/test-gpu_controls --test-threads=1
TO=150 run memcheck /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 ./x/test-gpu_truncation --test-threads=1 both_truncation_step_entries
run warm ./x/base-bench --bench --batches 1,256 --runs 5 --out /tmp/warm
FS_BENCH_ARGS="--truncation --batches 1,16,64,256" OUT=$L/tk TO=240 run ab-tk bash ../scripts/gpu-ab.sh 2 base=./x/base-bench new=./x/new-bench
NCU=/usr/local/cuda/bin/ncu
for v in base new; do for b in 1 16; do
  s=$(date +%s); timeout 40 $NCU --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k "regex:^truncate_rows\$" -s 3 -c 1 ./x/$v-bench --bench --truncation --shape 4096,151936 --batches $b --runs 5 --out /tmp/o-$v > $L/ncu-$v-b$b.txt 2>&1; echo "ncu $v b$b rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt
done; done
run stamps ./x/stamp-bench --bench --truncation --batches 1,16,64 --runs 5 --out /tmp/st
cat $L/summary.txt; grep -E "test result" $L/test-*.log; grep -E "ERROR SUMMARY" $L/memcheck.log
grep "^| " $L/ab-tk.log | head -24
for f in $L/ncu-*.txt; do echo "== $f"; grep -E "gpu__time|inst_executed" $f | head -2; done
grep STAMPS $L/stamps.log
