#!/usr/bin/env bash
# pack.sh NAME "label=/path/to/bin,label2=/path" : xz archive .gl/NAME.tar.xz of bins renamed label
set -euo pipefail
cd "$(dirname "$0")"; name=$1; rm -rf stage-$name; mkdir -p stage-$name/x
IFS=',' read -ra specs <<< "$2"
for s in "${specs[@]}"; do cp "${s#*=}" "stage-$name/x/${s%%=*}"; done
tar -C stage-$name -cf - x | xz -T2 -6 > $name.tar.xz; rm -rf stage-$name; ls -la $name.tar.xz
