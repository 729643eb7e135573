#!/usr/bin/env bash
# Issue 55, call 5 (same build as call 4): racecheck of the n128 and n64t kernels on two controls tests (log-probs of
# wide rows: B = 70, masses in shared memory; every control on exact logits), then the plain variant sweep of the
# portable family (n64, n64t, n128) over B = 40-256 and log-probabilities at B = 48/64 forced n64 against n64t.
set -u
cd "$(dirname "$0")"
mkdir -p bin; [ -x bin/bench ] || xz -dc bins.tar.xz | tar -xf - -C bin
B=$PWD/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-400} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-400} ] && to=$(( ${BUDGET:-400} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  local san=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/$label.log | tail -1)
  sum+=("$(printf '%-24s rc=%-3d %4ss %s %s' $label $rc $(( $(date +%s) - s )) "$res" "$san")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd .. ; cd .. # repository root: tests read it
export FLASHSAMPLING_PORTABLE=1
run variants 90 $B/bench --bench --variants --only mma_tma_n64,mma_tma_n128 --shape 4096,151936 --shape 8192,128256 --batches 40,48,64,96,128,192,256 --runs 30 --out $L/variants
for v in n64 n64t; do
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$v run lp-$v 40 $B/bench --bench --controls --modes logprobs --shape 4096,151936 --shape 8192,128256 --batches 48,64 --runs 50 --out $L/lp-$v
done
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run racecheck-n128 110 $SAN --tool racecheck $B/test-gpu_controls --test-threads=1 log_probs_of_wide_rows
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64t run racecheck-n64t 110 $SAN --tool racecheck $B/test-gpu_controls --test-threads=1 every_control_matches
grep -E "^\|" $L/variants.log | head -20
for f in lp-n64 lp-n64t; do echo "== $f"; grep -E "^\| d" $L/$f.log | head -4; done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
