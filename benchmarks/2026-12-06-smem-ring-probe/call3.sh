#!/usr/bin/env bash
# Issue 55, call 3: tma_mma_n128 deferring its second 8 columns' epilogue into the next tile's stages (working tree
# on b723a21, built PTX). GPU suites with the portable module, n128 forced and the library's choice; memcheck on two
# gpu tests with n128 forced; same-call A/B old (shipped PTX) / new, new, old on n128 at 96-256 rows; main table.
set -u
C=${C:-gpurun/c3}
mkdir -p $C/bin; [ -x $C/bin/bench-new ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 FLASHSAMPLING_PORTABLE=1
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-500} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-500} ] && to=$(( ${BUDGET:-500} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:|ERROR SUMMARY' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $L/machine.txt
SWEEP="--bench --variants --only mma_tma_n128 --shape 4096,151936 --shape 8192,128256 --batches 96,128,192,256 --runs 30"
run ab-old1 60 $B/bench-old $SWEEP --out $L/ab-old1
run ab-new1 60 $B/bench-new $SWEEP --out $L/ab-new1
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run gpu-n128 90 $B/test-gpu
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run controls-n128 40 $B/test-gpu_controls
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run score-n128 50 $B/test-gpu_score
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run graphs-n128 40 $B/test-gpu_graphs
run gpu-choice 90 $B/test-gpu
run ab-new2 60 $B/bench-new $SWEEP --out $L/ab-new2
run ab-old2 60 $B/bench-old $SWEEP --out $L/ab-old2
run main-new 40 $B/bench-new --bench --batches 1,16,64,256 --out $L/main-new
CS=$(ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$CS" ] && FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run memcheck-n128 120 $CS --tool memcheck --error-exitcode 1 $B/test-gpu --test-threads 1 fused_kernel_matches_the_cpu_backend every_fused_variant_draws_the_same_samples stage_balanced_ranges_draw_what_whole_tiles_draw_bit_for_bit
for f in ab-old1 ab-new1 ab-new2 ab-old2; do echo "== $f"; grep -E "^\| d" $L/$f.log; done
grep -E "^(config|qwen|llama)" $L/main-new.log | head -8
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
