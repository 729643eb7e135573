#!/usr/bin/env bash
# Session 9, call 2: the fallback's radix select on native 32-bit shared atomics (A: red.u32 counts;
# B: + match.any aggregation of counts) and the truncation tail launched with programmatic stream
# serialization — A/B/old (a7ac511) same call; tests, sanitizers, pytest on B (+ gpu_truncation on A).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=$PWD; cd gpu-lite; xz -dc s9c2.tar.xz | tar -xf -; echo "unpacked $(el)s"
L=/tmp/logs; mkdir -p $L; S=()
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-200} "$@" > "$L/$name.log" 2>&1; local rc=$?; S+=("$(printf '%-30s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s )))"); echo "${S[-1]} (t=$(el)s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/gpu.txt
for t in gpu_truncation gpu_truncation-a gpu_controls gpu_f16; do run test-$t ./x/test-$t --test-threads=1; done
for r in 1 2; do
  for v in b:bench-lm_head a:bench-a old:old-bench-lm_head; do n=${v%%:*}; bin=${v#*:}
    run tk-$n-r$r ./x/$bin --bench --truncation --batches 1,16,64,256 --out $L/tk-$n-r$r
  done
done
for v in b:bench-lm_head a:bench-a old:old-bench-lm_head; do n=${v%%:*}; bin=${v#*:}
  run heavy-$n ./x/$bin --bench --truncation --heavy-rows --batches 1,16,64 --out $L/heavy-$n
done
for v in b:bench-lm_head old:old-bench-lm_head; do n=${v%%:*}; bin=${v#*:}
  run ctl-$n ./x/$bin --bench --controls --modes temps+logprobs,top20 --batches 1,32,64 --out $L/ctl-$n
done
CS=/usr/local/cuda/bin/compute-sanitizer
TO=150 run memcheck-tk $CS --tool memcheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 flat_rows tied_and_short truncation_matches_the_cpu
TO=120 run racecheck-tk $CS --tool racecheck --error-exitcode 9 ./x/test-gpu_truncation --test-threads=1 flat_rows tied_and_short
python3 -m pip install -q --no-index --no-deps --target /tmp/site ./wheels/*.whl > $L/pip.log 2>&1
cd $R; PYTHONPATH=/tmp/site run pytest-cuda python3 -m pytest -q -rs -p no:cacheprovider python/tests; cd gpu-lite
TO=150 run test-gpu ./x/test-gpu --test-threads=1
printf '%s\n' "${S[@]}" | tee $L/summary.txt
for f in tk-b-r1 tk-a-r1 tk-old-r1 tk-b-r2 tk-a-r2 tk-old-r2 heavy-b heavy-a heavy-old ctl-b ctl-old; do echo "== $f"; grep -E "^\| (qwen|llama)" $L/$f.log | sort -u -t'|' -k2,2 -k3,3n | head -10; done
for f in $L/test-*.log $L/pytest-cuda.log $L/memcheck-tk.log $L/racecheck-tk.log; do echo "== $(basename $f): $(grep -hE 'test result|passed|failed|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -2 | tr '\n' ' ')"; grep -E "FAILED|panicked" $f | head -5; done
tar -czf $OUT/logs.tgz -C /tmp logs
