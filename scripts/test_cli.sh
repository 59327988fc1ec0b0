#!/usr/bin/env bash
# CTest: bad input ends with a message and exit 2 (docs/running.md: "Bad input ..."), in the stage programs
# and in ./course run --stages, before any work; and a run with nothing to compare skips the
# float64 reference.
#   test_cli.sh BIN_DIR
set -uo pipefail
bin=$1
root=$(cd "$(dirname "$0")/.." && pwd)
failed=0

# expect CODE TEXT command...: the command exits with CODE and its output contains TEXT.
expect() {
  local code=$1 text=$2 got output
  shift 2
  output=$("$@" 2>&1)
  got=$?
  if [ "$got" -ne "$code" ] || ! grep -qF -- "$text" <<< "$output"; then
    echo "FAIL: $* exited $got (expected $code, with '$text'):"
    sed 's/^/    /' <<< "$output" | tail -n 5
    failed=1
  else
    echo "ok: $* -> $code"
  fi
}

expect 2 "fp16 with d = 64 or 128" "$bin/06_flash_v2" --dtype fp16 --d 32
expect 2 "fp16 with d = 64 or 128" "$bin/07_backward" --dtype fp16 --d 32 --variants tc
expect 2 "run fp16 with d = 64" "$bin/07_backward" --variants wide --d 128
expect 2 "--seed: must be a whole number" "$bin/01_naive_matmul" --seed -1
expect 2 "--seed: must be a whole number" "$bin/06_flash_v2" --seed=-5
# Stage 09's variants come from its registry: an old experiment's suffix is no name; a rung at a d or a
# scheme it does not run is refused before any work.
expect 2 "unknown variant 'fp8_per_tensor_wide_stsm'" "$bin/09_flash_v3_fp8" --variants fp8_per_tensor_wide_stsm
expect 2 "--variants epilogue runs d = 128, not --d 64" "$bin/09_flash_v3_fp8" --variants epilogue --d 64
expect 2 "takes the per-tensor schemes only" "$bin/09_flash_v3_fp8" --variants lin --schemes per_block
expect 2 "unknown variant 'ring_fast'" "$bin/10_ring_attention" --variants ring_fast
expect 2 "not 70000 × 70000 = 4900000000" "$bin/05_flash_v1" --batch 70000 --heads 70000
# B·H as a whole number, never "4900000000.000000"
if "$bin/05_flash_v1" --batch 70000 --heads 70000 2>&1 | grep -q '\.000000'; then
  echo "FAIL: B·H printed as a float"; failed=1
fi
expect 2 "The stages are:" "$root/course" run --stages 99
expect 2 "05_flash_v1" "$root/course" run --stages 5,nope
expect 2 "--stages needs a value" "$root/course" run --stages
expect 2 "unknown option" "$root/course" run --bogus

# Nothing to compare (no CPU count, no GPU): no float64 reference is computed.
expect 0 "inputs (nothing to check: no reference)" "$bin/06_flash_v2" --no-gpu --count-limit 0 --heads 1 --seq 512
expect 0 "inputs (nothing to check: no reference)" "$bin/07_backward" --no-gpu --heads 1 --seq 64 --dtype fp16 --variants standard
expect 0 "inputs (nothing to check: no reference)" "$bin/01_naive_matmul" --no-gpu --sizes 1024

if [ "$failed" -ne 0 ]; then
  echo "command line: some cases failed"
  exit 1
fi
echo "command line: every case as expected"
