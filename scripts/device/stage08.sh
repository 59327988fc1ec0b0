#!/usr/bin/env bash
# Stage 08 on the GPU machine, in one call: build stage 08 (and what it reuses), then the steps named
# in STEPS (comma-separated, in this order):
#   sass      the rungs' resource use and a count of the instructions that matter (HGMMA, UTMALDG, ...)
#   test      the stage's GPU tests
#   sanitize  compute-sanitizer's four tools on the GPU tests (small shapes)
#   race      the planted races (build/bin/08_race_demo, 08_flash_v3/race_demo.cu): each case plain, then
#             under racecheck, memcheck and synccheck; what each reported, into the summary
#   bench     the ladder grid (fp16 unless DTYPES says otherwise) and the peers in the same call
#   ncu       Nsight Compute on one launch of each rung (d = 128 and 64, N = 4096, fp16)
# Logs and CSVs land in $OUT; a short table is printed last.
# Usage there: OUT=/dir STEPS=test,bench scripts/device/stage08.sh   (Eigen/doctest/CLI11 in .deps/)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
STEPS=",${STEPS:-sass,test,bench},"
DTYPES=${DTYPES:-fp16}
SEQ=${SEQ:-1024,4096,16384}
export COURSE_NO_APT=1 PYTHONUNBUFFERED=1
has() { [[ "$STEPS" == *",$1,"* ]]; }
summary=()
note() { summary+=("$1"); echo "    $1"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/gpu.txt"
echo "=== build ($(date +%T))"
if cmake --preset default -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1 &&
   cmake --build build -j 16 --target 08_flash_v3 06_flash_v2 >>"$OUT/build.log" 2>&1; then
  note "build: ok, $(grep -ci 'warning' "$OUT/build.log") warning lines"
else
  note "build: FAILED"; tail -n 40 "$OUT/build.log"; exit 1
fi

if has sass; then
  echo "=== sass ($(date +%T))"
  for f in build/08_flash_v3/CMakeFiles/08_flash_v3_lib.dir/fa3_*.cu.o; do
    cuobjdump -res-usage "$f" >>"$OUT/resource_usage.txt" 2>&1
    cuobjdump -sass "$f" >>"$OUT/sass.txt" 2>&1
  done
  python3 scripts/device/sass_counts.py "$OUT/sass.txt" \
    --keys HGMMA,UTMALDG,UTMASTG,SYNCS,LDGSTS,BAR,MUFU.EX2,STL,LDL,WARPGROUP,USETMAXREG,LDSM,STS,STG | tee "$OUT/sass_summary.txt"
fi

if has test; then
  echo "=== tests ($(date +%T))"
  scripts/device/parallel_tests.sh build/bin/test_08_flash_v3_gpu "$OUT/test_gpu" >"$OUT/test_gpu_summary.txt"
  note "$(head -n 1 "$OUT/test_gpu_summary.txt")"
  tail -n +2 "$OUT/test_gpu_summary.txt"
  grep -E "measured SM" "$OUT/test_gpu.log" | sed 's/^/    /'
  if [ -n "${TEST06:-}" ]; then  # stage 06's tests too, when a change touched what 08 shares with it
    timeout 300 build/bin/test_06_flash_v2_gpu >"$OUT/test_06_gpu.log" 2>&1
    note "test_06_flash_v2_gpu: rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/test_06_gpu.log" | tr '\n' ' ')"
  fi
fi

if has sanitize; then
  echo "=== compute-sanitizer ($(date +%T))"
  for tool in ${SAN_TOOLS:-memcheck racecheck synccheck initcheck}; do
    log="$OUT/sanitize_$tool.log"
    COURSE_SANITIZER=1 timeout ${SAN_TIMEOUT:-120} compute-sanitizer --tool "$tool" --error-exitcode 99 \
      build/bin/test_08_flash_v3_gpu '-tce=*measured*' >"$log" 2>&1
    note "sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1) $(grep -cE '^=+ (Error|Warning|Race)' "$log") reports"
    grep -E "^=+ (Error|Warning|Race|   )" "$log" | head -n 12
  done
fi

if has race; then  # race_demo.cu's header has the predictions these are to be checked against
  echo "=== planted races ($(date +%T))"
  note "race: $(compute-sanitizer --version 2>&1 | grep -iE 'version' | head -n 1)"
  for c in $(build/bin/08_race_demo --list); do
    build/bin/08_race_demo "$c" >"$OUT/race_$c.log" 2>&1
    note "race $c plain: rc=$? $(grep -E '^(result|not run)' "$OUT/race_$c.log")"
    for tool in racecheck memcheck synccheck; do
      log="$OUT/race_${c}_$tool.log"
      opts=(--tool "$tool" --error-exitcode 99 --print-limit 20)
      [ "$tool" = racecheck ] && opts+=(--racecheck-report all)
      timeout ${SAN_TIMEOUT:-120} compute-sanitizer "${opts[@]}" build/bin/08_race_demo "$c" >"$log" 2>&1
      note "race $c $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1) $(grep -E '^(result|not run)' "$log")"
      grep -E "^=+ +(ERROR|WARNING|Error|Warning|Race|Potential|Barrier|Warpgroup)" "$log" | head -n 4 | cut -c1-220
    done
  done
fi

if has bench; then
  echo "=== bench ($(date +%T))"
  csv="$OUT/bench.csv"
  for round in $(seq 1 "${ROUNDS:-1}"); do  # ours, then the peers; again in the next round
    for d in 64 128; do
      for causal in "" "--causal"; do
        timeout 300 build/bin/08_flash_v3 --tokens 16384 --heads $((2048 / d)) --seq "$SEQ" --d $d $causal \
          --dtype "$DTYPES" ${VARIANTS:+--variants "$VARIANTS"} --no-counters --csv "$csv" >>"$OUT/bench.log" 2>&1 \
          || note "bench d=$d $causal: rc=$?"
      done
    done
    timeout 300 python3 scripts/peers/torch_attention.py --csv "$csv" --stage 08_flash_v3 --tokens 16384 \
      --width 2048 --d 64,128 --mask both --seq "$SEQ" --dtype "$DTYPES" --backends flash,cudnn \
      >>"$OUT/bench.log" 2>&1 || note "peers: rc=$?"
  done
  if [ -n "${ABLATION:-}" ]; then  # two rounds, the variants in opposite orders (--variants' order)
    list=${ABLATION_VARIANTS:-overlap,overlap_no_ws,tuned,tuned_lpt,tile_overlap,tile_overlap_wait_v_first}
    reversed=$(echo "$list" | tr ',' '\n' | tac | paste -sd,)
    for order in "$list" "$reversed"; do
      for d in 64 128; do
        for causal in "" "--causal"; do
          timeout 300 build/bin/08_flash_v3 --tokens 16384 --heads $((2048 / d)) --seq "$ABLATION" --d $d $causal \
            --dtype fp16 --variants $order --no-counters --csv "$OUT/ablation.csv" >>"$OUT/bench.log" 2>&1 \
            || note "ablation d=$d $causal: rc=$?"
        done
      done
    done
  fi
  python3 - "$csv" <<'PY' | tee "$OUT/bench_table.txt"
import csv, sys, collections, statistics
rows = list(csv.DictReader(open(sys.argv[1])))
cells = collections.OrderedDict()  # (dtype, shape) -> variant -> [TFLOP/s of each round]
for r in rows:
    if not r["tflops"]: continue
    cells.setdefault((r["dtype"], r["shape"].split(" Br=")[0]), collections.defaultdict(list))[r["variant"]].append(float(r["tflops"]))
def short(k):
    f = dict(x.split("=") for x in k[1].split() if "=" in x)
    return f"{k[0]} d={f['d']} c={f['causal']} N={f['N']}"
order = ["06_lazy_rescale", "wgmma", "tma", "warp_specialized", "pingpong", "overlap", "persistent",
         "three_warpgroups", "tuned", "tile_overlap",
         "pytorch_flash", "pytorch_cudnn"]
present = [x for x in order if any(x in v for v in cells.values())]
last = "tile_overlap" if "tile_overlap" in present else "tuned"
print(f"median TFLOP/s of the rounds; last column: {last} / cuDNN, min-max over rounds (round k against round k)")
print(f"{'cell':28s} " + " ".join(f"{v[:9]:>9s}" for v in present) + f"   {last[:5]}/cuDNN")
for k, v in cells.items():
    med = {x: statistics.median(v[x]) for x in v}
    ratios = [a / b for a, b in zip(v.get(last, []), v.get("pytorch_cudnn", []))]
    rr = f"   {min(ratios):.2f}-{max(ratios):.2f}" if ratios else ""
    print(f"{short(k):28s} " + " ".join(f"{med.get(x, float('nan')):9.1f}" for x in present) + rr)
PY
fi

if has traffic; then
  echo "=== traffic ($(date +%T))"
  for shape in "--seq 517 --d 64 --causal" "--seq 1000 --d 128 --causal" "--seq 1024 --d 64"; do
    build/bin/08_flash_v3 --batch 2 --heads 2 $shape --dtype fp16 --variants wgmma,tma,overlap --reps 3 \
      --metrics lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_op_read.sum \
      >>"$OUT/traffic.log" 2>&1 || note "traffic $shape: rc=$?"
  done
  grep -E "^(wgmma|tma|overlap) |lts__|smsp__" "$OUT/traffic.log" | cut -c1-190
fi

if has ncu; then
  echo "=== ncu ($(date +%T))"
  for spec in ${NCU_RUNS:-overlap:128 overlap:64 pingpong:64}; do
    v=${spec%%:*}; d=${spec##*:}
    timeout 150 ncu --clock-control none -k regex:flash_v3 -c 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section LaunchStats --section Occupancy \
      --metrics sm__inst_executed_pipe_xu.sum,sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_alu.sum,sm__inst_executed.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_xu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active \
      build/bin/08_flash_v3 --batch 4 --heads $((2048 / d)) --seq 4096 --d $d --dtype fp16 --variants $v \
      --reps 1 --warmup 0 --no-counters >"$OUT/ncu_${v}_$d.txt" 2>&1
    note "ncu $v d=$d: rc=$?"
    grep -E "Duration|pipe_tensor|pipe_xu|pipe_fma|inst_executed|Issue Slots Busy|No Eligible|Registers Per|Stall|Warp Cycles Per Issued|Executed Ipc A" "$OUT/ncu_${v}_$d.txt" \
      | sed 's/^ */    /' | cut -c1-150 | head -n 30
  done
fi

tar czf "$OUT/logs.tgz" -C "$OUT" --exclude logs.tgz --exclude bench.csv --exclude ablation.csv --exclude bench_table.txt . 2>/dev/null
find "$OUT" -maxdepth 1 -type f ! -name logs.tgz ! -name bench.csv ! -name ablation.csv ! -name bench_table.txt -delete
echo "=== summary"
printf '%s\n' "${summary[@]}"
[ -f "$OUT/bench_table.txt" ] && cat "$OUT/bench_table.txt"

exit 0
