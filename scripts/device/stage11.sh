#!/usr/bin/env bash
# Stage 11 on the GPU machine, in one call: build stage 11 (and what it reuses), then the steps named
# in STEPS (comma-separated, in this order):
#   test      the stage's GPU tests, every case in a process of its own (scripts/run_gpu_cases.sh)
#   sanitize  compute-sanitizer's four tools on the GPU tests at once (COURSE_SANITIZER=1: small shapes)
#   bench     the ladder over FA-2's benchmark grid (B·N = 16384, H = 2048 / d, N = SEQ; DTYPES, default
#             fp16) beside stage 07's fastest, then SDPA's backward (flash, cuDNN) in the same call;
#             ROUNDS rounds, each ours then the peers; BENCH_D (default "64 128") and BENCH_MASK (both,
#             causal or none) narrow the grid
#   io        the program's own IO three ways (model, CPU count, the counters: SM↔L2 and DRAM, and the
#             L2's reduction sectors, dQ's sums) for every rung, B = 1, H = 2, N = 1000, d = 64 and 128,
#             fp16: io.csv, io_metrics.txt (the program's stdout) and io_table.txt (scripts/io_table.py)
#   ncu       Nsight Compute on one launch of each rung in NCU_VARIANTS (default every rung) at each d in
#             NCU_D (default 128), N = 4096, fp16: duration, stalls, L2 throughput and reductions;
#             NCU_STALLS=1 adds each stall reason's warps a issued instruction (WarpStateStats' breakdown)
# CSVs land in $OUT, the logs in $OUT/logs.tgz; a table of each rung's and peer's TFLOP/s and × cuDNN is printed last.
# Usage there: OUT=/dir STEPS=test,bench scripts/device/stage11.sh   (Eigen/doctest/CLI11 in .deps/)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
STEPS=",${STEPS:-test,bench},"
DTYPES=${DTYPES:-fp16}
SEQ=${SEQ:-1024,4096,16384}
export COURSE_NO_APT=1 PYTHONUNBUFFERED=1
has() { [[ "$STEPS" == *",$1,"* ]]; }
summary=()
note() { summary+=("$1"); echo "    $1"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
echo "=== build ($(date +%T))"
if cmake --preset default -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1 &&
   cmake --build build -j 16 --target 11_flash_v3_backward >>"$OUT/build.log" 2>&1; then
  note "build: ok, $(grep -ci 'warning' "$OUT/build.log") warning lines"
else
  note "build: FAILED"; tail -n 40 "$OUT/build.log"; exit 1
fi
if has test; then
  echo "=== tests ($(date +%T))"
  scripts/run_gpu_cases.sh build/bin/test_11_flash_v3_backward_gpu >"$OUT/test_gpu.log" 2>&1
  note "test_11_flash_v3_backward_gpu: rc=$? $(tail -n 1 "$OUT/test_gpu.log")"
  grep -A30 "^=== " "$OUT/test_gpu.log" | head -n 60
fi
if has sanitize; then
  echo "=== compute-sanitizer ($(date +%T))"
  pids=()
  for tool in memcheck racecheck synccheck initcheck; do
    COURSE_SANITIZER=1 timeout "${SAN_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      build/bin/test_11_flash_v3_backward_gpu >"$OUT/sanitize_$tool.log" 2>&1 &
    pids+=($!)
  done
  k=0
  for tool in memcheck racecheck synccheck initcheck; do
    wait "${pids[$k]}"; rc=$?; k=$((k + 1))
    note "sanitizer $tool: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -n 1) $(grep -E '^\[doctest\] assertions' "$OUT/sanitize_$tool.log")"
  done
fi
if has bench; then
  echo "=== bench ($(date +%T))"
  csv="$OUT/bench.csv"
  for round in $(seq 1 "${ROUNDS:-1}"); do
    masks=("" "--causal")
    [ "${BENCH_MASK:-both}" = causal ] && masks=("--causal")
    [ "${BENCH_MASK:-both}" = none ] && masks=("")
    for d in ${BENCH_D:-64 128}; do
      for causal in "${masks[@]}"; do
        timeout 200 build/bin/11_flash_v3_backward --tokens 16384 --heads $((2048 / d)) --seq "$SEQ" --d $d $causal \
          --dtype "$DTYPES" --check-heads 1 --no-counters --count-limit 0 ${VARIANTS:+--variants "$VARIANTS"} \
          --csv "$csv" >>"$OUT/bench.log" 2>&1 || note "bench d=$d $causal: rc=$?"
      done
    done
    timeout 200 python3 scripts/peers/torch_attention.py --csv "$csv" --stage 11_flash_v3_backward --backward \
      --tokens 16384 --width 2048 --d "$(echo ${BENCH_D:-64 128} | tr ' ' ,)" --mask "${BENCH_MASK:-both}" --seq "$SEQ" --dtype "$DTYPES" --backends flash,cudnn \
      >>"$OUT/bench.log" 2>&1 || note "peers: rc=$?"
  done
  python3 scripts/device/ladder_steps.py "$csv" \
    "$(python3 -c "import csv,sys; print(','.join(dict.fromkeys(r['variant'] for r in csv.DictReader(open(sys.argv[1])) if r['tflops'] and r['variant'] != 'pytorch_cudnn_bwd')))" "$csv")" \
    --against pytorch_cudnn_bwd | tee "$OUT/bench_table.txt"
fi
if has io; then
  echo "=== io ($(date +%T))"
  for d in 64 128; do
    timeout 200 build/bin/11_flash_v3_backward --batch 1 --heads 2 --seq 1000 --d $d --dtype fp16 \
      --metrics lts__t_sectors_op_red.sum --csv "$OUT/io.csv" >>"$OUT/io_metrics.txt" 2>&1 || note "io d=$d: rc=$?"
  done
  python3 scripts/io_table.py "$OUT/io.csv" --extra "$OUT/io_metrics.txt" --metric lts__t_sectors_op_red.sum \
    | tee "$OUT/io_table.txt"
fi
if has ncu; then
  echo "=== ncu ($(date +%T))"
  stalls=""
  [ "${NCU_STALLS:-0}" = 1 ] && stalls=',regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
  for d in ${NCU_D:-128}; do
  for v in ${NCU_VARIANTS:-wgmma tma warp_specialized bulk_dq one_dq deterministic tiles}; do
    timeout 150 ncu --clock-control none -k regex:flash_v3_bwd -c 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
      --section MemoryWorkloadAnalysis \
      --metrics sm__inst_executed.sum,lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,lts__t_requests_op_red.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed_op_global_red.sum${stalls} \
      build/bin/11_flash_v3_backward --batch 4 --heads $((2048 / d)) --seq 4096 --d "$d" --dtype fp16 --variants "$v" \
      --reps 1 --warmup 0 --check-heads 1 --no-counters --count-limit 0 >"$OUT/ncu_${v}_$d.log" 2>&1
    note "ncu $v d=$d: rc=$?"
    grep -E "Duration|Compute (SM) Throughput|inst_executed|lts__t_|dram__bytes|Issue Slots Busy|No Eligible|Registers Per|Warp Cycles Per Issued|L2 Cache Throughput|DRAM Throughput|issue_stalled" "$OUT/ncu_${v}_$d.log" \
      | sed 's/^ */    /' | cut -c1-150 | tee -a "$OUT/ncu_table.txt"
  done
  done
fi
# The logs into one archive (the device call brings back 8 files at most).
(cd "$OUT" && tar czf logs.tgz --remove-files ./*.log 2>/dev/null)
echo "=== summary ($(date +%T))"
printf '%s\n' "${summary[@]}"
