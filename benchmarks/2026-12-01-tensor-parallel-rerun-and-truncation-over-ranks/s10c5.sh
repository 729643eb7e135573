#!/usr/bin/env bash
# Session 10, call 5 (one H200): the one-rank truncation test with its corrected assertion (call 4's tokens all
# matched; its "most rows certified" bound was wrong for rows with a wide nucleus), under memcheck too.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 FLASHSAMPLING_REQUIRE_GPUS=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s10x2b.tar.xz | tar -xf -; echo "unpacked $(el)s"
mkdir -p /tmp/nccl; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-240} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-24s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
run test-tp ./x/test-tp --test-threads=1
TO=150 run memcheck-tp1 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/test-tp --test-threads=1 truncation_over_one_rank
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in $L/test-tp.log $L/memcheck-tp1.log; do echo "== $(basename $f): $(grep -hE 'test result|ERROR SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked|TP=1 truncation" $f | head -8; done
grep -v "Host Frame\|Saved host\|^========= $" $L/memcheck-tp1.log | grep "=========" | sort | uniq -c | head
tar -czf $OUT/logs.tgz -C /tmp logs
