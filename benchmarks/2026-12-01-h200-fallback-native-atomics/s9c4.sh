#!/usr/bin/env bash
# Session 9, call 4: the radix select's digit found by a warp scan (C) on top of native 32-bit atomics (A):
# tests + sanitizers on C; heavy rows C/A interleaved; the truncation table C/old (a7ac511) interleaved.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s9c4.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-200} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-30s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/gpu.txt
for t in gpu_truncation gpu_f16 gpu_controls; do run test-$t ./x/test-$t --test-threads=1; done
CS=/usr/local/cuda/bin/compute-sanitizer
TO=150 run memcheck-tk $CS --tool memcheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 flat_rows tied_and_short truncation_matches_the_cpu
TO=150 run racecheck-tied $CS --tool racecheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 tied_and_short
for r in 1 2; do
  run heavy-c-r$r ./x/bench-c --bench --truncation --heavy-rows --batches 1,16,64,256 --out $L/heavy-c-r$r
  run heavy-a-r$r ./x/bench-a --bench --truncation --heavy-rows --batches 1,16,64,256 --out $L/heavy-a-r$r
done
for r in 1 2; do
  run tk-c-r$r ./x/bench-c --bench --truncation --out $L/tk-c-r$r
  run tk-old-r$r ./x/bench-old --bench --truncation --out $L/tk-old-r$r
done
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in heavy-c-r1 heavy-a-r1 heavy-c-r2 heavy-a-r2 tk-c-r1 tk-old-r1 tk-c-r2 tk-old-r2; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u -t'|' -k2,2 -k3,3n | cut -c1-150 | head -16; done
for f in $L/test-*.log $L/memcheck-tk.log $L/racecheck-tied.log; do echo "== $(basename $f): $(grep -hE 'test result|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked" $f | head -5; done
tar -czf $OUT/logs.tgz -C /tmp logs
