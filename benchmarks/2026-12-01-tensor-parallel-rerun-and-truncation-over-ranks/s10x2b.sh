#!/usr/bin/env bash
# Session 10, call 2 (two H200s): top-k / top-p / min-p over tensor-parallel ranks (the ranks' top lists
# exchanged, the fallback's logits all-gathered): the TP tests, the example, the TP bench with its new
# truncation table, the single-GPU suites, memcheck, and a same-call A/B of the one-GPU truncation path
# (truncate_rows gained the rank modes) against 6697fb9; the two-process example with top-k / top-p.
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
TO=60 run tp_ranks-tk-fallback ./x/tp_ranks --top-p 0.999
for t in gpu_truncation gpu_controls gpu_f16; do TO=120 run test-$t ./x/test-$t --test-threads=1; done
TO=120 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 flat_rows tied_and_short truncation_matches_the_cpu
TO=150 run memcheck-tp /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/test-tp --test-threads=1 truncation_over_ranks
for r in 1 2; do
  TO=120 run tk-old-r$r ./x/old-bench-lm_head --bench --truncation --batches 1,16,64,256 --runs 30 --out $L/tk-old-r$r
  TO=120 run tk-new-r$r ./x/bench-lm_head --bench --truncation --batches 1,16,64,256 --runs 30 --out $L/tk-new-r$r
done
run bench-tp ./x/bench-tp --bench --runs 30 --out $L/bench-tp
TO=150 run test-gpu ./x/test-gpu --test-threads=1
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in $L/test-*.log $L/memcheck-*.log; do echo "== $(basename $f): $(grep -hE 'test result|ERROR SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked|MISMATCH" $f | head -5; done
grep -h "TP=2 truncation" $L/test-tp.log; for f in tp_ranks tp_ranks-tk tp_ranks-tk-fallback; do tail -1 $L/$f.log; done
for f in tk-old-r1 tk-new-r1 tk-old-r2 tk-new-r2; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u -t'|' -k2,2 -k3,3n | cut -c1-130 | head -8; done
grep -E "^\||MISMATCH|target" $L/bench-tp.log | tail -30
tar -czf $OUT/logs.tgz -C /tmp logs
