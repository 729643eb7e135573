#!/usr/bin/env bash
# Issue 55, call 2: where n128's time goes at B = 128-256 (H100/H200, portable module). Three builds of the same
# source (b723a21): "base" (the shipped PTX), "noepi" (NB = 8 consumers skip the epilogue, the accumulators kept
# live: MMAs and pipeline only) and "nomma" (NB = 8 consumers skip the MMAs: pipeline and epilogue only) -- ablations,
# not committed; their samples are wrong by construction. Same-call sweeps base, noepi, nomma, base, noepi, nomma.
set -u
C=${C:-gpurun/c2}
mkdir -p $C/bin; [ -x $C/bin/bench ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 FLASHSAMPLING_PORTABLE=1
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $L/machine.txt
SWEEP="--bench --variants --only mma_tma_n64t,mma_tma_n128 --shape 4096,151936 --shape 8192,128256 --batches 128,256 --runs 30"
for round in 1 2; do
  for b in bench bench-noepi bench-nomma; do
    [ $(el) -gt ${BUDGET:-400} ] && break
    timeout 120 $B/$b $SWEEP --out $L/$b-$round > $L/$b-$round.log 2>&1; echo "$b round $round rc=$? ($(el)s)"
  done
done
for f in $L/bench*-1.log; do echo "== $(basename $f)"; grep -E "^\| d" $f; done
for f in $L/bench*-2.log; do echo "== $(basename $f)"; grep -E "^\| d" $f; done
echo "==== $(el)s"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
