#!/usr/bin/env bash
# Timing that an expert would call fair: stages 06, 07 and 08 against their peers, in one call of the
# GPU machine (about 8 minutes on an H100, the build included). What makes it fair:
#   - every peer in its native layout: Q, K, V and dO allocated as (B, N, H, d) and passed to SDPA as
#     transposed views (torch_attention.py --layout bnhd, the default), so that no peer pays a layout
#     copy ours does not; Triton's kernel gets the B x H x N x d its pointer arithmetic reads;
#   - ours and the peers alternate problem by problem: after each timed round of ours, the peers time
#     the same problem as their round (--rounds, --between-rounds scripts/peers/peer_turn.sh, and a
#     peer server, torch_attention.py --serve), ROUNDS rounds each (default 5), so that round k of
#     ours and round k of a peer are seconds apart, and the ratio is taken round k against round k;
#   - the event timings confirmed at kernel level on both sides, in round 1 (--kernel-time: CUPTI's
#     activity records for ours, torch.profiler for the peers; the GPU's own time of a call's work,
#     without the host, and how many pieces of work a call runs), and for two stage 08 cells by Nsight
#     Compute's gpu__time_duration (step ncu);
#   - stage 08's tensor maps made outside the timed launches (fa3_host.cu keeps them by buffer and shape).
# Steps (STEPS, comma-separated, run in this order; default all but fp32):
#   build  stages 06, 07 and 08's programs (stage 08 for sm_90a); BUILD_MORE=11_flash_v3_backward_program adds stage 11,
#          BUILD_TARGETS replaces the three
#   s08    stage 08's last rung (tuned) over the ladder's grid (DTYPES08, default fp16) against FA-2 and cuDNN
#   s06    stage 06's forward sweep as the main job runs it: the ladder's grid (B·N = 16384, H = 2048/d,
#          d = 64 and 128, causal or not, N = 1024, 4096, 16384, fp16 and bf16), the last rung
#          lazy_rescale against SDPA's FlashAttention-2 and cuDNN; the Triton shape (B = 4, H = 48,
#          d = 64, causal, fp16, N = 1024 ... 16384) against those and our Triton FA-2
#   fp32   stage 06's fp32 shapes: flash_v2 against SDPA's memory-efficient kernel and math
#   s07    stage 07's backward sweep: the ladder's grid, the fastest rung (wide at d = 64, split at
#          d = 128) against SDPA's backward (FA-2, cuDNN); the paper's Fig. 2 shape (B = 64, H = 16,
#          N = 1024, d = 64, fp16), the backward and the forward + backward
#   s11    stage 11's backward over the ladder's grid (DTYPES11, default fp16 and bf16; VARIANTS11, default
#          its fastest rung, with stage 07's fastest beside; D11, default "64 128"; MASK11 both, causal or
#          full) against SDPA's backward (FA-2, cuDNN) in both layouts, (B, N, H, d) views and
#          contiguous (B, H, N, d)
#   s11fb  stage 11's forward + backward (stage 08's tuned forward, then VARIANTS11FB, default one_dq) over
#          the same grid (DTYPES11, D11, MASK11) against SDPA's forward + backward (FA-2, cuDNN), both layouts
#   ncu    Nsight Compute's kernel duration of ours and the peers at two stage 08 cells
# A step that would start after DEADLINE seconds (default 500) is skipped and said so, and no command
# runs past LIMIT seconds (default 570) from the start: the device call's 600 s, with time to pack.
# $OUT gets (8 files at most): fairness.csv (every row), fairness_table.txt (every cell and peer;
# the stage 08 lines and a line per stage and peer are printed last), gpu.txt, logs.tgz (the
# programs' and the peers' logs, the build log, Nsight Compute's CSVs).
# Usage there: OUT=/dir scripts/device/fairness.sh   (Eigen/doctest/CLI11 in .deps/, PyTorch with CUDA
# and its Triton in python3). ROUNDS, REPS (default 20), STEPS, DTYPES08, D08 and SEQ08 (stage 08's d's and
# N's), DEADLINE change the defaults; CLOCKS=1 samples the SM clock, power and throttle reasons every
# 100 ms into clocks.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
STEPS=",${STEPS:-build,s08,s06,s07,ncu},"
ROUNDS=${ROUNDS:-5}
REPS=${REPS:-20}
DTYPES08=${DTYPES08:-fp16}
DTYPES11=${DTYPES11:-fp16,bf16}
D08=${D08:-64,128}
DEADLINE=${DEADLINE:-500}
LIMIT=${LIMIT:-570}
export COURSE_NO_APT=1 PYTHONUNBUFFERED=1 PEER_TURN_TIMEOUT=${PEER_TURN_TIMEOUT:-120}
logs=$(mktemp -d)
csv=$OUT/fairness.csv
table=$OUT/fairness_table.txt
rm -f "$csv" "$table"
started=$SECONDS
has() { [[ "$STEPS" == *",$1,"* ]]; }
summary=()
note() { summary+=("$1"); echo "    $1"; }
# Whether step $1 may start: not past the deadline.
in_time() {
  if [ $((SECONDS - started)) -ge "$DEADLINE" ]; then
    note "$1: skipped, $((SECONDS - started)) s gone (DEADLINE=$DEADLINE)"
    return 1
  fi
}
# A command's time limit: $1 seconds, or what is left before LIMIT if that is less (at least 5).
budget() {
  local left=$((LIMIT - (SECONDS - started)))
  [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"
}
# The logs so far into logs.tgz (again after each step: a call cut short still brings them back).
pack() { tar czf "$OUT/logs.tgz" -C "$logs" --exclude '*.pipes' . 2>/dev/null; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/gpu.txt"
if [ "${CLOCKS:-0}" = 1 ]; then  # the GPU's SM clock, power and throttle reasons every 100 ms, for the whole call
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv \
    -lms 100 >"$OUT/clocks.csv" 2>/dev/null &
  trap 'kill $! 2>/dev/null' EXIT
fi
peers=1
if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  peers=0
  note "no PyTorch with CUDA in python3: ours alone, no peers"
else
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' \
    | tee -a "$OUT/gpu.txt"
fi

if has build; then
  echo "=== build ($(date +%T))"
  if cmake --preset default -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" -DCMAKE_CUDA_ARCHITECTURES=90 >"$logs/build.log" 2>&1 &&
     timeout "$(budget 400)" cmake --build build -j 16 --target ${BUILD_TARGETS:-06_flash_v2_program 07_backward_program 08_flash_v3_program} ${BUILD_MORE:-} \
       >>"$logs/build.log" 2>&1; then
    note "build: ok in $((SECONDS - started)) s, $(grep -ci 'warning' "$logs/build.log") warning lines"
  else
    note "build: FAILED"
    tail -n 30 "$logs/build.log"
  fi
fi

# --- the peer servers of a step ------------------------------------------------------------------------
# start_peers NAME ARGS...: torch_attention.py --serve with ARGS (backends, mode, layout), its named
# pipes in logs/NAME.pipes; adds its peer_turn.sh to `turn`, the --between-rounds command for ours
# (empty when there are no peers or no server started). A second start_peers before stop_peers adds a
# second server (stage 11: both layouts), whose turn follows the first's.
turn="" servers=() all_pipes=()
start_peers() {
  local name=$1
  shift
  [ "$peers" = 1 ] || return 0
  local pipes="$logs/$name.pipes"
  mkdir -p "$pipes" && mkfifo "$pipes/request" "$pipes/reply" || { note "$name: no named pipes"; return 0; }
  python3 scripts/peers/torch_attention.py --csv "$csv" --serve "$pipes" --reps "$REPS" --kernel-time "$@" \
    >"$logs/$name.peers.log" 2>&1 &
  local server=$!
  for _ in $(seq 1 120); do  # PyTorch's start: a few seconds
    grep -q "serving rounds" "$logs/$name.peers.log" 2>/dev/null && break
    kill -0 "$server" 2>/dev/null || break
    sleep 1
  done
  if grep -q "serving rounds" "$logs/$name.peers.log" 2>/dev/null; then
    turn="$turn${turn:+ && }$root/scripts/peers/peer_turn.sh $pipes"
    servers+=("$server") all_pipes+=("$pipes")
  else
    note "$name: the peer server did not start: $(tail -n 1 "$logs/$name.peers.log")"
    kill "$server" 2>/dev/null
  fi
}
stop_peers() {
  local name=$1 k
  for k in "${!servers[@]}"; do
    timeout 10 bash -c 'echo quit >"$1/request"' _ "${all_pipes[$k]}" 2>/dev/null
    for _ in $(seq 1 30); do
      kill -0 "${servers[$k]}" 2>/dev/null || break
      sleep 1
    done
    kill "${servers[$k]}" 2>/dev/null && note "$name: a peer server had to be stopped"
    wait "${servers[$k]}" 2>/dev/null
  done
  servers=() all_pipes=() turn=""
  cat "$logs/$name"*.peers.log 2>/dev/null | grep -E "failed|not run|out of memory|n/a" | head -n 5 | sed 's/^/      /'
}
# ours NAME PROGRAM ARGS...: one line of a sweep, in rounds, the peers' turn between them.
ours() {
  local name=$1 program=$2
  shift 2
  local extra=(--rounds "$ROUNDS" --reps "$REPS" --kernel-time --no-counters --csv "$csv")
  [ -n "$turn" ] && extra+=(--between-rounds "$turn")
  echo "$program $* ($(date +%T))" >>"$logs/$name.ours.log"
  timeout "$(budget "${LINE_TIMEOUT:-300}")" "build/bin/$program" "$@" "${extra[@]}" >>"$logs/$name.ours.log" 2>&1 ||
    note "$name: $program $*: rc=$?"
  grep -E "between-rounds.*failed|kernel time n/a" "$logs/$name.ours.log" | sort -u | head -n 3 | sed 's/^/      /'
}
rows() {
  local n
  n=$(grep -c "^$1," "$csv" 2>/dev/null)
  echo "${n:-0}"
}

ladder_seq=1024,4096,16384
if has s08 && in_time s08; then
  echo "=== stage 08, forward ($(date +%T))"
  t0=$SECONDS
  start_peers s08 --backends flash,cudnn
  for d in ${D08//,/ }; do
    for causal in "" "--causal"; do
      ours s08 08_flash_v3 --tokens 16384 --heads $((2048 / d)) --seq "${SEQ08:-$ladder_seq}" --d "$d" $causal \
        --dtype "$DTYPES08" --variants tuned
    done
  done
  stop_peers s08
  note "stage 08: $(rows 08_flash_v3) rows in $((SECONDS - t0)) s"
  pack
fi

if has s06 && in_time s06; then
  echo "=== stage 06, forward ($(date +%T))"
  t0=$SECONDS
  start_peers s06 --backends flash,cudnn
  for d in 64 128; do
    for causal in "" "--causal"; do
      ours s06 06_flash_v2 --tokens 16384 --heads $((2048 / d)) --seq "$ladder_seq" --d "$d" $causal \
        --dtype fp16,bf16 --variants lazy_rescale
    done
  done
  stop_peers s06
  start_peers s06_triton --backends flash,cudnn,triton
  ours s06_triton 06_flash_v2 --batch 4 --heads 48 --seq 1024,2048,4096,8192,16384 --d 64 --causal --dtype fp16 \
    --variants lazy_rescale
  stop_peers s06_triton
  note "stage 06: $(rows 06_flash_v2) rows in $((SECONDS - t0)) s"
  pack
fi

if has fp32 && in_time fp32; then
  echo "=== stage 06, fp32 ($(date +%T))"
  t0=$SECONDS
  start_peers s06_fp32 --backends efficient,math
  ours s06_fp32 06_flash_v2 --batch 8 --heads 32 --seq 4096 --d 64 --dtype fp32 --variants flash_v2
  ours s06_fp32 06_flash_v2 --batch 1 --heads 8 --seq 16384 --d 64 --dtype fp32 --variants flash_v2
  stop_peers s06_fp32
  note "stage 06 fp32: $((SECONDS - t0)) s"
  pack
fi

if has s07 && in_time s07; then
  echo "=== stage 07, backward ($(date +%T))"
  t0=$SECONDS
  start_peers s07 --backward --backends flash,cudnn
  for d in 64 128; do
    fastest=wide
    [ "$d" = 128 ] && fastest=split
    for causal in "" "--causal"; do
      ours s07 07_backward --tokens 16384 --heads $((2048 / d)) --seq "$ladder_seq" --d "$d" $causal \
        --dtype fp16,bf16 --check-heads 1 --variants "$fastest"
    done
  done
  ours s07 07_backward --batch 64 --heads 16 --seq 1024 --d 64 --dtype fp16 --variants wide
  stop_peers s07
  start_peers s07_fwdbwd --fwd-bwd --backends flash,cudnn
  ours s07_fwdbwd 07_backward --batch 64 --heads 16 --seq 1024 --d 64 --dtype fp16 --variants wide --with-forward
  stop_peers s07_fwdbwd
  note "stage 07: $(rows 07_backward) rows in $((SECONDS - t0)) s"
  pack
fi

if [ -s "$csv" ]; then
  python3 scripts/fairness.py "$csv" >"$table" 2>&1
  python3 scripts/fairness.py "$csv" --compact >>"$table" 2>&1
fi

# Nsight Compute: each kernel's duration on the GPU (clocks as they are, caches flushed before each
# kernel, as our timer flushes the L2), for ours and the peers at two stage 08 cells, against the
# CUPTI kernel times and the event times of the rows above.
if has s11 && in_time s11; then
  echo "=== stage 11, backward on Hopper ($(date +%T))"
  t0=$SECONDS
  # The peers in both layouts (cuDNN is often faster on contiguous B × H × N × d): the table has a
  # line for each (the contiguous one's name ends in _bhnd), and the fastest of the two is the one to quote.
  start_peers s11 --backward --backends flash,cudnn
  start_peers s11_bhnd --backward --backends flash,cudnn --layout bhnd
  masks=("" "--causal")
  [ "${MASK11:-both}" = causal ] && masks=("--causal")
  [ "${MASK11:-both}" = full ] && masks=("")
  for d in ${D11:-64 128}; do
    beside=07_wide
    [ "$d" = 128 ] && beside=07_split
    for causal in "${masks[@]}"; do
      ours s11 11_flash_v3_backward --tokens 16384 --heads $((2048 / d)) --seq "${SEQ11:-$ladder_seq}" --d "$d" $causal \
        --dtype "$DTYPES11" --check-heads 1 --variants "${VARIANTS11:-one_dq},$beside"
    done
  done
  stop_peers s11
  note "stage 11: $(rows 11_flash_v3_backward) rows in $((SECONDS - t0)) s"
  pack
fi

if has s11fb && in_time s11fb; then
  echo "=== stage 11, forward + backward on Hopper ($(date +%T))"
  t0=$SECONDS
  start_peers s11fb --fwd-bwd --backends flash,cudnn
  start_peers s11fb_bhnd --fwd-bwd --backends flash,cudnn --layout bhnd
  masks=("" "--causal")
  [ "${MASK11:-both}" = causal ] && masks=("--causal")
  [ "${MASK11:-both}" = full ] && masks=("")
  for d in ${D11:-64 128}; do
    for causal in "${masks[@]}"; do
      ours s11fb 11_flash_v3_backward --tokens 16384 --heads $((2048 / d)) --seq "${SEQ11:-$ladder_seq}" --d "$d" $causal \
        --dtype "$DTYPES11" --check-heads 1 --variants "${VARIANTS11FB:-one_dq}" --with-forward
    done
  done
  stop_peers s11fb
  note "stage 11, forward + backward: $(grep -c '_fwdbwd' "$csv") rows in $((SECONDS - t0)) s"
  pack
fi

if has ncu && in_time ncu; then
  echo "=== ncu ($(date +%T))"
  ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  [ -x "$ncu_bin" ] || note "ncu: Nsight Compute not found"
  [ -x "$ncu_bin" ] && for cell in "64 1024 0" "128 4096 1"; do
    read -r d N c <<<"$cell"
    causal=""
    [ "$c" = 1 ] && causal="--causal"
    at="d${d}_N${N}_c${c}"
    timeout "$(budget 120)" "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum -k regex:flash_v3_tuned \
      --csv --log-file "$logs/ncu_ours_$at.csv" build/bin/08_flash_v3 --tokens 16384 --heads $((2048 / d)) \
      --seq "$N" --d "$d" $causal --dtype fp16 --variants tuned --reps 5 --warmup 1 --no-counters \
      >"$logs/ncu_ours_$at.log" 2>&1 || note "ncu ours $at: rc=$?"
    if [ "$peers" = 1 ]; then
      timeout "$(budget 150)" "$ncu_bin" --clock-control none --target-processes all \
        --metrics gpu__time_duration.sum -k 'regex:flash|sdpa|fmha|cudnn|attention' --csv \
        --log-file "$logs/ncu_peers_$at.csv" python3 scripts/peers/torch_attention.py \
        --csv "$logs/ncu_peers_rows.csv" --stage 08_flash_v3 --tokens 16384 --width 2048 --d "$d" --seq "$N" \
        $causal --dtype fp16 --backends flash,cudnn --reps 5 \
        >"$logs/ncu_peers_$at.log" 2>&1 || note "ncu peers $at: rc=$?"
    fi
  done
  python3 - "$csv" "$logs" <<'PY' | tee -a "$table"
import csv, glob, os, re, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]))) if os.path.exists(sys.argv[1]) else []
# Nsight Compute 2025.3 writes "ns" (older versions "nsecond"): both, in ms.
scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3, "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
def durations(path):
    """Kernel name -> [ms] from an Nsight Compute CSV (--csv --log-file)."""
    lines = open(path, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    out = {}
    if start is None:
        return out
    for r in csv.DictReader(lines[start:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = re.split(r"[(<]", r.get("Kernel Name", "?").replace("void ", ""))[0].split("::")[-1].strip()
        value = float(r["Metric Value"].replace(",", "")) * scale.get(r.get("Metric Unit", ""), float("nan"))
        out.setdefault(name, []).append(value)
    return out
def bench(variant, d, N, causal):
    for r in rows:
        f = dict(x.split("=", 1) for x in r["shape"].split() if "=" in x)
        if (r["stage"], r["variant"], r["dtype"], f.get("d"), f.get("N"), f.get("causal"), r.get("round")) == \
           ("08_flash_v3", variant, "fp16", d, N, causal, "1"):
            return f"events {float(r['ms']):.4g} ms, CUPTI kernels {r['kernel_ms'] or 'n/a'} ms ({r['kernels'] or '?'} a call)"
    return "no bench row"
print("Nsight Compute (gpu__time_duration, clocks as they are, caches flushed): median of the profiled launches")
for path in sorted(glob.glob(os.path.join(sys.argv[2], "ncu_*_d*_N*_c*.csv"))):
    who, d, N, causal = re.search(r"ncu_([a-z]+)_d(\d+)_N(\d+)_c(\d)\.csv", os.path.basename(path)).groups()
    found = durations(path)
    if not found:
        print(f"  08 fp16 d={d} c={causal} N={N} {who}: no kernel durations (see {os.path.basename(path)} in logs.tgz)")
    for name, ms in found.items():
        variant = ("tuned" if who == "ours" else "pytorch_cudnn" if "cudnn" in name.lower()
                   else "pytorch_flash" if "flash" in name.lower() else "?")
        print(f"  08 fp16 d={d} c={causal} N={N} {who:5s} {name[:48]:48s} {len(ms):2d} launches, "
              f"median {statistics.median(ms):.4g} ms; bench {variant}: {bench(variant, d, N, causal)}")
PY
fi

pack
rm -rf "$logs"
echo "=== summary ($((SECONDS - started)) s)"
printf '%s\n' "${summary[@]}"
if [ -s "$csv" ]; then
  echo "--- stage 08, every cell (ours / peer, round k against round k: median [min-max]; kernel level; events over kernels; GPU ops a call)"
  python3 scripts/fairness.py "$csv" --compact --stage 08
  echo "--- every stage, over its cells"
  python3 scripts/fairness.py "$csv" --brief
  echo "(every cell: fairness_table.txt; the rows: fairness.csv)"
fi
exit 0
