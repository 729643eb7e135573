#!/usr/bin/env bash
# Same-call A/B of fused-kernel builds on a GPU machine: runs each build's `cargo bench` executable
# (by default the full table: every B of both configurations, with the cuBLAS baselines) in
# interleaved rounds, then prints, per (config, B) — and per mode with `--controls` — the median of
# each build's per-round medians and the ratio to the first build. The baselines (cuBLAS GEMM alone,
# the plain call) are compared too: they show drift of the machine between rounds.
#
#   scripts/gpu-ab.sh ROUNDS LABEL=BENCH_EXECUTABLE LABEL=BENCH_EXECUTABLE ...
#
# Bench executables come from `./x.sh gpu-bundle` (gpu-bundle/bin/bench-lm_head) of each build.
# FS_BENCH_ARGS passes flags to every bench run (e.g. "--shape 2048,32000 --batches 1,64,512", or
# "--truncation --batches 33,64" / "--controls --modes temps+logprobs,mask" to compare those modes; a
# build whose bench predates a flag ignores it and runs its defaults).
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
# The bench writes one CSV per mode: results.csv (the full table), truncation.csv (--truncation),
# controls.csv (--controls). Each is compared by its key and its timed columns.
modes = {
    "results.csv": ("full table: ours ms (cuBLAS GEMM in the same run)", lambda r: (r["config"], int(r["B"]), ""),
                    [("ours_ms", "ours"), ("gemm_ms", "GEMM")]),
    "truncation.csv": ("truncating calls (back to back)", lambda r: (r["config"], int(r["b"]), ""),
                       [("truncated_ms", "ms"), ("truncated_b2b_ms", "b2b"), ("plain_ms", "plain")]),
    "controls.csv": ("per-request controls", lambda r: (r["config"], int(r["b"]), r["mode"]),
                     [("median_ms", "ms"), ("ratio_to_plain", "x plain")]),
}
for name, (title, key_of, cols) in modes.items():
    data = {}
    for label in labels:
        for r in range(1, rounds + 1):
            try:
                rows = list(csv.DictReader(open(f"{out}/{label}-r{r}/{name}")))
            except OSError:
                continue
            for row in rows:
                data.setdefault(key_of(row), {}).setdefault(label, []).append(row)
    if not data:
        continue
    print(f"\nA/B, {title}: median over {rounds} round(s) of each build's median; ratios to {labels[0]}")
    heads = [f"{l} {c[1]}" for c in cols for l in labels] + [f"{l}/{labels[0]}" for l in labels[1:]]
    print("| config | B | mode | " + " | ".join(heads) + " |")
    print("|" + "---|" * (3 + len(heads)))
    for key in sorted(data):
        med = {(l, c): statistics.median(float(x[c]) for x in data[key][l]) if l in data[key] else float("nan")
               for l in labels for c, _ in cols}
        first = cols[0][0]
        cells = [f"{med[(l, c)]:.4f}" for c, _ in cols for l in labels]
        cells += [f"{med[(l, first)] / med[(labels[0], first)]:.3f}" for l in labels[1:]]
        print(f"| {key[0]} | {key[1]} | {key[2] or '-'} | " + " | ".join(cells) + " |")
PY
