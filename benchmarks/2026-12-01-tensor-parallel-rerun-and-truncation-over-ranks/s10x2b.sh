#!/usr/bin/env bash
# Session 10 (two H200s): top-k / top-p / min-p over two tensor-parallel ranks (the ranks' top lists exchanged, the
# fallback's logits all-gathered): the TP tests, the two-process example plain / truncating / failing, memcheck of the
# two-rank truncation test, and the TP bench with its truncation table. Build 7fa6dfc (kernels as 9adb248).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 FLASHSAMPLING_REQUIRE_GPUS=2 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s10x2b.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-240} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-24s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
run test-tp ./x/test-tp --test-threads=1
TO=60 run tp_ranks ./x/tp_ranks
TO=60 run tp_ranks-tk ./x/tp_ranks --top-k 20 --top-p 0.9
TO=60 run tp_ranks-tk-fallback ./x/tp_ranks --top-p 0.999 --batch 16
TO=60 run tp_ranks-fail ./x/tp_ranks --fail-rank 1 --top-k 20
TO=150 run memcheck-tp /usr/local/cuda/bin/compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 ./x/test-tp --test-threads=1 truncation_over_ranks
run bench-tp ./x/bench-tp --bench --runs 30 --out $L/bench-tp
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in $L/test-tp.log $L/memcheck-tp.log; do echo "== $(basename $f): $(grep -hE 'test result|ERROR SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked|MISMATCH" $f | head -5; done
grep -h "TP=2 truncation" $L/test-tp.log; for f in tp_ranks tp_ranks-tk tp_ranks-tk-fallback tp_ranks-fail; do tail -1 $L/$f.log; done
grep -E "^\||MISMATCH|target" $L/bench-tp.log | tail -32
tar -czf $OUT/logs.tgz -C /tmp logs
