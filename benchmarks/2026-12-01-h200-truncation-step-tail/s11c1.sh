#!/usr/bin/env bash
# Session 11, call 1 (one H200). Builds: old = e9f6ce5; new = 62b4092 (the truncation step reduces its rows and
# copies its listed rows' hidden states: no reduce_rows, no fallback_gather after a one-GPU truncation launch);
# sel = new + the selection of the largest collected entries before the sort. GPU suites of new and sel,
# sanitizers of sel, same-call A/B of the three.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc c1.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
mkdir -p /tmp/nccl; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH
for v in new sel; do
  for t in gpu_truncation gpu_controls gpu_f16; do run $v-test-$t ./x/$v-test-$t --test-threads=1; done
  FLASHSAMPLING_REQUIRE_GPUS=1 run $v-test-tp ./x/$v-test-tp --test-threads=1
done
TO=60 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/sel-test-gpu_truncation --test-threads=1 flat_rows tied_and_short truncation_matches_the_cpu
TO=60 run racecheck-tied /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 9 ./x/sel-test-gpu_truncation --test-threads=1 tied_and_short
run warm ./x/old-bench-lm_head --bench --truncation --batches 1 --runs 5 --out $L/warm
for r in 1 2; do for v in old new sel; do
  run tk-$v-r$r ./x/$v-bench-lm_head --bench --truncation --batches 1,16,64,256 --runs 30 --out $L/tk-$v-r$r
done; done
for v in old new sel; do run heavy-$v ./x/$v-bench-lm_head --bench --truncation --heavy-rows --batches 1,16,64 --out $L/heavy-$v; done
for v in old new; do run ctl-$v ./x/$v-bench-lm_head --bench --controls --modes temps+logprobs,top20 --batches 1,32,64 --out $L/ctl-$v; done
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in $L/*test-*.log $L/memcheck-*.log $L/racecheck-*.log; do echo "== $(basename $f): $(grep -hE 'test result|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked|MISMATCH|differ from" $f | head -4; done
for f in tk-old-r1 tk-new-r1 tk-sel-r1 tk-old-r2 tk-new-r2 tk-sel-r2 heavy-old heavy-new heavy-sel ctl-old ctl-new; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | cut -d'|' -f2,3,5,6,7,9,10 | head -8; done
tar -czf $OUT/logs.tgz -C /tmp logs
