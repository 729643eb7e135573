#!/usr/bin/env bash
# Runs on a GPU machine with no Rust, from the repository root, after scripts/gpu-bundle.sh:
#   gpu-bundle/run.sh            tests, sanitizers, example, bench
#   gpu-bundle/run.sh tests      tests and sanitizers only
#   gpu-bundle/run.sh bench      example and bench only (FS_VARIANTS=1: also the variant sweep,
#                                FS_VARIANTS=only: the sweep alone; FS_ONLY=a,b: of those variants)
# Logs go to $OUT (or /tmp/flashsampling-gpu); a short summary table is printed last.
# The sanitizer step runs the GPU tests in FLASHSAMPLING_GPU_TEST_QUICK=1 mode and skips the three that take
# minutes under compute-sanitizer (fused_kernel_matches_the_cpu_backend, far_tail_rates_match_softmax_on_the_gpu,
# arrival_counters_are_zero_after_many_launches; benchmarks/2026-11-30-h200-sanitizers): about 1 minute for both
# tools. Run `tests` and `FS_NO_SANITIZER=1 ... bench` in separate calls if one 10-minute call is tight.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/bin"
out="${OUT:-/tmp/flashsampling-gpu}"; mkdir -p "$out"
what="${1:-all}"
export FLASHSAMPLING_REQUIRE_GPU=1
# NVLink multicast stays off on multi-GPU hosts (tensor-parallel tests, bench and example).
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
command -v ptxas >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
command -v ptxas >/dev/null && export FLASHSAMPLING_PTXAS="$(command -v ptxas)"
summary=()
note() { summary+=("$1"); }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
# The driver JIT-compiles the PTX once per machine (about two minutes for the sm_90a module on an H200) and
# caches it (~/.nv/ComputeCache); one small run first keeps that out of every test's and profiler's time.
if [ -x "$bin/sample" ]; then
  start=$(date +%s)
  "$bin/sample" --batch 1 > "$out/jit-warmup.log" 2>&1; rc=$?
  note "$(printf 'JIT warm-up (sample --batch 1)        rc=%d %3ss' "$rc" "$(( $(date +%s) - start ))")"
fi
for t in "$bin"/test-*; do
  [ "$what" = bench ] && break
  name="$(basename "$t")"
  start=$(date +%s)
  "$t" --test-threads=1 > "$out/$name.log" 2>&1; rc=$?
  res="$(grep -E '^test result:' "$out/$name.log" | tail -1)"
  note "$(printf '%-34s rc=%d %3ss  %s' "$name" "$rc" "$(( $(date +%s) - start ))" "$res")"
  grep -E "FAILED|panicked" "$out/$name.log" | head -5
done
[ "$what" = bench ] || grep -hE "^(fused vs CPU|variant |GPU chi-squared|ptxas fused|ptxas reduce)" "$out"/test-*.log | tee "$out/highlights.txt"

if [ "$what" = bench ]; then
  :
elif [ -n "${FS_NO_SANITIZER:-}" ]; then
  note "compute-sanitizer: skipped (FS_NO_SANITIZER)"
elif command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    FLASHSAMPLING_GPU_TEST_QUICK=1 compute-sanitizer --tool "$tool" "$bin/test-gpu" --test-threads=1 \
      --skip fused_kernel_matches --skip far_tail_rates --skip arrival_counters \
      > "$out/sanitizer-$tool.log" 2>&1; rc=$?
    note "$(printf 'compute-sanitizer %-9s rc=%d  %s | %s' "$tool" "$rc" \
      "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool.log" | tail -1)" \
      "$(grep -E '^test result:' "$out/sanitizer-$tool.log" | tail -1)")"
  done
  # The truncation step and its fallback (the tests that finish in seconds under memcheck).
  if [ -x "$bin/test-gpu_truncation" ]; then
    compute-sanitizer --tool memcheck "$bin/test-gpu_truncation" --test-threads=1 flat_rows rows_that_keep bad_truncation \
      > "$out/sanitizer-memcheck-truncation.log" 2>&1; rc=$?
    note "$(printf 'compute-sanitizer memcheck (truncation) rc=%d  %s | %s' "$rc" \
      "$(grep -E 'ERROR SUMMARY' "$out/sanitizer-memcheck-truncation.log" | tail -1)" \
      "$(grep -E '^test result:' "$out/sanitizer-memcheck-truncation.log" | tail -1)")"
  fi
else
  note "compute-sanitizer: not found"
fi

if [ "$what" = all ] || [ "$what" = bench ]; then
  for b in 1 64; do
    "$bin/sample" --batch "$b" > "$out/sample-b$b.log" 2>&1
    note "sample B=$b: $(grep -E 'fused sample on device' "$out/sample-b$b.log" | sed 's/.*: //')"
    note "sample B=$b: $(grep -E 'self-check' "$out/sample-b$b.log" | sed 's/.*: //')"
  done
  for bench in "$bin"/bench-*; do
    [ -x "$bench" ] || continue
    if [ -n "${FS_VARIANTS:-}" ]; then  # every fused-kernel variant at every B
      "$bench" --bench --variants ${FS_ONLY:+--only "$FS_ONLY"} --out "$out/variants" > "$out/bench-variants.log" 2>&1; rc=$?
      note "variant sweep rc=$rc:"; while read -r l; do note "$l"; done < <(grep -E "^\|" "$out/bench-variants.log")
    fi
    [ "${FS_VARIANTS:-}" = only ] && continue
    for bps in ${FS_BPS_SWEEP:-}; do  # tuning sweep: persistent blocks per SM
      FLASHSAMPLING_BLOCKS_PER_SM=$bps "$bench" --bench --quick --out "$out/bps$bps" > "$out/bench-bps$bps.log" 2>&1
      note "sweep blocks/SM=$bps:"; while read -r l; do note "  $l"; done < <(grep -E "^(qwen|llama)" "$out/bench-bps$bps.log")
    done
    "$bench" --bench > "$out/$(basename "$bench").log" 2>&1; rc=$?
    note "$(basename "$bench") rc=$rc"
    cp -r target/flashsampling-bench "$out/" 2>/dev/null
    tail -25 "$out/$(basename "$bench").log"
  done
fi
if [ -n "${FS_NCU:-}" ] && command -v ncu >/dev/null; then
  # Hardware counters of the fused kernel (clocks left alone), one launch per batch size.
  for b in ${FS_NCU}; do
    ncu --clock-control none --kernel-name regex:fused_sample --launch-skip 20 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      --section LaunchStats --section SchedulerStats \
      --metrics "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio" \
      "$bin/sample" --batch "$b" > "$out/ncu-b$b.txt" 2>&1
    note "ncu B=$b: $(grep -E 'DRAM Throughput|Memory Throughput' "$out/ncu-b$b.txt" | head -2 | tr -s ' ' | tr '\n' ';')"
  done
fi

echo
echo "==== summary ($(date -u +%FT%TZ)) ===="
printf '%s\n' "${summary[@]}"
