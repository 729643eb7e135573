#!/usr/bin/env bash
# Packs binaries for a device call: gpu-lite/pack.sh NAME "LABEL=BUNDLE_DIR:bin1,bin2 ..." -> gpu-lite/NAME.tar.xz
# with x/LABEL-bin for each (one solid xz archive: the binaries share their embedded PTX and cubins).
set -euo pipefail
cd "$(dirname "$0")"
name=$1; shift
rm -rf x; mkdir -p x
for spec in "$@"; do
  label=${spec%%=*}; rest=${spec#*=}; dir=${rest%%:*}; bins=${rest#*:}
  for b in ${bins//,/ }; do cp "$dir/bin/$b" "x/$label-$b"; done
  cp "$dir/commit.txt" "x/$label-commit.txt"
done
tar -cf - x | xz --lzma2=preset=6,dict=512MiB -T1 > $name.tar.xz
rm -rf x
ls -la $name.tar.xz
