#!/usr/bin/env bash
# Session 19, call 1 (one H200): weight-as-A vocab ranges of 32-row warp units (balanced to 32 rows instead of
# whole 128-row tiles) against 826870e (= bb25d95's kernels). GPU suites + memcheck of the new build, same-call
# A/B of the full table (2 rounds), A/B of temps+log-probs (Llama-3-70B: its 17-32 choice moved), the variant
# sweep at Llama-3-70B B = 17..64 (the range rule), ncu stall reasons of the truncation step (base).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc s19a.tar.xz | tar -xf -
L=$OUT
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
run test-gpu ./x/test-gpu --test-threads=1
run test-gpu_truncation ./x/test-gpu_truncation --test-threads=1
run test-gpu_controls ./x/test-gpu_controls --test-threads=1
TO=100 run memcheck /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 ./x/test-gpu --test-threads=1 fused
run warm ./x/base-bench --bench --batches 1,256 --runs 5 --out /tmp/warm
OUT=$L/full TO=260 run ab-full bash ../scripts/gpu-ab.sh 2 base=./x/base-bench new=./x/new-bench
FS_BENCH_ARGS="--controls --modes temps+logprobs --shape 8192,128256 --batches 1,16,17,32,33,64" OUT=$L/lp TO=100 run ab-lp bash ../scripts/gpu-ab.sh 1 base=./x/base-bench new=./x/new-bench
TO=60 run variants ./x/new-bench --bench --variants --shape 8192,128256 --batches 17,32,33,64 --only tma_n32,tma_n64,tmat_n64 --out $L/variants
NCU=/usr/local/cuda/bin/ncu
s=$(date +%s); timeout 50 $NCU --section WarpStateStats --section SchedulerStats --section LaunchStats -k "regex:^truncate_rows\$" -s 3 -c 1 ./x/base-bench --bench --truncation --shape 4096,151936 --batches 1 --runs 5 --out /tmp/o-n > $L/ncu-step-b1.txt 2>&1; echo "ncu step rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt
cat $L/summary.txt; grep -E "test result" $L/test-*.log; grep -E "ERROR SUMMARY" $L/memcheck.log
grep -A40 "^A/B" $L/ab-full.log | head -45
grep -A20 "^A/B" $L/ab-lp.log | head -22
grep "^| " $L/variants.log | head -30
grep -E "Stall|Warp Cycles|Issued|Eligible|No Eligible|Active Warps" $L/ncu-step-b1.txt | head -30
