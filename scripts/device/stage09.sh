#!/usr/bin/env bash
# Stage 09 on the GPU machine, in as few calls as the 10-minute limit allows. Build stage 09 (and stage 08,
# which it runs beside), then the steps named in STEPS (comma-separated, in this order):
#   sass      resource use of every kernel, and the instructions that matter in the rungs' kernels
#             (QGMMA, MUFU.EX2, FFMA.SAT, PRMT, F2FP, STL/LDL spills, WARPGROUP: serialised wgmmas if above 20)
#   test      stage 09's GPU tests; test08 stage 08's
#   sanitize  compute-sanitizer's four tools on stage 09's tests (small shapes: COURSE_SANITIZER=1)
#   ab        each rung against the build it was refactored from (.carry/old_09.xz, old_08.xz: 233d5e8's
#             programs), processes alternating, AB_PROCS of each, 20 calls twice a process, no counters
#   bench     the main job's rows (course's sweep: d = 64 and 128, causal or not, N = 4096 and 16384,
#             B·N = 16384, fp16; counters on), then stage 08 in FlashAttention-3's tile order (tuned_lpt)
#             beside the last rungs at causal N = 4096, LPT_PROCS processes in alternating orders
#   accuracy  FA-3's accuracy table (N = 4096) at d = 128 and 64
#   quant     the quantisation kernels beside a device-to-device copy (QUANT_CELLS "d N [--causal];..."), each
#             on its minimum bytes as a % of the copy's rate; with QUANT_VARIANTS naming rungs, FP8 end to end
#   ladder    every rung per tensor beside stage 08's last rung, no counters, two rounds: d = 128 and 64,
#             causal or not, N = 4096 and 16384 (the wide rungs 3-6 at d = 128 only)
#   ceiling   an 8192^3 e4m3 matrix product through PyTorch's scaled matmul, median of 50 calls
# Logs and CSVs land in $OUT; a short table is printed last.
# Usage there: OUT=/dir STEPS=sass,test scripts/device/stage09.sh   (Eigen/doctest/CLI11 in .deps/)
#   While the machine stays warm its build folder is kept, so the next calls rebuild nothing.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
# The loose files in OUT are deleted at the end (they go into logs.tgz): never the repository itself.
[ "$(cd "$OUT" && pwd)" != "$PWD" ] || { echo "OUT must not be the repository's root"; exit 2; }
STEPS=",${STEPS:-sass,test},"
LPT_PROCS=${LPT_PROCS:-4}
AB_PROCS=${AB_PROCS:-2}
export COURSE_NO_APT=1 PYTHONUNBUFFERED=1
has() { [[ "$STEPS" == *",$1,"* ]]; }
summary=()
note() { summary+=("$1"); echo "    $1"; }
B=build/bin

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv \
  | tee "$OUT/gpu.txt"
echo "=== build ($(date +%T))"
if cmake --preset default -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1 &&
   cmake --build build -j 16 --target 09_flash_v3_fp8 test_09_flash_v3_fp8_gpu 08_flash_v3 ${BUILD_MORE:-} >>"$OUT/build.log" 2>&1; then
  note "build: ok, $(grep -ci 'warning' "$OUT/build.log") warning lines"
else
  note "build: FAILED"; tail -n 40 "$OUT/build.log"; exit 1
fi

if has sass; then
  echo "=== sass ($(date +%T))"
  : >"$OUT/sass.txt"
  for obj in build/09_flash_v3_fp8/CMakeFiles/09_flash_v3_fp8_lib.dir/fp8_*.cu.o; do
    cuobjdump -res-usage "$obj" >>"$OUT/resource_usage.txt" 2>&1
    cuobjdump -sass "$obj" >>"$OUT/sass.txt" 2>&1
  done
  # fp16 out: rungs 1, 2 and 7 at d = 64; rungs 1, 2, the ablation p_in_registers and rungs 3-7 at d = 128.
  python3 scripts/device/sass_counts.py "$OUT/sass.txt" --all --serialised-above 20 \
    --keys QGMMA,MUFU.EX2,FFMA.SAT,PRMT,F2FP,STL,LDL,WARPGROUP,UTMALDG,STSM \
    --tag e4m3_d64=flash_v3_fp8_128I6__halfLi64ELb0ELb0ELb0 --tag row_sum_d64=flash_v3_fp8_128I6__halfLi64ELb1ELb0ELb0 \
    --tag lin_d64=flash_v3_fp8_128I6__halfLi64ELb1ELb0ELb1 --tag e4m3_d128=flash_v3_fp8_128I6__halfLi128ELb0ELb1ELb0 \
    --tag row_sum_d128=flash_v3_fp8_128I6__halfLi128ELb1ELb1ELb0 --tag p_in_registers=flash_v3_fp8_128I6__halfLi128ELb1ELb0ELb0 \
    --tag wide=flash_v3_fp8_wideI6__halfLb1E --tag wide_exact_max=flash_v3_fp8_wideI6__halfLb0E \
    --tag tile_overlap=fp8_overlapI6__halfLb0ELb0ELb0E --tag tile_start=fp8_overlapI6__halfLb1ELb0ELb0E \
    --tag epilogue=fp8_overlapI6__halfLb1ELb1ELb0E --tag lin_d128=fp8_overlapI6__halfLb1ELb1ELb1E | tee "$OUT/sass_summary.txt"
  note "sass: $(grep -c SERIALISED "$OUT/sass_summary.txt") serialised, $(grep -c 'not found' "$OUT/sass_summary.txt") not found"
fi

if has test; then
  echo "=== tests ($(date +%T))"
  # One process a test case, all at once (their time is the CPU's float64 references; the GPU is shared).
  mapfile -t cases < <($B/test_09_flash_v3_fp8_gpu --list-test-cases --no-version 2>/dev/null | grep -vE '^\[doctest\]|^=+$|^GPU tests on|^SKIP' | sed '/^$/d')
  pids=()
  for i in "${!cases[@]}"; do
    # (doctest's filters take wildcards: commas and brackets in a name would split or match otherwise)
    pat=$(printf '%s' "${cases[$i]}" | sed 's/[][,*?]/?/g')
    timeout ${TEST_TIMEOUT:-450} $B/test_09_flash_v3_fp8_gpu --duration=true "-tc=$pat" >"$OUT/test_gpu_$i.log" 2>&1 &
    pids+=($!)
  done
  fails=0; asserts=0; ran=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"; rc=$?
    n=$(grep -oE '^\[doctest\] assertions: +[0-9]+' "$OUT/test_gpu_$i.log" | grep -oE '[0-9]+$')
    c=$(grep -oE '^\[doctest\] test cases: +[0-9]+ \| +[0-9]+ passed' "$OUT/test_gpu_$i.log" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
    asserts=$((asserts + ${n:-0})); ran=$((ran + ${c:-0}))
    [ "$rc" = 0 ] || { fails=$((fails + 1)); note "  FAILED rc=$rc: ${cases[$i]}"; grep -B2 -A12 "ERROR" "$OUT/test_gpu_$i.log" | head -n 40; }
  done
  cat "$OUT"/test_gpu_*.log >"$OUT/test_gpu.log"
  note "test_09_flash_v3_fp8_gpu: ${#cases[@]} cases in parallel, $ran passed, $fails failed, $asserts assertions"
  grep -hE "^[0-9.]+ s: " "$OUT"/test_gpu_*.log | sort -rn | head -n 4 | sed 's/^/    /'
  grep -hE "values differ|signed mean error" "$OUT"/test_gpu_*.log | sort | uniq | head -n 12 | sed 's/^/    /'
fi

if has test08; then
  echo "=== stage 08's tests ($(date +%T))"
  cmake --build build -j 16 --target test_08_flash_v3_gpu >>"$OUT/build.log" 2>&1
  timeout ${TEST_TIMEOUT:-450} $B/test_08_flash_v3_gpu >"$OUT/test_gpu08.log" 2>&1
  note "test_08_flash_v3_gpu: rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/test_gpu08.log" | tr '\n' ' ')"
  grep -B2 -A12 "ERROR" "$OUT/test_gpu08.log" | head -n 40
fi

if has sanitize; then
  echo "=== compute-sanitizer ($(date +%T))"
  for tool in ${SAN_TOOLS:-memcheck racecheck synccheck initcheck}; do
    log="$OUT/sanitize_$tool.log"
    COURSE_SANITIZER=1 timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool "$tool" --error-exitcode 99 \
      $B/test_09_flash_v3_fp8_gpu "${SAN_CASES:--tc=every rung*,*own descales*,bf16 inputs*,*few blocks*}" >"$log" 2>&1
    note "sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1) $(grep -E '^\[doctest\] assertions' "$log")"
    grep -E "^=+ (Error|Warning|Race|   )" "$log" | head -n 12
  done
fi

if has ab; then
  echo "=== ab ($(date +%T))"
  for b in old_09 old_08; do
    [ -x ".carry/$b" ] || python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" ".carry/$b.xz" ".carry/$b"
    chmod +x ".carry/$b"
  done
  # Old row names (233d5e8) and new ones for the same kernels, per tensor: the row sum by FADDs (rung 1), the
  # default kernel (rung 2), _wide_ovl (4), _wide_pfq (5), _wide_stsm (6), _lin / _wide_lin (7).
  old128=08_tuned,fp8_per_tensor_fadd,fp8_per_tensor,fp8_per_tensor_wide_ovl,fp8_per_tensor_wide_pfq,fp8_per_tensor_wide_stsm,fp8_per_tensor_wide_lin
  new128=08_tuned,e4m3,row_sum,tile_overlap,tile_start,epilogue,lin
  old64=08_tuned,fp8_per_tensor_fadd,fp8_per_tensor,fp8_per_tensor_lin
  new64=08_tuned,e4m3,row_sum,lin
  cells=("128 4096" "128 4096 --causal" "128 16384" "64 4096" "64 4096 --causal")
  for c in "${cells[@]}"; do
    set -- $c; d=$1 N=$2 causal=${3:-}
    for p in $(seq 1 "$AB_PROCS"); do
      for who in old new; do
        if [ "$who" = old ]; then bin=.carry/old_09; list=$([ $d = 128 ] && echo $old128 || echo $old64); else
          bin=$B/09_flash_v3_fp8; list=$([ $d = 128 ] && echo $new128 || echo $new64); fi
        timeout 120 $bin --tokens 16384 --heads $((2048 / d)) --seq $N --d $d $causal --dtype fp16 --schemes per_tensor \
          --variants "$list" --rounds 2 --reps 20 --no-counters --csv "$OUT/ab_${who}.csv" \
          >>"$OUT/ab.log" 2>&1 || note "ab $who d=$d N=$N $causal: rc=$?"
      done
    done
  done
  for d in 64 128; do  # stage 08's rung 5 (its pipeline's K/V ring now shared; SASS a few instructions apart)
    for p in $(seq 1 "$AB_PROCS"); do
      for who in old new; do
        bin=$B/08_flash_v3; [ "$who" = old ] && bin=.carry/old_08
        timeout 100 $bin --tokens 16384 --heads $((2048 / d)) --seq 4096 --d $d --dtype fp16 --variants overlap,tuned \
          --rounds 2 --reps 20 --no-counters --count-limit 0 --csv "$OUT/ab08_${who}.csv" >>"$OUT/ab.log" 2>&1 ||
          note "ab08 $who d=$d: rc=$?"
      done
    done
  done
  grep -E "mismatch|FAIL|error" "$OUT/ab.log" | sort | uniq -c | head -n 10
  python3 - "$OUT" <<'PY' | tee "$OUT/ab_table.txt"
import csv, os, statistics as st, sys
out = sys.argv[1]
same = {"fp8_per_tensor_fadd": "e4m3", "fp8_per_tensor": "row_sum", "fp8_per_tensor_wide_ovl": "tile_overlap",
        "fp8_per_tensor_wide_pfq": "tile_start", "fp8_per_tensor_wide_stsm": "epilogue", "fp8_per_tensor_wide_lin": "lin",
        "fp8_per_tensor_lin": "lin", "08_tuned": "08_tuned", "overlap": "overlap", "tuned": "tuned"}
def rows(path):
    return [r for r in csv.DictReader(open(path)) if r["ms"]] if os.path.exists(path) else []
def cell(r):
    f = dict(x.split("=") for x in r["shape"].split() if "=" in x)
    return f"d={f['d']} causal={f['causal']} N={f['N']}"
for tag, old, new in (("09", "ab_old.csv", "ab_new.csv"), ("08", "ab08_old.csv", "ab08_new.csv")):
    o, n = rows(f"{out}/{old}"), rows(f"{out}/{new}")
    if not o or not n: continue
    print(f"stage {tag}: each kernel's median ms, old build (233d5e8) / this build, over the rounds of {os.environ.get('AB_PROCS', '2')} "
          "processes each (new / old time: below 1 is faster)")
    for c in sorted({cell(r) for r in n}):
        parts = []
        for ov, nv in same.items():
            om = [float(r["ms"]) for r in o if cell(r) == c and r["variant"].split(".")[0] == ov]
            nm = [float(r["ms"]) for r in n if cell(r) == c and r["variant"].split(".")[0] == nv]
            if om and nm and not (nv == "lin" and ov == "fp8_per_tensor_lin" and "d=128" in c) and \
               not (nv == "lin" and ov == "fp8_per_tensor_wide_lin" and "d=64" in c):
                parts.append(f"{nv} {st.median(om):.3f}/{st.median(nm):.3f} ({st.median(nm) / st.median(om):.3f}, "
                             f"spread {(max(nm) - min(nm)) / st.median(nm) * 100:.1f}%)")
        print(f"  {c:24s} " + " | ".join(parts))
PY
fi

if has quant; then  # the quantisation beside a copy (and, with QUANT_VARIANTS naming rungs, FP8 end to end)
  echo "=== quant ($(date +%T))"
  IFS=';' read -ra quant_cells <<<"${QUANT_CELLS:-128 4096;64 4096}"
  for cell in "${quant_cells[@]}"; do
    set -- $cell; d=$1 N=$2
    timeout 200 $B/09_flash_v3_fp8 --tokens 16384 --heads $((2048 / d)) --seq $N --d $d ${3:-} --dtype fp16 \
      --variants "${QUANT_VARIANTS:-copy,quant,quant_centred}" --schemes per_tensor,per_block,per_tensor_hadamard,per_block_hadamard \
      --rounds 2 --reps 20 --no-counters --csv "$OUT/quant.csv" >>"$OUT/quant.log" 2>&1 || note "quant d=$d N=$N ${3:-}: rc=$?"
  done
  grep -E "not run|mismatch|FAIL" "$OUT/quant.log" | sort | uniq -c | head -n 10
  python3 scripts/device/fp8_end_to_end.py "$OUT/quant.csv" | tee "$OUT/quant_table.txt"
fi

if has ladder; then
  echo "=== ladder ($(date +%T))"
  for d in 128 64; do
    list=08_tuned,e4m3,row_sum,wide,tile_overlap,tile_start,epilogue,lin
    [ $d = 64 ] && list=08_tuned,e4m3,row_sum,lin
    for causal in "" "--causal"; do
      timeout 200 $B/09_flash_v3_fp8 --tokens 16384 --heads $((2048 / d)) --seq 4096,16384 --d $d $causal --dtype fp16 \
        --variants "$list" --schemes per_tensor --rounds 2 --reps 20 --no-counters --csv "$OUT/ladder.csv" \
        >>"$OUT/ladder.log" 2>&1 || note "ladder d=$d $causal: rc=$?"
    done
  done
  grep -E "not run|mismatch|FAIL" "$OUT/ladder.log" | sort | uniq -c | head -n 10
  python3 scripts/device/ladder_steps.py "$OUT/ladder.csv" \
    e4m3.per_tensor,row_sum.per_tensor,wide.per_tensor,tile_overlap.per_tensor,tile_start.per_tensor,epilogue.per_tensor,lin.per_tensor \
    --against 08_tuned | tee "$OUT/ladder_table.txt"
fi

if has bench; then
  echo "=== bench ($(date +%T))"
  for d in 64 128; do  # the main job's lines (course's sweep_args for 09_flash_v3_fp8), counters on
    for causal in "" "--causal"; do
      timeout 200 $B/09_flash_v3_fp8 --tokens 16384 --heads $((2048 / d)) --seq 4096,16384 --d $d $causal --dtype fp16 \
        --csv "$OUT/main.csv" >>"$OUT/bench.log" 2>&1 || note "main job d=$d $causal: rc=$?"
    done
  done
  list=08_tuned_lpt,08_tuned,epilogue,lin
  reversed=$(echo "$list" | tr ',' '\n' | tac | paste -sd,)
  for p in $(seq 1 "$LPT_PROCS"); do  # stage 08 in the wide kernels' tile order, in processes of their own
    order=$list; [ $((p % 2)) = 0 ] && order=$reversed
    timeout 100 $B/09_flash_v3_fp8 --tokens 16384 --heads 16 --d 128 --seq 4096 --causal --dtype fp16 --variants "$order" \
      --schemes per_tensor --rounds 2 --reps 20 --no-counters --csv "$OUT/lpt_$p.csv" >>"$OUT/bench.log" 2>&1 ||
      note "lpt process $p: rc=$?"
  done
  grep -E "not run|mismatch" "$OUT/bench.log" | sort | uniq -c | head -n 10
  python3 - "$OUT" <<'PY' | tee "$OUT/bench_table.txt"
import csv, glob, os, statistics as st, sys
out = sys.argv[1]
def cell(r):
    f = dict(x.split("=") for x in r["shape"].split() if "=" in x)
    return f"d={f['d']} causal={f['causal']} N={f['N']}"
if os.path.exists(out + "/main.csv"):
    rows = [r for r in csv.DictReader(open(out + "/main.csv")) if r["ms"]]
    last = ["row_sum.per_tensor", "row_sum.per_block_hadamard", "tile_overlap.per_tensor", "tile_start.per_tensor",
            "epilogue.per_tensor", "lin.per_tensor"]
    print("the main job: stage 08 tuned's median (fastest call) in ms; each FP8 kernel: stage 08's median / its median "
          "(stage 08's fastest call / its median)")
    for c in sorted({cell(r) for r in rows}, key=lambda c: (int(c.split()[0][2:]), c)):
        by = {r["variant"]: r for r in rows if cell(r) == c}
        s08 = by.get("08_tuned")
        if not s08: continue
        m08, f08 = float(s08["ms"]), float(s08["ms_min"])
        parts = [f"{v} {m08 / float(by[v]['ms']):.2f} ({f08 / float(by[v]['ms']):.2f})" for v in last if v in by]
        print(f"  {c:26s} 08 {m08:.3f} ({f08:.3f}) | " + " | ".join(parts))
    print("the quantisation (N = 4096, non-causal; the same in every cell): ms (GB/s)")
    for d in ("64", "128"):
        quant = [r for r in rows if r["variant"].startswith("quant") and f" d={d} " in r["shape"]
                 and " N=4096 " in r["shape"] and "causal=0" in r["shape"]]
        print(f"  d={d:4s}" + " | ".join(f"{r['variant']} {float(r['ms']):.3f} ({float(r['gbps']):.0f})" for r in
                                          sorted(quant, key=lambda r: r["variant"])))
parts = sorted(glob.glob(out + "/lpt_*.csv"))  # the processes' CSVs, merged into lpt.csv with a process column
merged = []
for path in parts:
    p = os.path.basename(path)[4:-4]
    merged += [dict(r, process=p) for r in csv.DictReader(open(path))]
    os.remove(path)
if merged:
    with open(out + "/lpt.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["process"] + [k for k in merged[0] if k != "process"])
        w.writeheader()
        w.writerows(merged)
lpt = []
for p in sorted({r["process"] for r in merged}):
    ms = {v: [float(r["ms"]) for r in merged if r["variant"] == v and r["process"] == p and r["ms"]]
          for v in ("08_tuned", "08_tuned_lpt", "epilogue.per_tensor", "lin.per_tensor")}
    if not all(ms.values()):
        print(f"  lpt process {p}: a row has no time, left out"); continue
    best08 = min(st.median(ms["08_tuned"]), st.median(ms["08_tuned_lpt"]))
    lpt.append((best08 / st.median(ms["epilogue.per_tensor"]), best08 / st.median(ms["lin.per_tensor"])))
if lpt:
    print(f"causal N = 4096, d = 128, {len(lpt)} processes: stage 08's faster (tuned or tuned_lpt) / epilogue "
          f"{min(x for x, _ in lpt):.3f}-{max(x for x, _ in lpt):.3f}, / lin {min(y for _, y in lpt):.3f}-{max(y for _, y in lpt):.3f}")
PY
fi

if has accuracy; then
  echo "=== accuracy ($(date +%T))"
  for d in 128 64; do
    timeout 150 $B/09_flash_v3_fp8 --accuracy --seq 4096 --d $d --dtype fp16 >"$OUT/accuracy_d$d.txt" 2>&1
    note "accuracy d=$d: rc=$?"
  done
  grep -E "^(normal|outliers) +(16-bit|row_sum.per_tensor |lin.per_tensor|row_sum.per_block_hadamard |epilogue)" \
    "$OUT/accuracy_d128.txt" | sed 's/^/    /'
fi

if has ceiling; then
  echo "=== ceiling ($(date +%T))"
  timeout 120 python3 - <<'PY' 2>&1 | tee "$OUT/ceiling.txt"
import torch
n = 8192
g = torch.Generator(device="cuda").manual_seed(1)
a = torch.randn(n, n, device="cuda", generator=g).to(torch.float8_e4m3fn)
b = torch.randn(n, n, device="cuda", generator=g).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
one = torch.ones((), device="cuda")
for _ in range(5): torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
ts = []
for _ in range(50):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16); e.record(); e.synchronize()
    ts.append(s.elapsed_time(e))
ts.sort(); med = ts[len(ts) // 2]
print(f"{torch.cuda.get_device_name()}: e4m3 {n}^3 scaled_mm median {med:.4f} ms ({ts[0]:.4f}-{ts[-1]:.4f} over 50), "
      f"{2 * n**3 / med / 1e9:.0f} TFLOP/s; torch {torch.__version__}")
PY
  note "ceiling: $(tail -n 1 "$OUT/ceiling.txt")"
fi

# The archive is written outside OUT and moved in: written inside, tar sees its own folder change and fails.
if tar czf "/tmp/stage09_logs.tgz" -C "$OUT" --exclude logs.tgz --exclude '*.csv' --exclude '*_table.txt' --exclude 'accuracy_*' --exclude ceiling.txt . &&
   mv /tmp/stage09_logs.tgz "$OUT/logs.tgz"; then
  find "$OUT" -maxdepth 1 -type f ! -name logs.tgz ! -name '*.csv' ! -name '*_table.txt' ! -name 'accuracy_*' ! -name ceiling.txt -delete
else
  note "logs.tgz: tar failed, the logs are left as files"
fi
echo "=== summary"
printf '%s\n' "${summary[@]}"
[ -f "$OUT/bench_table.txt" ] && cat "$OUT/bench_table.txt"
[ -f "$OUT/ab_table.txt" ] && cat "$OUT/ab_table.txt"

exit 0
