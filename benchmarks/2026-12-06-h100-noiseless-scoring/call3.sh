#!/usr/bin/env bash
# Session 35, call 3: scoring rows draw no noise (Transform::noiseless; is_greedy now means 1/T = +inf): tests of the
# new build, then a same-call A/B of the build before (bench-old, the shipped modules of 3823cd1) against it,
# interleaved, two rounds: --score at 1k/4k rows, and the log-probability and top-20 calls at B = 1/16/64.
set -u
cd "$(dirname "$0")"
mkdir -p bin; xz -dc bins.tar.xz | tar -xf - -C bin
B=$PWD/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-560} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-560} ] && to=$(( ${BUDGET:-560} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  local san=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/$label.log | tail -1)
  sum+=("$(printf '%-24s rc=%-3d %4ss %s %s' $label $rc $(( $(date +%s) - s )) "$res" "$san")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd .. # repository root: tests read it
run gpu_score 120 $B/test-gpu_score --test-threads=1

for r in 1 2; do
  for b in old new; do
    run score-$b-$r 60 $B/bench-$b --bench --score --shape 4096,151936 --batches 1024,4096 --runs 10 --out $L/score-$b-$r
    run ctrl-$b-$r 60 $B/bench-$b --bench --controls --modes logprobs,top20 --shape 4096,151936 --batches 1,16,64 --runs 50 --out $L/ctrl-$b-$r
  done
done
run gpu_truncation 90 $B/test-gpu_truncation --test-threads=1
# Issue 54 asks for a real head: is any checkpoint on this machine? (no internet here)
timeout 20 find / -xdev \( -name "*.safetensors" -o -name "*.gguf" -o -name "pytorch_model*.bin" \) -size +50M 2>/dev/null | head -20 > $L/checkpoints.txt; echo "checkpoints found: $(wc -l < $L/checkpoints.txt)"
for f in $L/score-*.log; do echo "== $(basename $f)"; grep -E "^\|" $f | head -6; done
for f in $L/ctrl-*.log; do echo "== $(basename $f)"; grep -E "^\|" $f | head -6; done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
