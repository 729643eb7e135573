#!/usr/bin/env bash
# Session 13, call 4 (one H200). The kept build (lean = 0d2e3e1's kernels): the spread of LM-head shapes
# (issue 15 item 3, incl. a vocabulary not a multiple of 16), and the portable mma.sync path forced on the H200.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; rm -rf x; xz -dc c3b.tar.xz | tar -xf -
L=/tmp/logs4; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs4.tgz -C /tmp logs4; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=150 run shapes ./x/lean-bench-lm_head --bench --shape 2048,32000 --shape 3584,152064 --shape 5376,262144 --shape 16384,128256 --shape 4096,151930 --batches 1,16,64,256 --runs 30 --out $L/shapes
FLASHSAMPLING_PORTABLE=1 TO=120 run portable ./x/lean-bench-lm_head --bench --batches 1,16,64,256 --runs 30 --out $L/portable
save
cat $L/summary.txt; grep -E "^[a-z0-9,-]+ +[0-9]+ \|" $L/shapes.log | sort -u | head -40; grep -E "^[a-z0-9-]+ +[0-9]+ \|" $L/portable.log | sort -u
