# The shared part of a device call's script (benchmarks/*/callN.sh since session 40), sourced from the repository
# root on the device machine after setting C, the carried call folder:
#
#   C=gpurun/e4
#   BUDGET=300            # optional: no step starts past this many seconds (default 520)
#   . scripts/device-call.sh
#   machine; run LABEL TIMEOUT COMMAND...; ...; finish
#
# It unpacks $C/bins.tar.xz (the stripped binaries built here) into $C/bin ($B), keeps NCCL's NVLink multicast off,
# makes the GPU tests fail instead of skipping, and writes each step's output to $L/LABEL.log ($L = $OUT/logs).
# `run` gives a step at most TIMEOUT seconds and none past BUDGET seconds from the start (default 520), prints its
# exit code, time, test totals and the failure lines, and returns the step's exit code; `finish` prints the summary
# table last and packs the logs into $OUT/all.tgz.
set -u
: "${C:?set C to the call folder}"
mkdir -p "$C/bin"
[ -n "$(ls -A "$C/bin")" ] || xz -dc "$C/bins.tar.xz" | tar -xf - -C "$C/bin"
B=$PWD/$C/bin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" FLASHSAMPLING_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
L=$OUT/logs
mkdir -p "$L"
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
sum=()
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer || true)
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)

run() { # LABEL TIMEOUT COMMAND...
  local label=$1 to=$2
  shift 2
  if [ $(($(el) + 20)) -gt "${BUDGET:-520}" ]; then
    sum+=("$(printf '%-24s skipped (time)' "$label")")
    return 124
  fi
  [ $(($(el) + to)) -gt "${BUDGET:-520}" ] && to=$((${BUDGET:-520} - $(el)))
  local s rc res
  s=$(date +%s)
  timeout "$to" "$@" >"$L/$label.log" 2>&1
  rc=$?
  res=$(grep -E '^test result:' "$L/$label.log" | tail -1 | sed 's/; 0 measured.*//')
  sum+=("$(printf '%-24s rc=%-3d %4ss %s' "$label" "$rc" $(($(date +%s) - s)) "$res")")
  echo "${sum[-1]}"
  grep -E "FAILED|panicked|^SKIP|error:|differ|ERROR SUMMARY|ILLEGAL|Invalid" "$L/$label.log" | cut -c1-300 | head -6
  return $rc
}

machine() {
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader |
    tee "$L/machine.txt"
}

finish() {
  echo
  echo "==== summary ($(el)s) ===="
  printf '%s\n' "${sum[@]}"
  (cd "$OUT" && tar -czf all.tgz logs && rm -rf logs)
  true
}
