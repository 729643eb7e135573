#!/usr/bin/env bash
# Session 13, call 5 (one H200). The kept build (lean = 0d2e3e1's kernels): the full per-request controls table
# (every mode, B = 1-256, both configurations) and the truncation table (B = 1, 16, 64, 256, two rounds).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; rm -rf x; xz -dc c3b.tar.xz | tar -xf -
L=/tmp/logs5; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs5.tgz -C /tmp logs5; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
TO=200 run controls ./x/lean-bench-lm_head --bench --controls --out $L/controls
for r in 1 2; do TO=60 run tk-lean-r$r ./x/lean-bench-lm_head --bench --truncation --batches 1,16,64,256 --runs 30 --out $L/tk-lean-r$r; done
save
cat $L/summary.txt; grep -E "^\| (qwen|llama)" $L/controls.log | sort -u; cat $L/tk-lean-r1/truncation.csv $L/tk-lean-r2/truncation.csv
