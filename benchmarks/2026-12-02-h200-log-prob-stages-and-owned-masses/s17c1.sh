#!/usr/bin/env bash
# Session 17, call 1 (one H200). Builds: base = bb25d95 (committed); stages = base with the plain tma_n32 / tma_n64
# at the log-probability kernels' depth (9 / 6 stages: what fewer stages cost the plain call); own = the weight-as-A
# lanes keep the masses of the columns they own in registers (tile masses merged over the column's 8 lanes), no
# shared-memory masses, stages_lp = stages (10 / 8 / 6). GPU suites + memcheck of own; same-call A/Bs; ncu.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c1.tar.xz | tar -xf -
L=/tmp/s17l1; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/s17l1.tgz --exclude='*.ncu-rep' -C /tmp s17l1; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=40 run test-gpu_controls ./x/own-test-gpu_controls --test-threads=1 --nocapture
TO=70 run test-gpu_truncation ./x/own-test-gpu_truncation --test-threads=1
TO=40 run test-gpu_f16 ./x/own-test-gpu_f16 --test-threads=1
TO=150 run test-gpu ./x/own-test-gpu --test-threads=1
TO=60 run memcheck-ctl /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/own-test-gpu_controls --test-threads=1
run warm ./x/base-bench --bench --batches 1,256 --runs 5 --out /tmp/warm
FS_BENCH_ARGS="--controls --modes temps+logprobs,mask,top20 --batches 1,16,32,64,256" OUT=$L/ctl TO=200 run ab-ctl bash ../scripts/gpu-ab.sh 2 base=./x/base-bench stages=./x/stages-bench own=./x/own-bench
FS_BENCH_ARGS="--truncation --batches 1,16,33,64,256" OUT=$L/tk TO=120 run ab-tk bash ../scripts/gpu-ab.sh 2 base=./x/base-bench own=./x/own-bench
NCU=/usr/local/cuda/bin/ncu
for v in base own; do for b in 32 64; do s=$(date +%s); timeout 40 $NCU --metrics gpu__time_duration.sum,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed -k "regex:^fused_sample_wgmma_tma_n(32|64)_lp\$" -s 3 -c 1 ./x/$v-bench --bench --controls --modes temps+logprobs --shape 4096,151936 --batches $b --runs 5 --out /tmp/o-$v > $L/ncu-lp-$v-b$b.txt 2>&1; echo "ncu lp $v b$b rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; done; done
save

cat $L/summary.txt; grep -E "test result" $L/test-*.log; grep "ERROR SUMMARY" $L/memcheck-ctl.log; grep "^| " $L/ab-ctl.log | head -70; grep "^| " $L/ab-tk.log | head -30
for f in $L/ncu-*.txt; do echo "== $f"; grep -E "gpu__time|inst_executed|dram__" $f | head -3; done
