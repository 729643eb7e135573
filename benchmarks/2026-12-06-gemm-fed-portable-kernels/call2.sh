#!/usr/bin/env bash
# Session 39, call 2 (issue 55): the GEMM-fed portable kernels (cuBLAS writes the logits, gemm_logits_sample samples
# them with the one lane epilogue). bench-a: its first build (180 registers, one block a multiprocessor); bench-b and the
# tests: registers bounded for two blocks (128). Portable main table (the choice: GEMM-fed from 256 rows), sweeps of
# n64 / n128 / GEMM-fed, GPU suites with the choice and with the GEMM-fed kernel forced, the Hopper module's table.
set -u
C=${C:-gpurun/d2}
mkdir -p $C/bin; [ -x $C/bin/bench-b ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
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
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ|ERROR SUMMARY" $L/$label.log | cut -c1-400 | head -6
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $L/machine.txt
export FLASHSAMPLING_PORTABLE=1
run main-portable 80 $B/bench-b --bench --batches 1,16,64,256 --out $L/mp
SW="--bench --variants --shape 4096,151936 --shape 8192,128256 --runs 30"
run sweep-b 90 $B/bench-b $SW --only mma_tma_n64,mma_tma_n128,gemm_logits --batches 128,192,256,384,512 --out $L/swb
run sweep-a 50 $B/bench-a $SW --only gemm_logits --batches 128,256,512 --out $L/swa
run controls 50 $B/test-gpu_controls
FLASHSAMPLING_FUSED_VARIANT=gemm_logits_sample run gpu-gemm 90 $B/test-gpu
run gpu 90 $B/test-gpu
FLASHSAMPLING_FUSED_VARIANT=gemm_logits_sample run score-gemm 50 $B/test-gpu_score
FLASHSAMPLING_FUSED_VARIANT=gemm_logits_sample run trunc-gemm 60 $B/test-gpu_truncation
run lp 40 $B/bench-b --bench --controls --modes logprobs,temps+logprobs,top20 --shape 4096,151936 --shape 8192,128256 --batches 256 --out $L/lp
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
[ -n "$SAN" ] && run memcheck 60 $SAN --tool memcheck $B/test-gpu_controls large_portable
run graphs 40 $B/test-gpu_graphs
run f16 40 $B/test-gpu_f16
unset FLASHSAMPLING_PORTABLE
run main-hopper 60 $B/bench-b --bench --batches 1,16,64,256 --out $L/mh
for f in main-portable main-hopper; do echo "== $f"; grep -E "^(qwen|llama)" $L/$f.log | tail -8; done
echo "== sweep-b"; grep -E "^\| (d|q|l)" $L/sweep-b.log | head -12
echo "== sweep-a"; grep -E "^\| (d|q|l)" $L/sweep-a.log | head -8
echo "== lp"; grep -E "^\| (d|q|l)|^(qwen|llama|d4096|d8192)" $L/lp.log | head -6
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
