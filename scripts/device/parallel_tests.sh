#!/usr/bin/env bash
# One doctest binary's test cases, each in a process of its own, all at once (their time is the CPU's
# float64 references; the GPU is shared). Usage: parallel_tests.sh <test binary> <log prefix> [doctest flags]
# Writes <prefix>_<k>.log a case and <prefix>.log (all of them); prints one line (cases, passed,
# failed, assertions), then each failure's first errors and the slowest cases. Exit 1 if a case failed.
set -uo pipefail
bin=$1 prefix=$2
rm -f "${prefix}.failed"
shift 2
mapfile -t cases < <("$bin" --list-test-cases --no-version 2>/dev/null | grep -vE '^\[doctest\]|^=+$|^GPU tests on|^SKIP' | sed '/^$/d')
pids=()
for i in "${!cases[@]}"; do
  # (doctest's filters take wildcards: commas and brackets in a name would split or match otherwise)
  pat=$(printf '%s' "${cases[$i]}" | sed 's/[][,*?]/?/g')
  timeout "${TEST_TIMEOUT:-450}" "$bin" --duration=true "-tc=$pat" "$@" >"${prefix}_$i.log" 2>&1 &
  pids+=($!)
done
fails=0 asserts=0 ran=0 failed=()
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; rc=$?
  n=$(grep -oE '^\[doctest\] assertions: +[0-9]+' "${prefix}_$i.log" | grep -oE '[0-9]+$')
  c=$(grep -oE '^\[doctest\] test cases: +[0-9]+ \| +[0-9]+ passed' "${prefix}_$i.log" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
  asserts=$((asserts + ${n:-0})); ran=$((ran + ${c:-0}))
  [ "$rc" = 0 ] || { fails=$((fails + 1)); failed+=("$i"); echo "  FAILED rc=$rc: ${cases[$i]} (${prefix}_$i.log)" >>"${prefix}.failed"; }
done
cat "${prefix}"_*.log >"${prefix}.log"
echo "$(basename "$bin"): ${#cases[@]} cases in parallel, $ran passed, $fails failed, $asserts assertions"
[ -f "${prefix}.failed" ] && cat "${prefix}.failed"
for i in "${failed[@]+"${failed[@]}"}"; do grep -B2 -A12 "ERROR" "${prefix}_$i.log" | head -n 30; done
grep -hE "^[0-9.]+ s: " "${prefix}"_*.log | sort -rn | head -n 3 | sed 's/^/    /'
[ "$fails" = 0 ]
