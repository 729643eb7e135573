#!/usr/bin/env bash
# Session 40, call 3 (issue 55): the row-per-warp GEMM-fed kernels (ROW_GROUPS = 2, two blocks a multiprocessor).
# Call 2 saw CUDA_ERROR_ILLEGAL_ADDRESS in tests/gpu.rs with the GEMM-fed kernel forced: each test alone, forced, then
# memcheck of the first that fails; then the portable main table, the log-probability bench, GPU suites.
set -u
C=${C:-gpurun/e3}
mkdir -p $C/bin; [ -x $C/bin/bench ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-500} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-500} ] && to=$(( ${BUDGET:-500} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ|ERROR SUMMARY|Invalid|at 0x|by thread" $L/$label.log | cut -c1-300 | head -8
  return $rc
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/machine.txt
export FLASHSAMPLING_PORTABLE=1
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
export FLASHSAMPLING_FUSED_VARIANT=gemm_logits_sample
bad=()
for t in $(cat $C/tests.txt); do
  timeout 60 $B/test-gpu $t --exact > $L/one-$t.log 2>&1 || { bad+=($t); echo "FAIL $t"; grep -E "panicked|ILLEGAL" $L/one-$t.log | head -2; }
done
echo "failing alone: ${bad[*]:-none} ($(el)s)"
n=0; for t in "${bad[@]}"; do [ $n -lt 2 ] && [ -n "$SAN" ] && run mc-$t 90 $SAN --tool memcheck --print-limit 4 $B/test-gpu $t --exact; n=$((n+1)); done
run controls-gemm 50 $B/test-gpu_controls
run graphs-gemm 40 $B/test-gpu_graphs
run f16-gemm 40 $B/test-gpu_f16
unset FLASHSAMPLING_FUSED_VARIANT
run main-portable 40 $B/bench --bench --batches 1,16,64,128,160,256 --out $L/mp
run lp 40 $B/bench --bench --controls --modes logprobs,top20 --shape 4096,151936 --shape 8192,128256 --batches 160,256 --out $L/lp
run gpu 80 $B/test-gpu
run controls 50 $B/test-gpu_controls
echo "== mp"; grep -E "^(qwen|llama)" $L/main-portable.log | tail -12
echo "== lp"; grep -E "^\| (d|q|l)" $L/lp.log | head -4
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
