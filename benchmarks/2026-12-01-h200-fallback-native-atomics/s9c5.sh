#!/usr/bin/env bash
# Session 9, call 5: the committed build (c78a2ec): tests, memcheck on the fallback, the truncation table
# (two rounds) and heavy rows, for BENCHMARKS.md.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s9c5.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-200} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-30s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/gpu.txt
for t in gpu_truncation gpu_f16 gpu_controls; do run test-$t ./x/test-$t --test-threads=1; done
TO=150 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 flat_rows tied_and_short truncation_matches_the_cpu
for r in 1 2; do run tk-r$r ./x/bench --bench --truncation --out $L/tk-r$r; done
run heavy ./x/bench --bench --truncation --heavy-rows --batches 1,16,64,256 --out $L/heavy
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in tk-r1 tk-r2 heavy; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u -t'|' -k2,2 -k3,3n | cut -c1-150 | head -16; done
for f in $L/test-*.log $L/memcheck-tk.log; do echo "== $(basename $f): $(grep -hE 'test result|ERROR SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked" $f | head -5; done
tar -czf $OUT/logs.tgz -C /tmp logs
