#!/usr/bin/env bash
# The PTX "linker" for rustc's nvptx64-nvidia-cuda target (invoked by rustc as `-C linker=`).
#
# rustc hands the linker LLVM bitcode: the crate's own objects and rlibs (core, ...) whose members are
# bitcode too. This step: extract rlib members, llvm-link the crate's objects plus only what they need
# from the rlibs, then per PTX module (FS_MODULES, below): internalize everything but that module's
# entry points, opt -O3, and llc to PTX for its target ($FS_SM, default sm_90, or sm_90a). FMA contraction is off (`--fp-contract=off`), so
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
[ ${#exports[@]} -gt 0 ] || { echo "link-ptx.sh: rustc exported no entry points" >&2; exit 2; }
# Every kernel rustc exports must be in one of the modules build.rs lists, or in FS_DROPPED (the entries this
# target leaves out on purpose: the portable TMA family below sm_90); none silently dropped.
for e in "${exports[@]}"; do
  case ",${FS_MODULES//[;:]/,},${FS_DROPPED:-}," in *",$e,"*) ;; *) echo "link-ptx.sh: entry $e is in no module of FS_MODULES" >&2; exit 2 ;; esac
done
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
# One PTX module per `config::Module`, as build.rs lists them from the variant table:
#   FS_MODULES  "stem:arch:entry,entry;stem:arch:entry,…"  (the first is written to -o, the others as
#               <stem>.ptx beside it; sm_90 and sm_90a get PTX ISA 8.3 for `fence.proxy.tensormap`)
#   FS_MAXNTID  "entry=threads,…"  entries that run one block of that size per multiprocessor: rustc
#               has no launch-bounds attribute, so `.maxntid threads, 1, 1` is written here and ptxas
#               then budgets registers for exactly that block; `entry=threads+` also gets
#               `.minnctapersm 1` (kernels that move registers with `setmaxnreg`: ptxas honours it only
#               when the entry's register count is known, else warns C7508 and ignores it).
: "${FS_MODULES:?set FS_MODULES (build.rs lists the modules and their entry points)}"
module() {  # stem, arch, entries, output: optimize, lower to PTX, then write the entries' bounds
  local stem=$1 arch=$2 entries=$3 dest=$4 extra="" bound entry threads pin
  # PTX ISA 8.3 for `fence.proxy.tensormap` (the TMA kernels: sm_90a's, and the portable module's
  # TMA family when it is built for sm_90).
  case "$arch" in sm_90|sm_90a) extra="-mattr=+ptx83" ;; esac
  "$FS_LLVM_BIN/opt" "$work/linked.bc" -o "$work/opt-$stem.bc" \
    -passes='internalize,globaldce,default<O3>' -internalize-public-api-list="$entries"
  "$FS_LLVM_BIN/llc" "$work/opt-$stem.bc" -o "$dest" -O3 -mtriple=nvptx64-nvidia-cuda -mcpu="$arch" --fp-contract=off $extra
  IFS=',' read -ra bounds <<< "${FS_MAXNTID:-}"
  for bound in "${bounds[@]}"; do
    entry="${bound%%=*}"; threads="${bound#*=}"; pin=""
    case "$threads" in *+) threads="${threads%+}"; pin='\n.minnctapersm 1' ;; esac
    # The line after the entry's parameter list: `)` (then `{`); the bound goes between them.
    sed -i -E "/^\.visible \.entry ${entry}\(\$/,/^\)/ s/^\)(.*)\$/)\1\n.maxntid ${threads}, 1, 1${pin}/" "$dest"
  done
}
# The modules are independent: built at once (each deterministic, so the result is the same).
first=1
pids=()
IFS=';' read -ra specs <<< "$FS_MODULES"
for spec in "${specs[@]}"; do
  IFS=':' read -r stem arch entries <<< "$spec"
  [ "$arch" = portable ] && arch="$sm"
  if [ $first = 1 ]; then dest="$out"; first=0; else dest="$(dirname "$out")/$stem.ptx"; fi
  module "$stem" "$arch" "$entries" "$dest" &
  pids+=("$!")
done
for pid in "${pids[@]}"; do
  wait "$pid"   # a module that failed fails the link (set -e)
done
