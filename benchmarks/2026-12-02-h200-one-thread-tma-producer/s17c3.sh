#!/usr/bin/env bash
# Session 17, call 3 (one H200): the TMA producer as one thread (lane 0 issues every copy and waits alone; the warp
# reconverges at the end). Builds: base = bb25d95; one = base + the one-thread producer. GPU suites + memcheck of
# one; same-call A/Bs: full table (plain), controls, truncation; ncu of tma_n32 / tma_n32_lp at Qwen3-8B B = 32.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c3.tar.xz | tar -xf -
L=/tmp/s17l3; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/s17l3.tgz --exclude='*.ncu-rep' -C /tmp s17l3; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=40 run test-gpu_controls ./x/one-test-gpu_controls --test-threads=1 --nocapture
TO=70 run test-gpu_truncation ./x/one-test-gpu_truncation --test-threads=1
TO=40 run test-gpu_f16 ./x/one-test-gpu_f16 --test-threads=1
TO=150 run test-gpu ./x/one-test-gpu --test-threads=1
TO=60 run memcheck-ctl /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/one-test-gpu_controls --test-threads=1
TO=90 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/one-test-gpu_truncation --test-threads=1
run warm ./x/base-bench --bench --batches 1,256 --runs 5 --out /tmp/warm
OUT=$L/full TO=130 run ab bash ../scripts/gpu-ab.sh 2 base=./x/base-bench one=./x/one-bench
FS_BENCH_ARGS="--controls --modes temps+logprobs,mask,top20 --batches 1,16,32,64,256" OUT=$L/ctl TO=90 run ab-ctl bash ../scripts/gpu-ab.sh 2 base=./x/base-bench one=./x/one-bench
FS_BENCH_ARGS="--truncation --batches 1,33,64" OUT=$L/tk TO=60 run ab-tk bash ../scripts/gpu-ab.sh 1 base=./x/base-bench one=./x/one-bench
NCU=/usr/local/cuda/bin/ncu
M=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum
ncu1() { local tag=$1 v=$2 k=$3; local s=$(date +%s); timeout 40 $NCU --metrics $M -k "regex:^$k\$" -s 3 -c 1 ./x/$v-bench --bench --controls --modes temps+logprobs --shape 4096,151936 --batches 32 --runs 5 --out /tmp/o-$v > $L/ncu-$tag.txt 2>&1; echo "ncu $tag rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; }
ncu1 plain-one one fused_sample_wgmma_tma_n32
ncu1 lp-one one fused_sample_wgmma_tma_n32_lp
save
cat $L/summary.txt; grep -E "test result" $L/test-*.log; grep "ERROR SUMMARY" $L/memcheck-*.log; tail -24 $L/ab.log | grep "^|"; grep "^| " $L/ab-ctl.log | head -50; grep "^| " $L/ab-tk.log
for f in $L/ncu-*.txt; do echo "== $f"; grep -E "gpu__time|sm__cycles|dram__|inst_executed" $f | head -6; done
