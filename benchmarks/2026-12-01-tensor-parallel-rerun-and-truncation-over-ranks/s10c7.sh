#!/usr/bin/env bash
# Session 10, call 7 (one H200, 7fa6dfc): which kernel should run top-k / top-p from B = 33: the truncation table with
# the rule's choice (tma_n64 at 33-64, tmat_n64 at 65-128, tmat_n64x2 beyond) against tma_n32 and tma_n16 forced
# (FLASHSAMPLING_FUSED_VARIANT; more batch tiles, fewer rows per lane's top lists: less spill), two rounds interleaved.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s10x2b.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-24s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
B=32,48,64,128,256
for r in 1 2; do
  run tk-rule-r$r ./x/bench-lm_head --bench --truncation --batches $B --runs 30 --out $L/tk-rule-r$r
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_wgmma_tma_n32 run tk-n32-r$r ./x/bench-lm_head --bench --truncation --batches $B --runs 30 --out $L/tk-n32-r$r
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_wgmma_tma_n16 run tk-n16-r$r ./x/bench-lm_head --bench --truncation --batches $B --runs 30 --out $L/tk-n16-r$r
done
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in tk-rule-r1 tk-n32-r1 tk-n16-r1 tk-rule-r2 tk-n32-r2 tk-n16-r2; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u -t'|' -k2,2 -k3,3n | cut -c1-100 | head -10; done
tar -czf $OUT/logs.tgz -C /tmp logs
