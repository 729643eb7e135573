#!/usr/bin/env bash
# Session 14, call 5 (one H200): the committed kernels (regs = 665e7c0's, unchanged since): the tensor-parallel tests
# with one GPU, and truncating calls on heavy-tailed rows (the exact fallback) at B = 1, 16, 64.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c1.tar.xz | tar -xf -; xz -dc c5.tar.xz | tar -xf -
L=/tmp/logs5; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs5.tgz -C /tmp logs5; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
mkdir -p /tmp/nccl; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH
FLASHSAMPLING_REQUIRE_GPUS=1 TO=40 run test-tp ./x/regs-test-tp --test-threads=1
TO=60 run tk-heavy ./x/regs-bench-lm_head --bench --truncation --heavy-rows --batches 1,16,64 --runs 10 --out $L/tk-heavy
save
cat $L/summary.txt; grep -h "test result" $L/test-tp.log; grep "^| " $L/tk-heavy.log | head -8
