#!/usr/bin/env bash
# CTest's command for a GPU test program: its test cases, each in a process of its own, several at
# once (their time is mostly the CPU's float64 references; the GPU is shared), then the cases that
# read the hardware counters (their names say "measured") one at a time, since two processes cannot
# read them at once. A line for each case as it ends; the failures' output at the end.
# Usage: run_gpu_cases.sh <test program> [doctest options]   (COURSE_TEST_JOBS: at most this many at
# once; default: the CPU's cores; COURSE_CASE_TIMEOUT: seconds a case may run, default 900, past which
# it fails as a hang). Exit: 77 when the program skips (no usable GPU), 1 if a case failed.
set -uo pipefail
bin=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM
list=$("$bin" --list-test-cases --no-version "$@" 2>"$dir/list.err")
rc=$?
if [ "$rc" != 0 ]; then
  printf '%s\n' "$list"
  cat "$dir/list.err"
  exit "$rc"  # 77: skipped, with the reason printed
fi
mapfile -t cases < <(printf '%s\n' "$list" | grep -vE '^\[doctest\]|^=+$|^GPU tests on|^SKIP' | sed '/^$/d')
[ "${#cases[@]}" -gt 0 ] || { echo "$bin: no test cases listed"; exit 1; }
jobs=${COURSE_TEST_JOBS:-$(nproc)}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "COURSE_TEST_JOBS must be a positive integer, not '$jobs'"; exit 1; }
case_limit=${COURSE_CASE_TIMEOUT:-900}
[[ "$case_limit" =~ ^[1-9][0-9]*$ ]] || { echo "COURSE_CASE_TIMEOUT must be a positive integer, not '$case_limit'"; exit 1; }
pass=()  # the caller's options less its test-case filters (doctest keeps the last -tc, which must be ours)
for a in "$@"; do case "$a" in -*test-case=* | -*tc=*) ;; *) pass+=("$a") ;; esac; done
total=${#cases[@]} finished=0 failed=0
printf '%s\n' "$list" | grep -E '^GPU tests on' | head -n 1
run() {  # case k: its output in $dir/k.log, its exit status in $dir/k.rc (written whole, by a rename)
  local k=$1 pat rc
  pat=$(printf '%s' "${cases[$k]}" | sed 's/[][,*?]/?/g')  # doctest's filters take wildcards
  timeout "$case_limit" "$bin" --no-version --duration=true --case-sensitive=true "${pass[@]+"${pass[@]}"}" "-tc=$pat" \
    >"$dir/$k.log" 2>&1
  rc=$?
  [ "$rc" = 124 ] && echo "the case ran past ${case_limit} s (COURSE_CASE_TIMEOUT) and was stopped: a hang?" >>"$dir/$k.log"
  # exactly one case must have run: a filter that matched none (or two) is a failure, not a pass
  if [ "$rc" = 0 ] && ! grep -qE '^\[doctest\] test cases: +1 \|' "$dir/$k.log"; then rc=1; fi
  echo "$rc" >"$dir/$k.rc.tmp" && mv "$dir/$k.rc.tmp" "$dir/$k.rc"
}
report() {
  local k=$1 rc=died
  [ -f "$dir/$k.rc" ] && rc=$(cat "$dir/$k.rc")
  finished=$((finished + 1))
  if [ "$rc" = 0 ]; then
    echo "[$finished/$total] passed: ${cases[$k]}"
  else
    failed=$((failed + 1))
    echo "[$finished/$total] FAILED (exit $rc): ${cases[$k]}"
  fi
}
alone=() running=()
for k in "${!cases[@]}"; do
  if [[ "${cases[$k]}" == *measured* ]]; then alone+=("$k"); continue; fi
  while [ "${#running[@]}" -ge "$jobs" ]; do  # wait for one to end
    wait -n 2>/dev/null
    gone=$?  # 127: no child left (one died before writing its status)
    still=()
    for j in "${running[@]}"; do
      if [ -f "$dir/$j.rc" ] || [ "$gone" = 127 ]; then report "$j"; else still+=("$j"); fi
    done
    running=("${still[@]+"${still[@]}"}")
  done
  run "$k" &
  running+=("$k")
done
wait
for j in "${running[@]+"${running[@]}"}"; do report "$j"; done
for k in "${alone[@]+"${alone[@]}"}"; do
  run "$k"
  report "$k"
done
for k in "${!cases[@]}"; do
  if [ "$(cat "$dir/$k.rc" 2>/dev/null)" != 0 ]; then
    echo "=== ${cases[$k]}"
    cat "$dir/$k.log" 2>/dev/null
  fi
done
grep -hE '^\[doctest\] assertions' "$dir"/*.log | awk '{n += $3; f += $8} END {printf "%d cases, %d assertions, %d failed\n", '"$total"', n, f}'
[ "$failed" = 0 ]
