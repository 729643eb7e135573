#!/usr/bin/env bash
# FlashSampling's entry point: installs what the build needs, then runs the job.
#
#   ./x.sh sample [ARGS]   the main job: sample a batch from a synthetic LM head or a checkpoint's
#                          (--weight FILE; GPU if present, else CPU)
#   ./x.sh test [--slow]   rustfmt and clippy, every test (GPU tests print SKIP without a GPU), then a crate that uses the
#                          library on stable Rust with the shipped PTX (ci/stable-consumer), then the
#                          Python package's wheel and its tests (python/); --slow adds the slow tier (the
#                          tests marked #[ignore = "slow tier …"], e.g. the 2^32-word noise walk; CI runs it)
#   ./x.sh check           type-check the kernel crate for the nvptx target, its warnings shown (seconds
#                          when warm; the first run builds `core` for the target)
#   ./x.sh ptx             rebuild the shipped modules (flashsampling/ptx/: PTX, cubins, MANIFEST) from the
#                          kernel sources with the pinned ptxas
#   ./x.sh bench [ARGS]    cargo bench (needs a GPU)
#   ./x.sh gpu-bundle      build test + bench executables and the PTX into gpu-bundle/ for a GPU machine
#                          without Rust (docs/dev/gpu-bundle.md)
#
# Installs: the pinned nightly with rust-src + llvm-tools (rust-toolchain.toml; RUSTUP_AUTO_INSTALL may
# be off), ptxas from the PyPI wheel nvidia-cuda-nvcc-cu12 into .tools/ (for the PTX build check), and
# for `test` a Python virtual environment in .tools/py (maturin, pytest, NumPy) for the Python package.
set -euo pipefail
cd "$(dirname "$0")"

ensure_toolchain() {
  command -v rustup >/dev/null || { echo "x.sh: rustup is required (https://rustup.rs)" >&2; exit 1; }
  rustup toolchain install >/dev/null   # reads rust-toolchain.toml, components included
}

PTXAS=.tools/nvcc/nvidia/cuda_nvcc/bin/ptxas
ensure_ptxas() {
  [ -x "$PTXAS" ] && return
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target .tools/nvcc \
    "nvidia-cuda-nvcc-cu12==12.9.86"
}

# A virtual environment for the Python package's build and tests (maturin, pytest, NumPy from PyPI).
ensure_python_tools() {
  [ -x .tools/py/bin/maturin ] && [ -x .tools/py/bin/pytest ] && return
  python3 -m venv .tools/py
  .tools/py/bin/pip install --quiet --disable-pip-version-check "maturin==1.16.0" "pytest==9.2.0" "numpy==2.4.6"
}

# `step NAME CMD…`: runs CMD and notes its wall time for the summary `test` prints last.
STEP_TIMES=""
step() {
  local name=$1 t0=$SECONDS
  shift
  "$@"
  STEP_TIMES+=$(printf '  %-26s %5d s' "$name" $((SECONDS - t0)))$'\n'
}

cmd="${1:-}"; shift || true
case "$cmd" in
  sample)
    ensure_toolchain
    exec cargo run --release --example sample -- "$@" ;;
  test)
    step "toolchain" ensure_toolchain
    step "ptxas wheel" ensure_ptxas
    step "rustfmt" cargo fmt --all --check
    # The library's build assembles its PTX once (ptxas -v: the cubins, and the report tests/ptxas.rs reads;
    # ptx_prebuilt compares the cubins with the shipped ones, which needs this pinned ptxas).
    slow=()
    [ "${1:-}" = "--slow" ] && slow=(-- --include-ignored)
    FLASHSAMPLING_REQUIRE_PTXAS=1 step "cargo test (build + run)" cargo test --release "${slow[@]}"
    # Lints of every target, warnings as errors (the allowed ones and why: Cargo.toml).
    step "clippy" cargo clippy --release --all-targets --quiet -- -D warnings
    # A downstream crate on stable Rust: no nightly, rust-src, llvm-tools or ptxas (the portable PTX and
    # both cubins ship prebuilt in flashsampling/ptx/; nothing is assembled, here or for the wheel).
    rustup run stable cargo --version >/dev/null 2>&1 || step "stable toolchain" rustup toolchain install stable --profile minimal
    step "stable consumer" rustup run stable cargo run --release --quiet --manifest-path ci/stable-consumer/Cargo.toml
    # The Python package: its abi3 wheel, installed into .tools/py, and its tests (NumPy, CPU path; the
    # CUDA tests list their skip reasons without PyTorch or a GPU).
    step "python tools" ensure_python_tools
    rm -rf target/wheels
    step "python wheel" .tools/py/bin/maturin build --release --quiet -m python/Cargo.toml -o target/wheels
    .tools/py/bin/pip install --quiet --force-reinstall --no-deps target/wheels/flashsampling-*.whl
    step "python tests" .tools/py/bin/python -m pytest -q -rs -p no:cacheprovider --import-mode=importlib python/tests
    printf '\nstep times (./x.sh test):\n%s' "$STEP_TIMES" ;;
  check)
    ensure_toolchain
    # The device code as the PTX build compiles it (nvptx64, core built from rust-src), checked only;
    # a target directory of its own, so the host build's artifacts stay as they are.
    exec cargo check --manifest-path kernels/Cargo.toml --lib --release --target nvptx64-nvidia-cuda \
      -Zbuild-std=core --target-dir target/nvptx-check "$@" ;;
  ptx)
    ensure_toolchain
    ensure_ptxas
    FLASHSAMPLING_REQUIRE_PTXAS=1 FLASHSAMPLING_UPDATE_PTX=1 exec cargo test --release --test ptx_prebuilt -- --nocapture ;;
  bench)
    ensure_toolchain
    exec cargo bench -- "$@" ;;
  gpu-bundle)
    ensure_toolchain
    exec scripts/gpu-bundle.sh ;;
  *)
    sed -n '2,20p' "$0"; exit 2 ;;
esac
