#!/usr/bin/env bash
# Session 40, call 4 (issue 55): the build to land (row-per-warp GEMM-fed kernels, ROW_GROUPS = 2, two blocks a
# multiprocessor; alloc_for_in also sizes the GEMM-fed logits of the launch at b rows). GPU suites with the GEMM-fed
# kernel forced and with the choice (portable), memcheck, the graph test call 3 saw fail (alone and in one thread), the
# portable and Hopper main tables and the 129-row sweep in one call.
C=${C:-gpurun/e4} . scripts/device-call.sh
machine
export FLASHSAMPLING_PORTABLE=1 FLASHSAMPLING_FUSED_VARIANT=gemm_logits_sample
run gpu-gemm 100 $B/test-gpu
run graph-one-gemm 30 $B/test-gpu_graphs a_captured_call_into_caller_owned_outputs_replays_into_them --exact
run graphs1-gemm 40 $B/test-gpu_graphs --test-threads=1
run graphs-gemm 40 $B/test-gpu_graphs
run score-gemm 40 $B/test-gpu_score
run trunc-gemm 40 $B/test-gpu_truncation
run controls-gemm 30 $B/test-gpu_controls
run f16-gemm 30 $B/test-gpu_f16
[ -n "$SAN" ] && run mc-gemm 90 $SAN --tool memcheck --print-limit 4 $B/test-gpu_controls large_portable
unset FLASHSAMPLING_FUSED_VARIANT
run gpu 80 $B/test-gpu
run controls 30 $B/test-gpu_controls
run score 40 $B/test-gpu_score
run trunc 40 $B/test-gpu_truncation
run graphs 30 $B/test-gpu_graphs
run main-portable 40 $B/bench --bench --batches 1,16,64,128,160,256 --out $L/mp
SW="--bench --variants --shape 4096,151936 --shape 8192,128256 --runs 30 --only mma_tma_n64,mma_tma_n128,gemm_logits --batches 96,128,136,160,256"
run sweep 40 $B/bench $SW --out $L/sw
unset FLASHSAMPLING_PORTABLE
run main-hopper 40 $B/bench --bench --batches 1,16,64,128,256 --out $L/mh
for f in main-portable main-hopper; do echo "== $f"; grep -E "^(qwen|llama)" $L/$f.log | tail -12; done
echo "== sweep"; grep -E "^\| (d|q|l)" $L/sweep.log | head -10
finish
