#!/usr/bin/env bash
# Session 17, call 5 (one H200): the committed build's per-row temperatures alone, log-probabilities alone and both,
# against the plain call (T = 1), 2 rounds: which of the two costs.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cd .gl; rm -rf x; xz -dc c4.tar.xz | tar -xf -
L=/tmp/s17l5; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
./x/base-bench --bench --batches 1,256 --runs 5 --out /tmp/warm > $L/warm.log 2>&1
FS_BENCH_ARGS="--controls --modes temps,logprobs,temps+logprobs --batches 1,16,32,64" OUT=$L/ctl timeout 150 bash ../scripts/gpu-ab.sh 2 base=./x/base-bench > $L/ab-ctl.log 2>&1
tar -czf $OUT/s17l5.tgz -C /tmp s17l5
grep "^| " $L/ab-ctl.log
