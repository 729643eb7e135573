#!/usr/bin/env bash
# Session 43, call 2 (issue 52): the NaN / ±inf exact-path test reporting every mismatch (with the default
# path's value), then every exact-path kernel's duration (Qwen3-8B's head, B = 1 and 64; exact and exact+top20).
C=${C:-gpurun/f3}  # the carried folder: bins.tar.xz of the stripped binaries (not kept)
BUDGET=${BUDGET:-300}
. scripts/device-call.sh
machine
run naninf 60 $B/test-gpu_score the_exact_paths_take_nan
grep -E "values differ|GPU" $L/naninf.log | head -60
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size
for b in 1 64; do
  run k-$b 90 $NCU --clock-control none -k regex:"fallback_logits|gemm_logits|exact_mass|reduce_rows_exact|fallback_sample_exact" -c 16 --metrics $M $B/bench --bench --controls --modes exact,exact+top20 --shape 4096,151936 --batches $b --runs 2 --out $L/o-$b
done
for b in 1 64; do echo "== k-$b"; grep -E "^  [a-z_0-9]+.*\(|gpu__time_duration" $L/k-$b.log | paste - - | awk '{print $1, $2, $(NF)}' | head -20; done
finish
