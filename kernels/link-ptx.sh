#!/usr/bin/env bash
# The PTX "linker" for rustc's nvptx64-nvidia-cuda target (invoked by rustc as `-C linker=`).
#
# rustc hands the linker LLVM bitcode: the crate's own objects and rlibs (core, ...) whose members are
# bitcode too. This step: extract rlib members, llvm-link the crate's objects plus only what they need
# from the rlibs, internalize everything but the kernel entry points (rustc's --export-symbol list),
# opt -O3, and llc to PTX for $FS_SM (default sm_90). FMA contraction is off (`--fp-contract=off`), so
# f32 multiplies and adds round exactly as on the host; explicit FMAs (mma, mul_add) are unaffected.
# Tools come from $FS_LLVM_BIN (the toolchain's llvm-tools component).
set -euo pipefail
: "${FS_LLVM_BIN:?set FS_LLVM_BIN to the llvm-tools bin directory}"
sm="${FS_SM:-sm_90}"
[ -n "${FS_LINK_LOG:-}" ] && printf "%s\n" "$@" > "$FS_LINK_LOG"
out=""
objs=()
libs=()
exports=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    *.rlib) libs+=("$1"); shift ;;
    *.o|*.bc) objs+=("$1"); shift ;;
    --export-symbol) exports+=("$2"); shift 2 ;;
    *) shift ;;  # --target, --target-cpu, -O, -L, --debug: decided here instead
  esac
done
[ -n "$out" ] || { echo "link-ptx.sh: no -o given" >&2; exit 2; }
# Keep the entry points rustc exports (the `#[no_mangle]` kernels), or $FS_ENTRY_POINTS if set.
if [ -z "${FS_ENTRY_POINTS:-}" ]; then
  FS_ENTRY_POINTS="$(IFS=,; echo "${exports[*]}")"
fi
[ -n "$FS_ENTRY_POINTS" ] || { echo "link-ptx.sh: no entry points to export" >&2; exit 2; }
[ ${#objs[@]} -gt 0 ] || { echo "link-ptx.sh: no bitcode objects given" >&2; exit 2; }
work="$(mktemp -d "${out}.link.XXXXXX")"
trap 'rm -rf "$work"' EXIT
extra=()
i=0
for lib in "${libs[@]}"; do
  d="$work/lib$i"; i=$((i + 1)); mkdir -p "$d"
  (cd "$d" && "$FS_LLVM_BIN/llvm-ar" x "$lib")
  for m in "$d"/*; do
    case "$m" in *.rmeta|*/lib.rmeta) continue ;; esac
    # keep bitcode members only (magic 'BC' 0xC0DE)
    if [ "$(head -c 2 "$m")" = "BC" ]; then extra+=("$m"); fi
  done
done
if [ ${#extra[@]} -gt 0 ]; then
  # Merge the libraries first: --only-needed then pulls what the crate needs transitively, whatever
  # the member order.
  "$FS_LLVM_BIN/llvm-link" "${extra[@]}" -o "$work/libs.bc"
  "$FS_LLVM_BIN/llvm-link" "${objs[@]}" --only-needed "$work/libs.bc" -o "$work/linked.bc"
else
  "$FS_LLVM_BIN/llvm-link" "${objs[@]}" -o "$work/linked.bc"
fi
# Two modules: the `wgmma` kernels need the arch-specific sm_90a target (a Hopper-only module), every
# other kernel goes into the $FS_SM module, which newer GPUs can load too.
main_entries="$(tr ',' '\n' <<< "$FS_ENTRY_POINTS" | grep -v wgmma | paste -sd, -)"
sm90a_entries="$(tr ',' '\n' <<< "$FS_ENTRY_POINTS" | grep wgmma | paste -sd, - || true)"
module() {  # entries, cpu, output
  "$FS_LLVM_BIN/opt" "$work/linked.bc" -o "$work/opt-$2.bc" \
    -passes='internalize,globaldce,default<O3>' -internalize-public-api-list="$1"
  "$FS_LLVM_BIN/llc" "$work/opt-$2.bc" -o "$3" -O3 -mtriple=nvptx64-nvidia-cuda -mcpu="$2" --fp-contract=off ${4:-}
}
module "$main_entries" "$sm" "$out"
if [ -n "$sm90a_entries" ]; then
  sm90a="${out%.ptx}_sm90a.ptx"
  # PTX ISA 8.3: `fence.proxy.tensormap::generic` (the TMA kernels acquire their tensor maps).
  module "$sm90a_entries" sm_90a "$sm90a" -mattr=+ptx83
  # The warp-specialized kernels (`*_ws_*`, `*_tma_*`, `*_tmat_*`) run 3 warpgroups = 384 threads
  # (config::WS_WARPS). rustc has no launch-bounds attribute, so the bound is written here: ptxas then
  # keeps them within the 168 registers per thread that one such block per SM can have.
  sed -i -E '/^\.visible \.entry [A-Za-z0-9_]*_(ws|tma|tmat)_[A-Za-z0-9_]*\($/,/^\)/ s/^\)(.*)$/)\1\n.maxntid 384, 1, 1/' "$sm90a"
fi
