#!/usr/bin/env bash
# Session 10, call 3 (one H200; the two-GPU machine was no longer lent): top-k / top-p / min-p through the
# tensor-parallel exchange with one rank (export, all-gather, the step over the merged list, the fallback's
# gathered logits; NCCL from PyTorch's wheel), the single-GPU suites, memcheck, and a same-call A/B of the
# one-GPU truncation path (truncate_rows gained the rank modes) against 6697fb9.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s10c3.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-240} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-24s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
NC=$(find / -name 'libnccl.so*' -not -path '*/proc/*' 2>/dev/null | head -5); echo "$NC" >> $L/machine.txt
N=$(echo "$NC" | head -1); if [ -n "$N" ]; then mkdir -p /tmp/nccl; ln -sf "$N" /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH; fi
echo "nccl: $N"
FLASHSAMPLING_REQUIRE_GPUS=1 run test-tp ./x/test-tp --test-threads=1
for t in gpu_truncation gpu_controls gpu_f16; do TO=120 run test-$t ./x/test-$t --test-threads=1; done
TO=120 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 flat_rows tied_and_short truncation_matches_the_cpu
FLASHSAMPLING_REQUIRE_GPUS=1 TO=150 run memcheck-tp1 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/test-tp --test-threads=1 truncation_over_one_rank
for r in 1 2; do
  TO=120 run tk-old-r$r ./x/old-bench-lm_head --bench --truncation --batches 1,16,64,256 --runs 30 --out $L/tk-old-r$r
  TO=120 run tk-new-r$r ./x/bench-lm_head --bench --truncation --batches 1,16,64,256 --runs 30 --out $L/tk-new-r$r
done
TO=150 run test-gpu ./x/test-gpu --test-threads=1
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in $L/test-*.log $L/memcheck-*.log; do echo "== $(basename $f): $(grep -hE 'test result|ERROR SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked|MISMATCH|SKIP" $f | head -8; done
grep -h "TP=1 truncation" $L/test-tp.log
for f in tk-old-r1 tk-new-r1 tk-old-r2 tk-new-r2; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u -t'|' -k2,2 -k3,3n | cut -c1-130 | head -8; done
tar -czf $OUT/logs.tgz -C /tmp logs
