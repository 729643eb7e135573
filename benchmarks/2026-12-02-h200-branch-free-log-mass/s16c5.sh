#!/usr/bin/env bash
# Session 16, call 5 (one H200). Builds: raw = the committed kernels (2dd0472); bf = raw + a branch-free
# LogMass::update4 (selects instead of the early return when the largest is -inf; bit-identical, CPU-tested);
# only the _lp and _tk kernels' PTX changes. GPU suites of bf; same-call A/Bs: controls (2 rounds), truncation (1).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c5.tar.xz | tar -xf -
L=/tmp/logs5; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs5.tgz -C /tmp logs5; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=40 run test-gpu_controls ./x/bf-test-gpu_controls --test-threads=1
TO=60 run test-gpu_truncation ./x/bf-test-gpu_truncation --test-threads=1
TO=40 run test-gpu_f16 ./x/bf-test-gpu_f16 --test-threads=1
run warm ./x/raw-bench-lm_head --bench --batches 1 --runs 5 --out /tmp/warm
FS_BENCH_ARGS="--controls --modes temps+logprobs,top20 --batches 1,16,32,64" OUT=$L/ctl TO=130 run ab-ctl bash ../scripts/gpu-ab.sh 2 raw=./x/raw-bench-lm_head bf=./x/bf-bench-lm_head
FS_BENCH_ARGS="--truncation --batches 1,16,64 --runs 30" OUT=$L/tk TO=70 run ab-tk bash ../scripts/gpu-ab.sh 1 raw=./x/raw-bench-lm_head bf=./x/bf-bench-lm_head
save
cat $L/summary.txt; grep -h "test result" $L/test-*.log; grep "^| " $L/ab-ctl.log | grep -v "| plain |" | head -20; grep "^| " $L/ab-tk.log | head -10
