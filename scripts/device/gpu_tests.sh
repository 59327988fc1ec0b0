#!/usr/bin/env bash
# The GPU tests of several stages on the GPU machine, in one call: build their test programs (and
# programs), then every test case of every stage in a process of its own, all at once
# (parallel_tests.sh), then compute-sanitizer's four tools at once on the stages in SANITIZE.
#   STAGES    the stages' folder names, comma-separated (default: 06_flash_v2,...,10_ring_attention)
#   SANITIZE  stages whose GPU tests run under the four tools (COURSE_SANITIZER=1: small shapes), each
#             tool in a process of its own; SAN_FILTER a doctest filter for them (default: all cases)
# Logs land in $OUT; a short table is printed last.
# Usage there: OUT=/dir STAGES=08_flash_v3,09_flash_v3_fp8 scripts/device/gpu_tests.sh   (.deps/ carried)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
STAGES=${STAGES:-06_flash_v2,07_backward,08_flash_v3,09_flash_v3_fp8,10_ring_attention}
SANITIZE=${SANITIZE:-}
export COURSE_NO_APT=1 PYTHONUNBUFFERED=1
IFS=',' read -ra stages <<<"$STAGES"
IFS=',' read -ra sanitize <<<"$SANITIZE"
summary=()
note() { summary+=("$1"); echo "    $1"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
echo "=== build ($(date +%T))"
targets=()
for s in "${stages[@]}"; do targets+=("$s" "test_${s}_gpu"); done
if cmake --preset default -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1 &&
   cmake --build build -j 16 --target "${targets[@]}" >>"$OUT/build.log" 2>&1; then
  note "build: ok, $(grep -ci 'warning' "$OUT/build.log") warning lines"
else
  note "build: FAILED"; tail -n 40 "$OUT/build.log"; exit 1
fi
echo "=== tests ($(date +%T))"
pids=()
for s in "${stages[@]}"; do
  scripts/device/parallel_tests.sh "build/bin/test_${s}_gpu" "$OUT/test_$s" >"$OUT/test_${s}_summary.txt" 2>&1 &
  pids+=($!)
done
for k in "${!pids[@]}"; do
  wait "${pids[$k]}"
  note "$(head -n 1 "$OUT/test_${stages[$k]}_summary.txt")"
  tail -n +2 "$OUT/test_${stages[$k]}_summary.txt" | grep -v "^    [0-9.]* s: " | head -n 30
done
if [ ${#sanitize[@]} -gt 0 ]; then
  echo "=== compute-sanitizer ($(date +%T))"
  pids=() logs=()
  for s in "${sanitize[@]}"; do
    for tool in memcheck racecheck synccheck initcheck; do
      log="$OUT/sanitize_${s}_$tool.log"
      COURSE_SANITIZER=1 timeout "${SAN_TIMEOUT:-400}" compute-sanitizer --tool "$tool" --error-exitcode 99 \
        "build/bin/test_${s}_gpu" ${SAN_FILTER:+"$SAN_FILTER"} >"$log" 2>&1 &
      pids+=($!) logs+=("$s $tool:$log")
    done
  done
  for k in "${!pids[@]}"; do
    wait "${pids[$k]}"; rc=$?
    log=${logs[$k]#*:}
    note "sanitizer ${logs[$k]%%:*}: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1) $(grep -E '^\[doctest\] assertions' "$log")"
    grep -E "^=+ (Error|Warning|Race|   )" "$log" | head -n 8
  done
fi
# The per-case logs into one archive (the machine returns a limited number of files)
(cd "$OUT" && tar czf test_logs.tgz test_*_[0-9]*.log && rm -f test_*_[0-9]*.log)
echo "=== summary ($(date +%T))"
printf '%s\n' "${summary[@]}"
