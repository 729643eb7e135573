#!/usr/bin/env bash
# Session 12, call 3 (one H200). Builds: old = 4f1ba6e; final = pruned noise + quad floors + every consumer warp
# arriving on the turn barrier (the deadlock of calls 1-2). GPU suites + memcheck of final; same-call A/B (plain,
# 2 rounds); controls and truncation, old and final. Every log straight under $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; rm -rf x; xz -dc c3.tar.xz | tar -xf -
L=$OUT/logs3; mkdir -p $L
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" 2>&1 | while IFS= read -r l; do echo "$(( $(date +%s) - s ))s $l"; done > "$L/$name.log"; local rc=${PIPESTATUS[0]}; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
mkdir -p /tmp/nccl; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH
TO=60 run test-gpu_truncation ./x/final-test-gpu_truncation --test-threads=1 --nocapture
for t in gpu_controls gpu_f16; do TO=40 run test-$t ./x/final-test-$t --test-threads=1; done
FLASHSAMPLING_REQUIRE_GPUS=1 TO=40 run test-tp ./x/final-test-tp --test-threads=1
TO=150 run test-gpu ./x/final-test-gpu --test-threads=1 --nocapture
TO=40 run memcheck-ctl /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/final-test-gpu_controls --test-threads=1
TO=40 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/final-test-gpu_truncation --test-threads=1 flat_rows tied_and_short rows_that_keep
run warm ./x/old-bench-lm_head --bench --batches 1,256 --runs 5 --out /tmp/warm
OUT=$L TO=130 run ab bash ./ab.sh 2 old=./x/old-bench-lm_head final=./x/final-bench-lm_head
for v in final old; do TO=30 run ctl-$v ./x/$v-bench-lm_head --bench --controls --modes temps+logprobs,top20 --batches 64,128,256,512 --out $L/ctl-$v; done
for v in final old; do TO=35 run tk-$v ./x/$v-bench-lm_head --bench --truncation --batches 64,128,256,512 --runs 30 --out $L/tk-$v; done
