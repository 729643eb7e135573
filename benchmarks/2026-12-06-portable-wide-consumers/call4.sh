#!/usr/bin/env bash
# Issue 55, call 4: the build that chooses the NB = 8 portable TMA variants. Sanitizers on the new kernels (controls
# suite forced on n64t / n128: memcheck, racecheck), the speculative suite in portable mode, then speed: the main
# table with the portable module only (the library's choice against cuBLAS GEMM and the floor), log-probabilities on
# Llama-3-70B's head forced n64 against the library's choice, and scoring at 1k / 4k rows forced n64 against n128.
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
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-570} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-570} ] && to=$(( ${BUDGET:-570} - $(el) ))
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
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64t run memcheck-n64t 90 $SAN --tool memcheck $B/test-gpu_controls --test-threads=1
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run memcheck-n128 90 $SAN --tool memcheck $B/test-gpu_controls --test-threads=1
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run racecheck-n128 90 $SAN --tool racecheck $B/test-gpu_controls --test-threads=1
run speculative 90 $B/test-speculative --test-threads=1
S="--shape 4096,151936 --shape 8192,128256"
run main 90 $B/bench --bench --quick $S --runs 30 --out $L/main
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64 run lp-n64 40 $B/bench --bench --controls --modes logprobs --shape 8192,128256 --batches 48,64,128,256 --runs 30 --out $L/lp-n64
run lp-choice 40 $B/bench --bench --controls --modes logprobs --shape 8192,128256 --batches 48,64,128,256 --runs 30 --out $L/lp-choice
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64 run score-n64 60 $B/bench --bench --score --shape 4096,151936 --batches 1024,4096 --runs 10 --out $L/score-n64
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run score-n128 60 $B/bench --bench --score --shape 4096,151936 --batches 1024,4096 --runs 10 --out $L/score-n128
sed -n '/config            B/,$p' $L/main.log | head -8
for f in lp-n64 lp-choice score-n64 score-n128; do echo "== $f"; grep -E "^\|" $L/$f.log | head -8; done
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
