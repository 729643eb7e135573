#!/usr/bin/env bash
# Session 40, call 5: the final test changes of dee2854 (the caller's-stream test checks every attempt's tokens; the
# GEMM-fed control test's skip), `gpu` and `gpu_controls` with the portable module's choice and with the Hopper module.
C=${C:-gpurun/e5}
BUDGET=300
. scripts/device-call.sh
machine
export FLASHSAMPLING_PORTABLE=1
run gpu-portable 80 $B/test-gpu
run controls-portable 30 $B/test-gpu_controls
FLASHSAMPLING_FUSED_VARIANT=gemm_logits_sample run controls-gemm 30 $B/test-gpu_controls large_portable
unset FLASHSAMPLING_PORTABLE
run gpu-hopper 80 $B/test-gpu
run controls-hopper 30 $B/test-gpu_controls
finish
