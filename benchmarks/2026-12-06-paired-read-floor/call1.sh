#!/usr/bin/env bash
# Session 41, call 1 (issue 55): HEAD fa616ba (7bf2aea's host change; PTX as shipped) on whatever machine comes,
# an H200 hoped for. The portable and Hopper main tables first (issue 55's bars), then every GPU suite with the
# portable choice, and tp (ranks on one GPU) with the portable choice and with the GEMM-fed kernel forced.
C=${C:-gpurun/e7}
BUDGET=540
. scripts/device-call.sh
machine
export FLASHSAMPLING_PORTABLE=1
run main-portable 60 $B/bench --bench --batches 1,16,64,128,160,256 --out $L/mp
unset FLASHSAMPLING_PORTABLE
run main-hopper 50 $B/bench --bench --batches 1,16,64,128,256 --out $L/mh
export FLASHSAMPLING_PORTABLE=1
run gpu 90 $B/test-gpu
run controls 40 $B/test-gpu_controls
run score 40 $B/test-gpu_score
run trunc 40 $B/test-gpu_truncation
run graphs 30 $B/test-gpu_graphs
run f16 30 $B/test-gpu_f16
run tp-portable 40 $B/test-tp
FLASHSAMPLING_FUSED_VARIANT=gemm_logits_sample run tp-gemm 40 $B/test-tp
for f in main-portable main-hopper; do echo "== $f"; grep -B2 -E "^(qwen|llama)" $L/$f.log | tail -13; done
finish
