#!/usr/bin/env bash
# Issue 55, call 5 (call 4 could not start a machine): (1, on an H200 only) the library's choice at HEAD b723a21 (shipped PTX) with the
# portable and the Hopper module, main tables at B = 1, 16, 64, 256, and the portable gpu / gpu_controls / gpu_score;
# the two probes on this card; (2) Nsight Compute on tma_mma_n128 at B = 256 (Qwen3-8B): the shipped kernel (bench),
# call 2's ablations (noepi, nomma) and call 3's deferred columns (new) -- every warp stall reason per issued
# instruction, instructions executed, pipe and shared-memory activity; (3) "rows": the NB = 8 kernels read their rows'
# parameters from per-warp copies in shared memory (working tree on b723a21): Nsight as above, same-call sweep
# bench / rows / rows / bench of n64t and n128 at 48-256 rows, log-probabilities of each forced, and gpu,
# gpu_controls, gpu_score with each forced.
set -u
here=$(cd "$(dirname "$0")" && pwd)
C=${C:-gpurun/c5}
mkdir -p $C/bin; [ -x $C/bin/bench ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs; mkdir -p $L
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || command -v ncu)
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
sum=()
run() { # label timeout cmd...
  local label=$1 to=$2; shift 2
  if [ $(( $(el) + 20 )) -gt ${BUDGET:-500} ]; then sum+=("$(printf '%-24s skipped (time)' $label)"); return; fi
  [ $(( $(el) + to )) -gt ${BUDGET:-500} ] && to=$(( ${BUDGET:-500} - $(el) ))
  local s=$(date +%s)
  timeout $to "$@" > $L/$label.log 2>&1; local rc=$?
  local res=$(grep -E '^test result:' $L/$label.log | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' $label $rc $(( $(date +%s) - s )) "$res")")
  echo "${sum[-1]}"; grep -E "FAILED|panicked|^SKIP|error:|differ" $L/$label.log | cut -c1-600 | head -8
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee $L/machine.txt
# On an H100, call 1 ran (1) already: only (2) then.
h200=0; grep -q H200 $L/machine.txt && h200=1
[ $h200 = 1 ] && run ring 60 python3 $here/run.py
[ $h200 = 1 ] && run mma 60 python3 $here/../2026-12-06-mma-sync-ceiling/run.py
[ $h200 = 1 ] && run main-hopper 60 $B/bench --bench --batches 1,16,64,256 --out $L/main-hopper
export FLASHSAMPLING_PORTABLE=1
[ $h200 = 1 ] && run main-portable 60 $B/bench --bench --batches 1,16,64,256 --out $L/main-portable
M="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.max,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__t_sectors.sum,dram__bytes_read.sum"
for b in bench bench-noepi bench-nomma bench-new bench-rows; do
  run ncu-$b 90 $NCU --clock-control none -k "regex:^fused_sample_mma_tma_n128" -s 3 -c 1 --metrics "$M" \
    $B/$b --bench --variants --only mma_tma_n128 --shape 4096,151936 --batches 256 --runs 6 --out /tmp/o-$b
done
SWEEP="--bench --variants --only mma_tma_n64t,mma_tma_n128 --shape 4096,151936 --shape 8192,128256 --batches 48,64,128,256 --runs 30"
run ab-base1 60 $B/bench $SWEEP --out $L/ab-base1
run ab-rows1 60 $B/bench-rows $SWEEP --out $L/ab-rows1
for k in n64t n128; do
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$k run gpu-rows-$k 90 $B/test-gpu-rows
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$k run controls-rows-$k 40 $B/test-gpu_controls-rows
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$k run score-rows-$k 50 $B/test-gpu_score-rows
done
run ab-rows2 60 $B/bench-rows $SWEEP --out $L/ab-rows2
run ab-base2 60 $B/bench $SWEEP --out $L/ab-base2
for k in n64t n128; do for b in bench bench-rows; do
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_$k run lp-$k-$b 60 $B/$b --bench --controls --modes logprobs --shape 4096,151936 --batches 64,256 --out $L/lp-$k-$b
done; done
for f in ab-base1 ab-rows1 ab-rows2 ab-base2; do echo "== $f"; grep -E "^\| d" $L/$f.log; done
for f in $L/lp-*.log; do echo "== $(basename $f)"; grep -E "logprobs|^\| " $f | head -6; done
if [ $h200 = 1 ]; then
  run gpu 90 $B/test-gpu
  run controls 40 $B/test-gpu_controls
  run score 50 $B/test-gpu_score
  cat $L/ring.log $L/mma.log
  for q in hopper portable; do echo "-- $q"; grep -E "^(config|qwen|llama)" $L/main-$q.log | head -8; done
fi
python3 - $L <<'PY'
import sys, re, os
L = sys.argv[1]
rows, names = {}, ["bench", "bench-noepi", "bench-nomma", "bench-new", "bench-rows"]
for n in names:
    f = f"{L}/ncu-{n}.log"
    if not os.path.exists(f): continue
    for line in open(f):
        m = re.match(r"\s+(\S+__\S+)\s+(?:\S+\s+)?([\d,.]+)\s*$", line)
        if m: rows.setdefault(m.group(1), {})[n] = m.group(2)
print(f"{'metric':<78}" + "".join(f"{n[6:] or 'base':>12}" for n in names))
for k, v in rows.items():
    vals = [v.get(n, "") for n in names]
    if "stalled" in k and all(x == "" or float(x.replace(",", "")) < 0.05 for x in vals): continue
    print(f"{k.replace('smsp__average_warps_issue_stalled_', 'stall:'):<78}" + "".join(f"{x:>12}" for x in vals))
PY
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
