#!/usr/bin/env bash
# Stage 12 on the GPU machine, in one call: build stage 12, then the steps named in STEPS
# (comma-separated, in this order):
#   ladder    the decode ladder (VARIANTS, default every rung but per_head, and the copy) over ragged
#             batches: B = 1 at 8k, 32k, 128k; B = 8 at 8k, 64k; B = 64 at 8k; H_q = 8, 32, 64, H_kv = 8,
#             d = 128, fp16, auto splits: ladder.csv
#   peers     the same rungs on equal lengths (--equal: the dense batch SDPA takes), B = 1 and 8 at 8k
#             and 32k, then SDPA's decode (scripts/peers/torch_decode.py) on the same problems: peers.csv
#   splits    split counts 1..64 for gqa and persistent at B = 1, 32k and B = 64, 8k (H_q = 32): splits.csv
#   io        the program's IO three ways (model, CPU count, SM↔L2 and DRAM) at B = 1, 32k: io.csv
#   ncu       Nsight Compute on one launch of each kernel of NCU_VARIANTS (default gqa) at B = 1, 128k
#             and B = 64, 8k (H_q = 32): ncu.txt
# CSVs land in $OUT, the logs in $OUT/logs.tgz; a table of GB/s against the copy is printed last.
# Usage there: OUT=/dir STEPS=ladder,splits scripts/device/stage12.sh   (Eigen/doctest/CLI11 in .deps/)
# The GPU tests and the four sanitizers: STAGES=12_inference SANITIZE=12_inference scripts/device/gpu_tests.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
STEPS=",${STEPS:-ladder},"
VARIANTS=${VARIANTS:-split_kv,gqa,persistent,copy}
export COURSE_NO_APT=1 PYTHONUNBUFFERED=1
has() { [[ "$STEPS" == *",$1,"* ]]; }
summary=()
note() { summary+=("$1"); echo "    $1"; }
prog=build/bin/12_inference
{ git log -1 --oneline; git status --short; } >"$OUT/commit.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
echo "=== build ($(date +%T))"
if cmake --preset default -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1 &&
   cmake --build build -j 16 --target 12_inference >>"$OUT/build.log" 2>&1; then
  note "build: ok, $(grep -ci 'warning' "$OUT/build.log") warning lines"
else
  note "build: FAILED"; tail -n 40 "$OUT/build.log"; exit 1
fi
run() {  # run <csv> <log> <program options...>
  local csv=$1 log=$2
  shift 2
  timeout 300 "$prog" --heads-q 8,32,64 --heads-kv 8 --d 128 --dtype fp16 --splits auto --variants "$VARIANTS" \
    --no-counters --count-limit 0 --csv "$csv" "$@" >>"$log" 2>&1 || note "$prog $*: rc=$?"
}
if has ladder; then
  echo "=== ladder ($(date +%T))"
  run "$OUT/ladder.csv" "$OUT/ladder.log" --batch 1 --context 8192,32768,131072
  run "$OUT/ladder.csv" "$OUT/ladder.log" --batch 8 --context 8192,65536
  run "$OUT/ladder.csv" "$OUT/ladder.log" --batch 64 --context 8192
  python3 scripts/decode_table.py ladder "$OUT/ladder.csv" | tee "$OUT/ladder_table.txt"
fi
if has peers; then
  echo "=== peers ($(date +%T))"
  run "$OUT/peers.csv" "$OUT/peers.log" --equal --batch 1,8 --context 8192,32768
  timeout 300 python3 scripts/peers/torch_decode.py --csv "$OUT/peers.csv" --batch 1,8 --context 8192,32768 \
    --heads-q 8,32,64 --heads-kv 8 --d 128 --dtype fp16 >>"$OUT/peers.log" 2>&1 || note "torch_decode: rc=$?"
  python3 scripts/decode_table.py ladder "$OUT/peers.csv" --peers "$OUT/peers.csv" | tee "$OUT/peers_table.txt"
fi
if has splits; then
  echo "=== splits ($(date +%T))"
  for bc in "1 32768" "64 8192"; do
    set -- $bc
    timeout 300 "$prog" --batch "$1" --context "$2" --heads-q 32 --heads-kv 8 --d 128 --dtype fp16 --variants gqa,persistent \
      --splits 1,2,3,4,8,16,24,32,48,64,auto --no-counters --count-limit 0 --csv "$OUT/splits.csv" >>"$OUT/splits.log" 2>&1 ||
      note "splits $bc: rc=$?"
  done
  python3 scripts/decode_table.py splits "$OUT/splits.csv" | tee "$OUT/splits_table.txt"
fi
if has io; then
  echo "=== io ($(date +%T))"
  timeout 300 "$prog" --batch 1 --context 32768 --heads-q 32 --heads-kv 8 --splits 1,16,auto --csv "$OUT/io.csv" \
    >"$OUT/io.log" 2>&1 || note "io: rc=$?"
  python3 scripts/io_table.py "$OUT/io.csv" | tee "$OUT/io_table.txt"
fi
if has ncu; then
  echo "=== ncu ($(date +%T))"
  for bc in "1 131072" "64 8192"; do
    set -- $bc
    for v in ${NCU_VARIANTS:-gqa}; do
      timeout 200 ncu --clock-control none -k regex:decode_ -c 2 --section SpeedOfLight --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
        --metrics dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
        "$prog" --batch "$1" --context "$2" --heads-q 32 --heads-kv 8 --variants "$v" --reps 1 --warmup 0 \
        --no-counters --count-limit 0 >>"$OUT/ncu.txt" 2>&1 || note "ncu $v $bc: rc=$?"
    done
  done
  grep -E "decode_|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|No Eligible|dram__bytes_read" "$OUT/ncu.txt" \
    | sed 's/^ */  /' | cut -c1-140 | tee "$OUT/ncu_table.txt"
fi
(cd "$OUT" && tar czf logs.tgz --remove-files ./*.log 2>/dev/null)
echo "=== summary ($(date +%T))"
printf '%s\n' "${summary[@]}"
