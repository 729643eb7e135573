#!/usr/bin/env bash
# Session 11, call 5 (one H200). Builds: old = e9f6ce5; new = 62b4092 (the step reduces its rows and copies its listed
# rows); lp = accfff2 (new + the selection before the sort + no token logits for calls without log-probabilities);
# walk = lp + the walk by warp 0, 32 counts at a time. GPU suites and sanitizers of walk (and lp's truncation suite);
# same-call A/B of the four.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; rm -rf x; xz -dc c5.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs5; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
mkdir -p /tmp/nccl; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH
run lp-test-gpu_truncation ./x/lp-test-gpu_truncation --test-threads=1
for t in gpu_truncation gpu_controls gpu_f16; do run test-$t ./x/walk-test-$t --test-threads=1; done
FLASHSAMPLING_REQUIRE_GPUS=1 run test-tp ./x/walk-test-tp --test-threads=1
TO=150 run test-gpu ./x/walk-test-gpu --test-threads=1
TO=60 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/walk-test-gpu_truncation --test-threads=1 flat_rows tied_and_short truncation_matches_the_cpu
TO=60 run racecheck-tied /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 9 ./x/walk-test-gpu_truncation --test-threads=1 tied_and_short
TO=60 run racecheck-exact /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 9 ./x/walk-test-gpu_truncation --test-threads=1 truncation_matches_the_cpu
run warm ./x/old-bench-lm_head --bench --truncation --batches 1 --runs 5 --out $L/warm
for r in 1 2 3; do for v in old new lp walk; do
  TO=60 run tk-$v-r$r ./x/$v-bench-lm_head --bench --truncation --batches 1,16,64,256 --runs 30 --out $L/tk-$v-r$r
done; done
for v in old walk; do run heavy-$v ./x/$v-bench-lm_head --bench --truncation --heavy-rows --batches 1,16,64 --out $L/heavy-$v; done
for v in old walk; do run ctl-$v ./x/$v-bench-lm_head --bench --controls --modes temps+logprobs,top20 --batches 1,32,64 --out $L/ctl-$v; done
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in $L/*test-*.log $L/memcheck-*.log $L/racecheck-*.log; do echo "== $(basename $f): $(grep -hE 'test result|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked|differ from the CPU, " $f | head -3; done
python3 abtk.py $L old new lp walk
for f in heavy-old heavy-walk ctl-old ctl-walk; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | cut -d'|' -f2,3,5,6,7,9 | head -6; done
tar -czf $OUT/logs5.tgz -C /tmp logs5
