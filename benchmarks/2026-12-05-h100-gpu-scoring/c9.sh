#!/usr/bin/env bash
# Session 31, call 3: GPU scoring (issue 52.1: GpuBackend::score / sample_and_score / score_device, the
# given token scored by reduce_rows): every GPU suite with FLASHSAMPLING_REQUIRE_GPU=1 (FusedParams grew, so
# every launch's parameters moved), memcheck of the scoring tests, the same-call A/B of the log-probability
# path (reduce_rows is the one entry whose SASS changed; old = the previous main), then the scoring bench.
set -u
cd "$(dirname "$0")"
rm -rf m; xz -dc main.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2; local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-22s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP" $L/$label.log | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $L/machine.txt
cd .. # repository root: tests read it
for n in gpu_score gpu gpu_truncation gpu_controls gpu_f16 gpu_graphs speculative tp; do
  run $n 150 gpurun/m/test-$n-main --test-threads=1
done
run san-score 150 $SAN --tool memcheck gpurun/m/test-gpu_score-main --test-threads=1 bad_input scoring_the_sampled
grep -E 'ERROR SUMMARY' $L/san-score.log | tail -1
echo "tests done at $(el)s"
# A/B of the log-probability path (plain + log-probs), 2 interleaved rounds.
OUT=$L FS_BENCH_ARGS="--controls --modes logprobs --shape 4096,151936 --batches 1,16,64" \
  timeout 150 bash scripts/gpu-ab.sh 2 old=gpurun/m/bench-lm_head-old new=gpurun/m/bench-lm_head-main > $L/ab.txt 2>&1
tail -12 $L/ab.txt
echo "A/B done at $(el)s"
timeout $(( 570 - $(el) )) gpurun/m/bench-lm_head-main --bench --score --shape 4096,151936 --batches 1024,4096,16384,32768 \
  --out $L/score > $L/score.log 2>&1; echo "score bench rc=$?"
tail -8 $L/score.log
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
