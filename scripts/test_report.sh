#!/usr/bin/env bash
# CTest: a stage program's CSV goes through scripts/report.py to figures and a summary.
#   test_report.sh BIN_DIR   (exits 77, "skipped", when no Python has matplotlib)
set -euo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
py=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import matplotlib' 2>/dev/null; then
    py=$candidate; break
  fi
done
[ -n "$py" ] || { echo "SKIP: no Python with matplotlib (install python3-matplotlib)"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin/01_naive_matmul" --no-gpu --sizes 64,96 --csv "$out/r.csv" >/dev/null 2>&1
"$bin/02_tiled_matmul" --no-gpu --sizes 64,96 --csv "$out/r.csv" >/dev/null 2>&1
"$py" "$here/report.py" "$out/r.csv" --out "$out" >"$out/summary.txt"
for f in matmul_io.png summary.md; do
  [ -s "$out/$f" ] || { echo "report.py did not write $f"; exit 1; }
done
grep -q "02_tiled_matmul | register_blocked" "$out/summary.md" || { echo "summary lacks a row"; exit 1; }
[ "$(grep -c '^01_naive_matmul,' "$out/r.csv")" -eq 4 ] || { echo "unexpected CSV rows"; exit 1; }
echo "report.py: figures and summary written"
