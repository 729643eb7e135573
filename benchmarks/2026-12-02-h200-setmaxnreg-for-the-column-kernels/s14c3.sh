#!/usr/bin/env bash
# Session 14, call 3 (one H200). Builds: regs = 665e7c0; p4 = regs + the weight-as-A _tk kernels at N = 64 in passes of
# 4 columns (half the unrolled epilogue; LLVM then keeps the candidates in a 256-byte local array).
# p4's truncation suite; same-call A/B of truncating calls (2 rounds); every control at B = 1-256 on regs (the controls table).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c1.tar.xz | tar -xf -; xz -dc c3.tar.xz | tar -xf -
L=/tmp/logs3; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs3.tgz -C /tmp logs3; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=60 run test-gpu_truncation ./x/p4-test-gpu_truncation --test-threads=1
run warm ./x/regs-bench-lm_head --bench --batches 1,256 --runs 5 --out /tmp/warm
for r in 1 2; do for v in regs p4; do TO=40 run tk-$v-r$r ./x/$v-bench-lm_head --bench --truncation --batches 1,16,33,48,64,128,256 --runs 30 --out $L/tk-$v-r$r; done; done
TO=90 run controls-regs ./x/regs-bench-lm_head --bench --controls --out $L/controls-regs
python3 abtk.py $L regs p4 > $L/tk-ab.txt 2>&1
save
cat $L/summary.txt; cat $L/tk-ab.txt; grep "^| " $L/controls-regs.log | head -16
