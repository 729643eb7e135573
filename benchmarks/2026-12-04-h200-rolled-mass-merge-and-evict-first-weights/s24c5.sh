#!/usr/bin/env bash
# Session 24, call 5: with the rolled mass merge (83c212d), which kernel is fastest for log-probabilities at
# B = 17-64? Forced tma_n32 / tma_n64 / tmat_n64 against the rule, temps + log-probs, top-20 and the mask.
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > $L/machine.txt
for v in tma_n32 tma_n64 tmat_n64; do printf '#!/bin/sh\nFLASHSAMPLING_FUSED_VARIANT=fused_sample_wgmma_%s exec "$(dirname "$0")/bench-new" "$@"\n' $v > b/$v.sh; chmod +x b/$v.sh; done
step "forced x2"; FS_BENCH_ARGS="--controls --modes temps+logprobs,top20,mask --batches 17,24,32,40,48,64 --shape 8192,128256 --shape 4096,151936" OUT=$OUT/abv timeout 400 b/ab.sh 2 rule=b/bench-new tma_n32=b/tma_n32.sh tma_n64=b/tma_n64.sh tmat_n64=b/tmat_n64.sh > $L/forced.log 2>&1; echo "rc=$?"; grep "^round" $L/forced.log | tr '\n' ' '; echo
grep -v "^round" $L/forced.log | grep -E "^\|" | head -80
step "done"
cd $OUT && tar -czf all.tgz logs abv 2>/dev/null; rm -rf logs abv; true
