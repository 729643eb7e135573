#!/usr/bin/env bash
# Builds everything a GPU machine without Rust needs into gpu-bundle/:
#   bin/        release test executables (cpu, gpu, tp, ptxas, unit tests), the benches (lm_head, tp) and the
#               examples (sample, tp_ranks)
#   flashsampling{,_sm90a,_test}.ptx  the PTX modules the binaries embed (for inspection)
#   run.sh      runs the tests (FLASHSAMPLING_REQUIRE_GPU=1), compute-sanitizer memcheck + racecheck,
#               the example and the bench; prints a short table last
#   ab.sh       same-call A/B of this build's bench against other builds' (scripts/gpu-ab.sh)
#   commit.txt  the commit it was built from
# Copy the folder to the GPU machine and run `gpu-bundle/run.sh` there (from the repository root).
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bundle
rm -rf "$out"; mkdir -p "$out/bin"
# Test executables (one per integration test file, plus the crates' unit tests).
cargo test --release --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, os, shutil
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        name = m["target"]["name"].replace("-", "_")
        kind = m["target"]["kind"][0]
        dst = os.path.join(sys.argv[1], "test-" + name + ("" if kind == "test" else "-" + kind))
        shutil.copy(m["executable"], dst); print("bundled", dst)
' "$out/bin"
cargo bench --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
        shutil.copy(m["executable"], sys.argv[1] + "/bench-" + m["target"]["name"]); print("bundled bench", m["target"]["name"])
' "$out/bin"
cargo build --release --example sample --example tp_ranks
cp target/release/examples/sample target/release/examples/tp_ranks "$out/bin/"
for module in flashsampling flashsampling_sm90a flashsampling_test; do
  cp "$(ls -t target/release/build/flashsampling-*/out/$module.ptx | head -1)" "$out/$module.ptx"
done
strip "$out"/bin/*   # symbols only: the executables stay the same code, a third smaller
cp scripts/gpu-run.sh "$out/run.sh"
cp scripts/gpu-ab.sh "$out/ab.sh"
{ git rev-parse --short HEAD; git diff --quiet HEAD || echo "with uncommitted changes"; } > "$out/commit.txt" 2>/dev/null
du -sh "$out"
# FS_BUNDLE_XZ=1: also one solid xz archive of the folder (a device call carries at most 64 MiB with the
# working tree; the executables compress about 8:1). On the GPU machine: `xz -dc gpu-bundle.tar.xz | tar -xf -`.
if [ "${FS_BUNDLE_XZ:-}" = 1 ]; then
  tar -cf - "$out" | xz -9e --lzma2=preset=9e,dict=256MiB > "$out.tar.xz"
  ls -la "$out.tar.xz"
fi
