#!/usr/bin/env bash
# Session 10, call 1 (two H200s): the tensor-parallel tests, the two-process example (and its failing-rank run),
# the TP bench and the serving-controls suite on 6697fb9 (first TP run since session 7's kernel changes).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 FLASHSAMPLING_REQUIRE_GPUS=2 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s10x2a.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-240} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-20s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
nvidia-smi topo -m >> $L/machine.txt 2>&1
ls -la /usr/lib/x86_64-linux-gnu/libnccl* >> $L/machine.txt 2>&1
run test-tp ./x/test-tp --test-threads=1
run tp_ranks ./x/tp_ranks
TO=60 run tp_ranks-fail ./x/tp_ranks --fail-rank 1
run bench-tp ./x/bench-tp --bench --runs 30 --out $L/bench-tp
TO=150 run test-gpu_controls ./x/test-gpu_controls --test-threads=1
printf '%s\n' "${S[@]}" | tee $L/summary.txt
grep -hE "test result|FAILED|panicked" $L/test-tp.log $L/test-gpu_controls.log
tail -3 $L/tp_ranks.log; tail -3 $L/tp_ranks-fail.log
grep -E "^\|" $L/bench-tp.log | head -40
tar -czf $OUT/logs.tgz -C /tmp logs
