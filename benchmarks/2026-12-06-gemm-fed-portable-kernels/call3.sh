#!/usr/bin/env bash
# Session 39, call 3 (issue 55): the GEMM-fed portable kernels chosen from 129 rows. Two GEMM-fed variants in one
# build for a same-call A/B: gemm_logits_sample (32 rows a warp, registers for 2 blocks a multiprocessor) and the
# experiment gemm_logits_sample_n32 (16 rows a warp, 3 blocks); n64 and n128 beside them; the portable main table;
# GPU suites with the choice; memcheck of the new test; the Hopper module's table for the record.
set -u
C=${C:-gpurun/d3}
mkdir -p $C/bin; [ -x $C/bin/bench ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-400} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-400} ] && to=$(( ${BUDGET:-400} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ|ERROR SUMMARY|== CPU" $L/$label.log | cut -c1-400 | head -6
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $L/machine.txt
export FLASHSAMPLING_PORTABLE=1
SW="--bench --variants --shape 4096,151936 --shape 8192,128256 --runs 30 --only mma_tma_n64,mma_tma_n128,gemm_logits --batches 128,136,160,192,256,512"
run sweep1 60 $B/bench $SW --out $L/sw1
run main-portable 60 $B/bench --bench --batches 1,16,64,128,160,256 --out $L/mp
run sweep2 60 $B/bench $SW --out $L/sw2
run controls 50 $B/test-gpu_controls
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
[ -n "$SAN" ] && run memcheck 60 $SAN --tool memcheck $B/test-gpu_controls large_portable
run lp 40 $B/bench --bench --controls --modes logprobs,top20 --shape 4096,151936 --shape 8192,128256 --batches 160,256 --out $L/lp
run gpu 90 $B/test-gpu
run score 40 $B/test-gpu_score
run trunc 40 $B/test-gpu_truncation
unset FLASHSAMPLING_PORTABLE
run main-hopper 50 $B/bench --bench --batches 1,16,64,128,256 --out $L/mh
for f in main-portable main-hopper; do echo "== $f"; grep -E "^(qwen|llama)" $L/$f.log | tail -12; done
for f in sweep1 sweep2; do echo "== $f"; grep -E "^\| (d|q|l)" $L/$f.log | head -12; done
echo "== lp"; grep -E "^\| (d|q|l)" $L/lp.log | head -4
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
