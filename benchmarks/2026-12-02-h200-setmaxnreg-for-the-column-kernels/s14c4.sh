#!/usr/bin/env bash
# Session 14, call 4 (one H200). Builds: regs = 665e7c0 (kernels of 58e1b2e); n32 = regs + setmaxnreg 24/240 also in the
# weight-as-A N = 32 kernels (tma_n32, _lp, _tk: B = 17-32). n32's GPU suites; same-call A/B at B = 17-32 (plain, 2 rounds;
# temps + log-probs, top-20, mask; truncation, 2 rounds). Logs under /tmp/logs4, one tarball to $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gl; rm -rf x; xz -dc c1.tar.xz | tar -xf -; xz -dc c4.tar.xz | tar -xf -
L=/tmp/logs4; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs4.tgz -C /tmp logs4; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
TO=60 run test-gpu_truncation ./x/n32-test-gpu_truncation --test-threads=1
TO=40 run test-gpu_controls ./x/n32-test-gpu_controls --test-threads=1
TO=150 run test-gpu ./x/n32-test-gpu --test-threads=1
run warm ./x/regs-bench-lm_head --bench --batches 1,32 --runs 5 --out /tmp/warm
OUT=$L FS_BENCH_ARGS="--batches 17,24,32" TO=120 run ab bash ../scripts/gpu-ab.sh 2 regs=./x/regs-bench-lm_head n32=./x/n32-bench-lm_head
for v in regs n32; do TO=40 run ctl-$v ./x/$v-bench-lm_head --bench --controls --modes temps+logprobs,top20,mask --batches 17,24,32 --out $L/ctl-$v; done
for r in 1 2; do for v in regs n32; do TO=40 run tk-$v-r$r ./x/$v-bench-lm_head --bench --truncation --batches 17,24,32 --runs 30 --out $L/tk-$v-r$r; done; done
python3 abtk.py $L regs n32 > $L/tk-ab.txt 2>&1
save
cat $L/summary.txt; grep -h "test result" $L/test-*.log; tail -8 $L/ab.log; cat $L/tk-ab.txt
for f in $L/ctl-*.log; do echo "== $f"; grep "^| " $f | head -7; done
