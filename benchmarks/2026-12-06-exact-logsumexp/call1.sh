#!/usr/bin/env bash
# Session 42, the last device call (little device time left): the exact path's own tests only.
C=${C:-gpurun/e1}
BUDGET=${BUDGET:-150}
. scripts/device-call.sh
machine
run exact 110 $B/test-gpu_exact
run tp-exact 90 $B/test-tp exact_log_sum_exps
finish
