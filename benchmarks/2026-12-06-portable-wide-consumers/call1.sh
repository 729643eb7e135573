#!/usr/bin/env bash
# Issue 55, call 1: the portable TMA family's NB = 8 variants (one warp: 32 vocab rows x 64 batch rows, the columns'
# epilogue in two passes of selects): n64t (64-row tiles, the two consumers taking turns) and n128 (128-row tiles,
# the consumers splitting them). Correctness forced (gpu, gpu_controls suites with FLASHSAMPLING_FUSED_VARIANT),
# then the variant sweep beside n16/n32/n64 and the sm_90a kernels, and the main table (cuBLAS GEMM, the floor).
set -u
cd "$(dirname "$0")"
mkdir -p bin; xz -dc bins.tar.xz | tar -xf - -C bin
B=$PWD/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-570} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-570} ] && to=$(( ${BUDGET:-570} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd .. ; cd .. # repository root: tests read it
S="--shape 4096,151936 --shape 8192,128256"
run variants 200 $B/bench --bench --variants --only mma_tma,wgmma_tma $S --batches 1,16,48,64,128,192,256 --runs 30 --out $L/variants
for v in n64t n128; do
  FLASHSAMPLING_PORTABLE=1 FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run gpu-$v 100 $B/test-gpu --test-threads=1
  FLASHSAMPLING_PORTABLE=1 FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run ctrl-$v 80 $B/test-gpu_controls --test-threads=1
done
run main 100 $B/bench --bench --quick $S --runs 30 --out $L/main
grep -E "^\||HBM floor" $L/variants.log | head -80
grep -E "^\|" $L/main.log | head -12
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
