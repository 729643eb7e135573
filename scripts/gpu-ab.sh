#!/usr/bin/env bash
# Same-call A/B of fused-kernel builds on a GPU machine: runs each build's `cargo bench` executable
# (the full table: every B of both configurations, with the cuBLAS baselines) in interleaved rounds,
# then prints, per (config, B), the median of each build's per-round medians and the ratio to the
# first build. The baselines (cuBLAS GEMM alone) are compared too: they show drift of the machine
# between rounds.
#
#   scripts/gpu-ab.sh ROUNDS LABEL=BENCH_EXECUTABLE LABEL=BENCH_EXECUTABLE ...
#
# Bench executables come from `./x.sh gpu-bundle` (gpu-bundle/bin/bench-lm_head) of each build.
# FS_BENCH_ARGS passes flags to every bench run (e.g. "--shape 2048,32000 --batches 1,64,512"; a build
# whose bench predates a flag ignores it and runs its defaults).
# Logs and each round's results.csv go to $OUT/ab (or /tmp/flashsampling-ab).
set -uo pipefail
rounds="$1"; shift
out="${OUT:-/tmp/flashsampling-ab}/ab"; mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1
for r in $(seq 1 "$rounds"); do
  for spec in "$@"; do
    label="${spec%%=*}"; exe="${spec#*=}"
    start=$(date +%s)
    "$exe" --bench ${FS_BENCH_ARGS:-} --out "$out/$label-r$r" > "$out/$label-r$r.log" 2>&1; rc=$?
    echo "round $r $label: rc=$rc $(( $(date +%s) - start ))s"
  done
done
python3 - "$out" "$rounds" "$@" <<'PY'
import csv, statistics, sys
out, rounds, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
labels = [s.split("=", 1)[0] for s in specs]
data = {}
for label in labels:
    for r in range(1, rounds + 1):
        try:
            rows = list(csv.DictReader(open(f"{out}/{label}-r{r}/results.csv")))
        except OSError:
            continue
        for row in rows:
            key = (row["config"], int(row["B"]))
            data.setdefault(key, {}).setdefault(label, []).append((float(row["ours_ms"]), float(row["gemm_ms"]), float(row["hbm_floor_ms"])))
print(f"\nA/B: median over {rounds} round(s) of each build's median ms (ours; cuBLAS GEMM in the same run)")
head = "| config | B | " + " | ".join(f"{l} ms" for l in labels) + " | " + " | ".join(f"{l}/{labels[0]}" for l in labels[1:]) + " | " + " | ".join(f"GEMM {l}" for l in labels) + " |"
print(head)
print("|" + "---|" * (2 + 2 * len(labels) + len(labels) - 1))
for key in sorted(data, key=lambda k: (k[0], k[1])):
    med = {l: statistics.median(x[0] for x in data[key].get(l, [(float("nan"),) * 3])) for l in labels}
    gem = {l: statistics.median(x[1] for x in data[key].get(l, [(float("nan"),) * 3])) for l in labels}
    ratios = [f"{med[l] / med[labels[0]]:.3f}" for l in labels[1:]]
    print(f"| {key[0]} | {key[1]} | " + " | ".join(f"{med[l]:.4f}" for l in labels) + " | " + " | ".join(ratios) + " | " + " | ".join(f"{gem[l]:.4f}" for l in labels) + " |")
PY
