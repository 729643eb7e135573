#!/usr/bin/env bash
# Session 16, call 4 (one H200): the tp suite with one GPU (one-rank paths: the truncation step's entries and the
# log-probability launches of a rank) and racecheck of the truncation step's two entries, on the committed build.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c4.tar.xz | tar -xf -
L=/tmp/logs4; rm -rf $L; mkdir -p $L
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; tar -czf $OUT/logs4.tgz -C /tmp logs4; }
TO=120 run test-tp ./x/raw-test-tp --test-threads=1 --nocapture
TO=100 run racecheck-step /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 9 ./x/raw-test-gpu_truncation --test-threads=1 both_truncation_step tied_and_short
cat $L/summary.txt; grep -E "test result|SKIP|RACECHECK SUMMARY|ERROR SUMMARY|hazard" $L/*.log | head -20
