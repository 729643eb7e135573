#!/usr/bin/env bash
# The new build with the truncation step forced to one block per multiprocessor at every B.
FLASHSAMPLING_TRUNCATE_STEP=alone exec "$(dirname "$0")/x/new-bench-lm_head" "$@"
