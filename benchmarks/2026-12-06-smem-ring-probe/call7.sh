#!/usr/bin/env bash
# Issue 55, call 7: the landing build (column floors in the mma.sync lane epilogues + the caller's-stream test's
# producer spinning on %clock64): gpu three times with the portable module and the library's choice, once with the
# Hopper module; the caller's-stream test alone four times; gpu_controls.
set -u
C=${C:-gpurun/c7}
mkdir -p $C/bin; [ -x $C/bin/test-gpu ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-300} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-300} ] && to=$(( ${BUDGET:-300} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $L/machine.txt
run gpu-hopper 80 $B/test-gpu
export FLASHSAMPLING_PORTABLE=1
for i in 1 2 3 4; do run stream-$i 20 $B/test-gpu the_callers_stream_orders_a_call_after_its_producer_with_no_host_sync; done
run controls 30 $B/test-gpu_controls
for i in 1 2 3; do run gpu-$i 80 $B/test-gpu; done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
