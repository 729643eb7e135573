#!/usr/bin/env bash
# Session 35, call 5: one log-mass for scoring rows whose processed logits are the raw ones (T = 1, nothing applied):
# gpu_score and tp of the new build, then the build before (bench-old, the modules of 1bcff9b: noiseless scoring rows) against it,
# interleaved, two rounds: --score at 1k/4k rows, and the log-probability call at B = 1/16/64 (reduce_rows changed).
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
run tp 120 $B/test-tp --test-threads=1 scoring truncating_scores
for r in 1 2; do
  for b in old new; do
    run score-$b-$r 60 $B/bench-$b --bench --score --shape 4096,151936 --batches 1024,4096 --runs 10 --out $L/score-$b-$r
    run ctrl-$b-$r 60 $B/bench-$b --bench --controls --modes logprobs --shape 4096,151936 --batches 1,16,64 --runs 50 --out $L/ctrl-$b-$r
  done
done
for f in $L/score-*.log $L/ctrl-*.log; do echo "== $(basename $f)"; grep -E "^\| d4096" $f | sort -u; done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
