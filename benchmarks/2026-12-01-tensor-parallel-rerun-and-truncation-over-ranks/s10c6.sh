#!/usr/bin/env bash
# Session 10, call 6 (one H200): 7fa6dfc (the rank steps' shared preamble): the one-rank truncation test again, and the
# one-process-per-GPU path (TpRank, examples/tp_ranks.rs) with one rank: plain, top-k 20 + top-p 0.9, top-p 0.999 (the
# fallback's exchange), each against the CPU backend on the whole head.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 FLASHSAMPLING_REQUIRE_GPUS=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; xz -dc s10x2b.tar.xz | tar -xf -; echo "unpacked $(el)s"
mkdir -p /tmp/nccl; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-24s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
run test-tp ./x/test-tp --test-threads=1
run tp_ranks-w1 ./x/tp_ranks --world 1
run tp_ranks-w1-tk ./x/tp_ranks --world 1 --top-k 20 --top-p 0.9
run tp_ranks-w1-fallback ./x/tp_ranks --world 1 --top-p 0.999 --batch 16
printf '%s\n' "${S[@]}" | tee $L/summary.txt
echo "== test-tp: $(grep -hE 'test result' $L/test-tp.log)"; grep -hE "FAILED|panicked|TP=1 truncation" $L/test-tp.log
for f in tp_ranks-w1 tp_ranks-w1-tk tp_ranks-w1-fallback; do echo "== $f"; tail -3 $L/$f.log; done
tar -czf $OUT/logs.tgz -C /tmp logs
