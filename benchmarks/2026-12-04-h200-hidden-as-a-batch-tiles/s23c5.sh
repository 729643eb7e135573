#!/usr/bin/env bash
# Session 23, call 5: the final hidden-as-A rule (65-79 rows tmat_n64x2; 80-128 tmat_n64 up to D = 5120, else
# tmat_n64x2; 129-192 tmat_n64; beyond tmat_n64x2) against base 1654bb7 over five LM-head shapes, then the tests.
set -u
cd "$(dirname "$0")"
[ -d b ] || xz -dc bundle.tar.xz | tar -xf -
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() { echo "[$(el)s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > $L/machine.txt
step "A/B x2"; FS_BENCH_ARGS="--shape 4096,151936 --shape 8192,128256 --shape 6144,128256 --shape 12288,32768 --shape 16384,128256 --batches 65,96,128,160,256" OUT=$OUT/abp timeout 330 b/ab.sh 2 base=b/bench-base new=b/bench-new > $L/ab.log 2>&1; echo "rc=$?"; grep -v "^round" $L/ab.log | grep -E "^\||A/B"; grep "^round" $L/ab.log | tr '\n' ' '; echo
for t in gpu gpu_truncation gpu_controls; do
  if [ $(el) -lt 480 ]; then step "tests $t"; timeout $(( 570 - $(el) )) b/test-$t > $L/t-$t.log 2>&1; echo "rc=$?"; grep -E "test result|panicked|FAILED" $L/t-$t.log | tail -4; fi
done
if [ $(el) -lt 540 ]; then step "memcheck"; FLASHSAMPLING_GPU_TEST_QUICK=1 timeout $(( 590 - $(el) )) $SAN --tool memcheck --error-exitcode 9 b/test-gpu device_api > $L/memcheck.log 2>&1; echo "rc=$?"; grep -E "ERROR SUMMARY|test result" $L/memcheck.log; fi
step "done"
cd $OUT && tar -czf all.tgz logs abp 2>/dev/null; rm -rf logs abp
