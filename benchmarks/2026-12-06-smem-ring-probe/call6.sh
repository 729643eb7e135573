#!/usr/bin/env bash
# Issue 55, call 6: column floors in the mma.sync lane epilogues (each column's screen skips against the best candidate
# of the 8 lanes holding it, as the weight-as-A wgmma kernels do; working tree on b723a21, built PTX) against the
# shipped build (old). Portable module: same-call sweeps old / new / new / old of the portable TMA family; Nsight
# instruction counts of n128 at B = 256; log-probabilities with the library's choice old / new; gpu with the choice and
# with n128 and n64 forced, gpu_controls, gpu_score; main table (new).
set -u
C=${C:-gpurun/c6}
mkdir -p $C/bin; [ -x $C/bin/bench-new ] || xz -dc $C/bins.tar.xz | tar -xf - -C $C/bin
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 FLASHSAMPLING_PORTABLE=1
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
SWEEP="--bench --variants --only mma_tma_n16,mma_tma_n32,mma_tma_n64,mma_tma_n64t,mma_tma_n128 --shape 4096,151936 --shape 8192,128256 --batches 16,64,128,256 --runs 30"
run ab-old1 60 $B/bench-old $SWEEP --out $L/ab-old1
run ab-new1 60 $B/bench-new $SWEEP --out $L/ab-new1
run gpu-choice 90 $B/test-gpu
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run gpu-n128 90 $B/test-gpu
FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n64 run gpu-n64 90 $B/test-gpu
run controls 40 $B/test-gpu_controls
run score 50 $B/test-gpu_score
run ab-new2 60 $B/bench-new $SWEEP --out $L/ab-new2
run ab-old2 60 $B/bench-old $SWEEP --out $L/ab-old2
for b in old new; do
  run lp-$b 40 $B/bench-$b --bench --controls --modes logprobs --shape 4096,151936 --shape 8192,128256 --batches 16,64,256 --out $L/lp-$b
done
M="smsp__inst_executed.sum,gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
for b in old new; do
  FLASHSAMPLING_FUSED_VARIANT=fused_sample_mma_tma_n128 run ncu-$b 60 $NCU --clock-control none -k "regex:^fused_sample_mma_tma_n128" -s 3 -c 1 --metrics "$M" \
    $B/bench-$b --bench --variants --only mma_tma_n128 --shape 4096,151936 --batches 256 --runs 6 --out /tmp/o-$b
done
run main-new 40 $B/bench-new --bench --batches 1,16,64,256 --out $L/main-new
python3 - $L <<'PY'
import re, sys
L = sys.argv[1]
def load(f):
    d = {}
    for l in open(f"{L}/{f}.log"):
        m = re.match(r"\| (d\d+-v\d+) \| (\d+) \|(.*)", l)
        if m:
            vals = [float(x.split()[0].rstrip('*')) for x in m.group(3).split('|') if x.strip()]
            d[(m.group(1), int(m.group(2)))] = vals
    return d
try:
    o1, n1, n2, o2 = [load(x) for x in ["ab-old1", "ab-new1", "ab-new2", "ab-old2"]]
    names = ["n16", "n32", "n64", "n64t", "n128"]
    print("new / old, min-max of the 4 pairs:", names)
    for k in sorted(o1):
        cells = []
        for j in range(len(names)):
            rs = [n[k][j] / o[k][j] for n in (n1, n2) for o in (o1, o2)]
            cells.append(f"{min(rs):.3f}-{max(rs):.3f}")
        print(k, " ".join(cells))
except Exception as e:
    print("sweep table:", e)
PY
for b in old new; do echo "== lp-$b"; grep -E "^\| d" $L/lp-$b.log | head -8; echo "== ncu-$b"; grep -E "inst_executed|duration|tensor" $L/ncu-$b.log; done
grep -E "^(qwen|llama)" $L/main-new.log | head -8
echo; echo "==== summary ($(el)s) ===="; printf '%s\n' "${sum[@]}"
cd $OUT && tar -czf all.tgz logs && rm -rf logs; true
