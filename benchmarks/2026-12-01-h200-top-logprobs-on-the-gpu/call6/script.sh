#!/usr/bin/env bash
# Session 8, call 6: truncation at B = 33-64 with tma_n32 (two 32-row batch tiles per range, lists that do not spill) against the rule's tma_n64; the final kernels (b8d = 8457760).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cd gpu-lite; xz -dc b8d.tar.xz | tar -xf -
L=/tmp/logs; mkdir -p $L
B="--batches 33,48,64"
for r in 1 2; do
  ./x/bench-lm_head --bench --truncation $B --out $L/tk-rule-r$r > $L/tk-rule-r$r.log 2>&1
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_wgmma_tma_n32 ./x/bench-lm_head --bench --truncation $B --out $L/tk-n32-r$r > $L/tk-n32-r$r.log 2>&1
done
./x/bench-lm_head --bench --controls --modes top20 $B --out $L/top20-rule > $L/top20-rule.log 2>&1
FLASHSAMPLING_FUSED_VARIANT=fused_sample_wgmma_tma_n32 ./x/bench-lm_head --bench --controls --modes top20 $B --out $L/top20-n32 > $L/top20-n32.log 2>&1
for f in tk-rule-r1 tk-n32-r1 tk-rule-r2 tk-n32-r2 top20-rule top20-n32; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u -t'|' -k2,2 -k3,3n; done
tar -czf $OUT/logs.tgz -C /tmp logs
