#!/usr/bin/env bash
# Session 10, call 4 (one H200): call 3's checks on the fixed build (the export step's top-list pointer was
# null in call 3; the truncation step's unit loops now run per rank): top-k / top-p / min-p through the
# tensor-parallel exchange with one rank, the TP bench with one rank, memcheck, and a same-call A/B of the
# one-GPU truncation path against 6697fb9 (three rounds).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s10c4.tar.xz | tar -xf -; echo "unpacked $(el)s"
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
for r in 1 2 3; do
  TO=120 run tk-old-r$r ./x/old-bench-lm_head --bench --truncation --batches 1,16,64,256 --runs 30 --out $L/tk-old-r$r
  TO=120 run tk-new-r$r ./x/bench-lm_head --bench --truncation --batches 1,16,64,256 --runs 30 --out $L/tk-new-r$r
done
FLASHSAMPLING_REQUIRE_GPUS=1 TO=120 run bench-tp1 ./x/bench-tp --bench --ranks 1 --batches 1,16,64,256 --runs 20 --out $L/bench-tp1
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in $L/test-*.log $L/memcheck-*.log; do echo "== $(basename $f): $(grep -hE 'test result|ERROR SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked|MISMATCH|SKIP" $f | head -8; done
grep -h "TP=1 truncation" $L/test-tp.log
grep -E "^\||MISMATCH" $L/bench-tp1.log | tail -12
for f in tk-old-r1 tk-new-r1 tk-old-r2 tk-new-r2 tk-old-r3 tk-new-r3; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u -t'|' -k2,2 -k3,3n | cut -c1-130 | head -8; done
tar -czf $OUT/logs.tgz -C /tmp logs
