#!/usr/bin/env bash
# Session 17, call 6 (one H200): log-probabilities with reduce_rows launched as a dependent launch (default) and the
# ordinary way (FLASHSAMPLING_PDL=0), committed build, 2 rounds.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cd .gl; rm -rf x; xz -dc c4.tar.xz | tar -xf -
printf '#!/bin/sh\nFLASHSAMPLING_PDL=0 exec "$(dirname "$0")/base-bench" "$@"\n' > x/nopdl-bench; chmod +x x/nopdl-bench
L=/tmp/s17l6; rm -rf $L; mkdir -p $L
./x/base-bench --bench --batches 1,256 --runs 5 --out /tmp/warm > $L/warm.log 2>&1
FS_BENCH_ARGS="--controls --modes logprobs --batches 16,32,64" OUT=$L/ctl timeout 120 bash ../scripts/gpu-ab.sh 2 pdl=./x/base-bench nopdl=./x/nopdl-bench > $L/ab-ctl.log 2>&1
tar -czf $OUT/s17l6.tgz -C /tmp s17l6
grep "^| " $L/ab-ctl.log
