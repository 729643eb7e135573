#!/usr/bin/env bash
# Session 13, call 3 (one H200). Builds: final = ad1d833's kernels; screen = the screen-and-draw epilogue
# (update_groups_above: a branch-free screen of 8 groups, then a loop over the entries that could win);
# lean = screen + one group at a time in the _lp/_tk hidden-as-A kernels (their spills) + the pass's
# accumulators picked by blends on the bits of r instead of a branch tree.
# GPU suites + memcheck of screen; same-call A/B (full table, 2 rounds); truncation and controls A/B; ncu of
# tmat_n64x2 at Qwen3-8B B = 256 (screen). Logs under /tmp/logs3, one tarball to $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 FLASHSAMPLING_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd gpu-lite; rm -rf x; xz -dc c2.tar.xz | tar -xf -; xz -dc c3b.tar.xz | tar -xf -
L=/tmp/logs3; rm -rf $L; mkdir -p $L
save() { tar -czf $OUT/logs3.tgz --exclude='*.ncu-rep' -C /tmp logs3; }
run() { local name=$1; shift; local s=$(date +%s); timeout ${TO:-120} "$@" > "$L/$name.log" 2>&1; local rc=$?; echo "$(printf '%-22s rc=%3d %4ss' "$name" $rc $(( $(date +%s) - s ))) (t=$(el)s)" | tee -a $L/summary.txt; save; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $L/machine.txt
mkdir -p /tmp/nccl; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH
TO=60 run test-gpu_truncation ./x/lean-test-gpu_truncation --test-threads=1
for t in gpu_controls gpu_f16; do TO=40 run test-$t ./x/lean-test-$t --test-threads=1; done
FLASHSAMPLING_REQUIRE_GPUS=1 TO=40 run test-tp ./x/lean-test-tp --test-threads=1
TO=150 run test-gpu ./x/lean-test-gpu --test-threads=1 --nocapture
TO=40 run memcheck-ctl /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/lean-test-gpu_controls --test-threads=1
TO=60 run memcheck-tk /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 ./x/lean-test-gpu_truncation --test-threads=1 flat_rows tied_and_short rows_that_keep
run warm ./x/final-bench-lm_head --bench --batches 1,256 --runs 5 --out /tmp/warm
OUT=$L TO=200 run ab bash ./ab.sh 2 final=./x/final-bench-lm_head screen=./x/screen-bench-lm_head lean=./x/lean-bench-lm_head
for r in 1 2; do for v in final screen lean; do TO=40 run tk-$v-r$r ./x/$v-bench-lm_head --bench --truncation --batches 33,64,256 --runs 30 --out $L/tk-$v-r$r; done; done
for v in final screen lean; do TO=30 run ctl-$v ./x/$v-bench-lm_head --bench --controls --modes temps+logprobs,mask,top20 --batches 32,64,256 --out $L/ctl-$v; done
NCU=/usr/local/cuda/bin/ncu
fine() { local name=$1 v=$2; shift 2; local s=$(date +%s); timeout 100 $NCU --section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats --section InstructionStats --warp-sampling-interval 0 --import-source no -k "regex:^fused_sample_wgmma_tmat_n64x2\$" -s 4 -c 1 -o $L/$name ./x/$v-bench-lm_head --bench --shape 4096,151936 --batches 256 --runs 5 --out /tmp/o-$name > $L/full-$name.txt 2>&1; echo "fine $name rc=$? $(( $(date +%s) - s ))s (t=$(el)s)" | tee -a $L/summary.txt; $NCU -i $L/$name.ncu-rep --page details > $L/details-$name.txt 2>&1; $NCU -i $L/$name.ncu-rep --page source --csv --print-source sass > $L/sass-$name.csv 2>&1; save; }
fine x2-lean lean
python3 abtk.py $L final screen lean > $L/tk-ab.txt 2>&1
save
cat $L/summary.txt; tail -40 $L/ab.log; cat $L/tk-ab.txt
for f in $L/details-*.txt; do echo "== $f"; grep -E "^ +Duration|Warp Cycles Per Issued|Issued Warp Per Scheduler" $f | head -4; done
for f in $L/sass-*.csv; do echo "== $f"; python3 segments.py $f 2>&1 | grep "^seg"; done
for f in $L/sass-*.csv; do echo "== $f"; python3 segments.py $f | head -3; done
