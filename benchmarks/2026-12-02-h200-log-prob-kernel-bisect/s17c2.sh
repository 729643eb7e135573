#!/usr/bin/env bash
# Session 17, call 2 (one H200): where the log-probability kernel's time goes, by bisection. Builds: base = bb25d95;
# pass8 = base with passes of 8 columns in the N <= 32 log-probability / truncation kernels (the plain kernels' form);
# nomass = base without the log-mass updates (diagnostic: wrong log-probabilities; the shared-memory masses still
# loaded and stored); nosmem = nomass without the shared-memory masses. Same-call A/B of temps + log-probs, ncu.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c2.tar.xz | tar -xf -
L=/tmp/s17l2; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/s17l2.tgz --exclude='*.ncu-rep' -C /tmp s17l2; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
run warm ./x/base-bench --bench --batches 1,256 --runs 5 --out /tmp/warm
FS_BENCH_ARGS="--controls --modes temps+logprobs --batches 1,16,32" OUT=$L/ctl TO=150 run ab-ctl bash ../scripts/gpu-ab.sh 3 base=./x/base-bench pass8=./x/pass8-bench nomass=./x/nomass-bench nosmem=./x/nosmem-bench
FS_BENCH_ARGS="--truncation --batches 16,32" OUT=$L/tk TO=100 run ab-tk bash ../scripts/gpu-ab.sh 2 base=./x/base-bench pass8=./x/pass8-bench
NCU=/usr/local/cuda/bin/ncu
M=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.max,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum
ncu1() { local tag=$1 v=$2 k=$3; local s=$(date +%s); timeout 40 $NCU --metrics $M -k "regex:^$k\$" -s 3 -c 1 ./x/$v-bench --bench --controls --modes temps+logprobs --shape 4096,151936 --batches 32 --runs 5 --out /tmp/o-$v > $L/ncu-$tag.txt 2>&1; echo "ncu $tag rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; }
ncu1 plain-base base fused_sample_wgmma_tma_n32
ncu1 reduce-base base reduce_rows
for v in base pass8 nomass nosmem; do ncu1 lp-$v $v fused_sample_wgmma_tma_n32_lp; done
save
cat $L/summary.txt; grep "^| " $L/ab-ctl.log | head -40; grep "^| " $L/ab-tk.log | head -12
for f in $L/ncu-*.txt; do echo "== $f"; grep -E "^  [a-z_]+.*\(|gpu__time|sm__cycles|dram__|inst_executed" $f | head -30; done
