#!/usr/bin/env bash
# Session 12, call 2 (one H200): call 1's archive again (old = 4f1ba6e, prune, quad; see s12c1.sh), every log
# written straight under $OUT (call 1 ran past its limit before its archive). Benches first, then the truncation
# suite with timestamps (quad, then old), then quad's `gpu` suite.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; rm -rf x; xz -dc c1.tar.xz | tar -xf -; xz -dc c2.tar.xz | tar -xf -
L=$OUT/logs2; mkdir -p $L
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" 2>&1 | while IFS= read -r l; do echo "$(( $(date +%s) - s ))s $l"; done > "$L/$name.log"; local rc=${PIPESTATUS[0]}; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
mkdir -p /tmp/nccl; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH
run warm ./x/old-bench-lm_head --bench --batches 1,256 --runs 5 --out /tmp/warm
OUT=$L TO=200 run ab bash ./ab.sh 2 old=./x/old-bench-lm_head prune=./x/prune-bench-lm_head quad=./x/quad-bench-lm_head
for v in old quad; do TO=40 run ctl-$v ./x/$v-bench-lm_head --bench --controls --modes temps+logprobs,top20 --batches 64,128,256,512 --out $L/ctl-$v; done
for v in old quad; do TO=40 run tk-$v ./x/$v-bench-lm_head --bench --truncation --batches 64,128,256,512 --runs 30 --out $L/tk-$v; done
TO=100 run test-gpu_truncation ./x/quad-test-gpu_truncation --test-threads=1 --nocapture
TO=50 run old-test-gpu_truncation ./x/old-test-gpu_truncation --test-threads=1 --nocapture
TO=120 run test-gpu ./x/quad-test-gpu --test-threads=1 --nocapture
