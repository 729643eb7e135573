#!/usr/bin/env bash
# Session 17, call 4 (one H200): the bisection's next step. Diagnostic builds of the _lp entry (wrong log-probabilities):
# nosmem = call 2's (no mass work, passes of 4, 9 stages); nosmem8 = nosmem with passes of 8 (the plain epilogue's form);
# bare = nosmem8 with no lane state in shared memory and 10 stages (the plain kernel's depth). Against base's plain.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c4.tar.xz | tar -xf -
L=/tmp/s17l4; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/s17l4.tgz --exclude='*.ncu-rep' -C /tmp s17l4; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
run warm ./x/base-bench --bench --batches 1,256 --runs 5 --out /tmp/warm
FS_BENCH_ARGS="--controls --modes temps+logprobs --batches 16,32" OUT=$L/ctl TO=150 run ab-ctl bash ../scripts/gpu-ab.sh 2 base=./x/base-bench nosmem=./x/nosmem-bench nosmem8=./x/nosmem8-bench bare=./x/bare-bench
NCU=/usr/local/cuda/bin/ncu
M=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum
ncu1() { local tag=$1 v=$2 k=$3; local s=$(date +%s); timeout 40 $NCU --metrics $M -k "regex:^$k\$" -s 3 -c 1 ./x/$v-bench --bench --controls --modes temps+logprobs --shape 4096,151936 --batches 32 --runs 5 --out /tmp/o-$v > $L/ncu-$tag.txt 2>&1; echo "ncu $tag rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; }
ncu1 plain-base base fused_sample_wgmma_tma_n32
for v in nosmem8 bare; do ncu1 lp-$v $v fused_sample_wgmma_tma_n32_lp; done
save
cat $L/summary.txt; grep "^| " $L/ab-ctl.log | head -20
for f in $L/ncu-*.txt; do echo "== $f"; grep -E "gpu__time|sm__cycles|dram__|inst_executed" $f | head -6; done
