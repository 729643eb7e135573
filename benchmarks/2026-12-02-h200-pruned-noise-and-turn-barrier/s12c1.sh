#!/usr/bin/env bash
# Session 12, call 1 (one H200). Builds: old = 4f1ba6e (HEAD: every entry's noise computed); prune = the noise
# skipped where its bound cannot beat the lane's candidate; quad = prune + each hidden-as-A row's floor from its
# quad's candidates. GPU suites + memcheck of quad; same-call A/B of the three (plain, 3 rounds); controls and
# truncation at large B (old vs quad).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; rm -rf x; xz -dc c1.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs1; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
mkdir -p /tmp/nccl; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH
for t in gpu_truncation gpu_controls gpu_f16; do run test-$t ./x/quad-test-$t --test-threads=1; done
FLASHSAMPLING_REQUIRE_GPUS=1 run test-tp ./x/quad-test-tp --test-threads=1
TO=150 run test-gpu ./x/quad-test-gpu --test-threads=1
TO=60 run memcheck-ctl /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/quad-test-gpu_controls --test-threads=1
TO=60 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/quad-test-gpu_truncation --test-threads=1 truncation_matches_the_cpu
run warm ./x/old-bench-lm_head --bench --batches 1,256 --runs 5 --out $L/warm
OUT=$L TO=300 run ab bash ./ab.sh 3 old=./x/old-bench-lm_head prune=./x/prune-bench-lm_head quad=./x/quad-bench-lm_head
for v in old quad; do run ctl-$v ./x/$v-bench-lm_head --bench --controls --modes temps+logprobs,top20 --batches 64,128,256,512 --out $L/ctl-$v; done
for v in old quad; do run tk-$v ./x/$v-bench-lm_head --bench --truncation --batches 64,128,256,512 --runs 30 --out $L/tk-$v; done
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in $L/test-*.log $L/memcheck-*.log; do echo "== $(basename $f): $(grep -hE 'test result|ERROR SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked|differ" $f | head -3; done
sed -n '/^A\/B/,$p' $L/ab.log
for f in ctl-old ctl-quad tk-old tk-quad; do echo "== $f"; grep -E "^\| (qwen|llama|Qwen|Llama)" $L/$f.log | head -12; done
python3 - $L <<'PY'
import csv, glob, sys
bad = 0
for f in sorted(glob.glob(sys.argv[1] + '/ab/*/results.csv')):
    for r in csv.DictReader(open(f)):
        if int(r['agree_rows']) != int(r['B']):
            bad += 1; print('DISAGREE', f, r['config'], r['B'], r['agree_rows'])
print('token agreement with GEMM+gum checked in', len(glob.glob(sys.argv[1] + '/ab/*/results.csv')), 'runs;', bad, 'rows of results short')
PY
tar -czf $OUT/logs1.tgz -C /tmp logs1
