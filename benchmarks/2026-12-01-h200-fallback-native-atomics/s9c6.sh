#!/usr/bin/env bash
# Session 9, call 6: the committed build (c78a2ec): the gpu suite, CUDA pytest, racecheck of the flat-row fallback.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=$PWD; cd gpu-lite; xz -dc s9c6.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-200} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-30s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
python3 -m pip install -q --no-index --no-deps --target /tmp/site ./wheels/*.whl > $L/pip.log 2>&1
cd $R; PYTHONPATH=/tmp/site run pytest-cuda python3 -m pytest -q -rs -p no:cacheprovider python/tests; cd gpu-lite
TO=150 run test-gpu ./x/test-gpu --test-threads=1
TO=250 run racecheck-flat /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 flat_rows
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in $L/test-gpu.log $L/pytest-cuda.log $L/racecheck-flat.log; do echo "== $(basename $f): $(grep -hE 'test result|passed|failed|RACECHECK SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked" $f | head -5; done
tar -czf $OUT/logs.tgz -C /tmp logs
