#!/usr/bin/env bash
# Session 20, call 4 (one H200): what the processed log-mass costs the _tk column kernels. diag = HEAD with the
# lane epilogue's log-mass off in the _tk kernels (wrong truncation results: only the fused kernel's duration
# counts), asc = HEAD. ncu duration + instructions of tma_n64_tk (B = 64) and tma_n16_tk (B = 16), both configs.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cd .gl; rm -rf x; mkdir x; xz -dc s20.tar.xz | tar -xf - x/asc-bench; xz -dc s20d.tar.xz | tar -xf -
NCU=/usr/local/cuda/bin/ncu
./x/asc-bench --bench --truncation --batches 64 --runs 5 --out /tmp/warm > /dev/null 2>&1
for shape in 4096,151936 8192,128256; do for bk in "64 tma_n64_tk" "16 tma_n16_tk"; do set -- $bk
  for v in asc diag asc diag; do
    timeout 45 $NCU --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k "regex:$2" -s 2 -c 1 ./x/$v-bench --bench --truncation --shape $shape --batches $1 --runs 3 --out /tmp/o > /tmp/n.txt 2>&1
    echo "$shape B=$1 $2 $v $(grep -E 'gpu__time|inst_executed' /tmp/n.txt | awk '{print $NF}' | tr '\n' ' ')" | tee -a $OUT/ncu-mass.txt
  done
done; done
