#!/usr/bin/env bash
# Session 41, call 3 (issue 55): the main table's new /read column (ours and a read-only stream of the same
# weight bytes in alternate runs, each after an untimed read of 4 x L2 of other bytes), the portable table,
# the same with fa616ba's bench (ours timed alone, back to back: what the pairing and the flush change in `ours ms`),
# the Hopper table.
C=${C:-gpurun/e9}
BUDGET=130
. scripts/device-call.sh
machine
export FLASHSAMPLING_PORTABLE=1
run main-portable 60 $B/bench --bench --batches 1,16,64,256 --out $L/mp
run old-portable 50 $B/bench-old --bench --batches 1,16,64,256 --out $L/op
unset FLASHSAMPLING_PORTABLE
[ $(el) -lt 80 ] && run main-hopper 40 $B/bench --bench --batches 1,16,64,256 --out $L/mh
for f in main-portable old-portable main-hopper; do echo "== $f"; grep -h "floor bandwidth" $L/$f.log | tail -1 | cut -c1-60; grep -B1 -E "^(qwen|llama)" $L/$f.log | tail -9; done
finish
