#!/usr/bin/env bash
# Session 10, call 8 (one H200): raw log-probabilities with truncation over ranks (merged raw log-sum-exp, a changed
# token's raw logit = its processed one): the one-rank truncation test with its raw case, memcheck, the example.
#
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 FLASHSAMPLING_REQUIRE_GPUS=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s10x2b.tar.xz | tar -xf -; echo "unpacked $(el)s"
mkdir -p /tmp/nccl; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-24s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
run test-tp ./x/test-tp --test-threads=1
TO=150 run memcheck-tp1 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 ./x/test-tp --test-threads=1 truncation_over_one_rank
run tp_ranks-w1-tk ./x/tp_ranks --world 1 --top-k 20 --top-p 0.9
run tp_ranks-w1-fallback ./x/tp_ranks --world 1 --top-p 0.999 --batch 16
printf '%s\n' "${S[@]}" | tee $L/summary.txt
echo "== test-tp: $(grep -hE 'test result' $L/test-tp.log)"; grep -hE "FAILED|panicked|TP=1 truncation" $L/test-tp.log
echo "== memcheck: $(grep -hE 'test result|ERROR SUMMARY' $L/memcheck-tp1.log | tr '\n' ' ')"
for f in tp_ranks-w1-tk tp_ranks-w1-fallback; do echo "== $f"; tail -3 $L/$f.log; done
tar -czf $OUT/logs.tgz -C /tmp logs
