#!/usr/bin/env bash
# One call on the GPU machine does everything a change needs there, in this order:
#   build (default architectures, warnings counted), all tests, compute-sanitizer (memcheck,
#   racecheck, synccheck, initcheck) on every GPU test, the main job (./course run), Nsight Compute
#   on the same kernels to cross-check the in-process counters, standard attention's time kernel by
#   kernel, and SASS/ncu details of the fastest kernels. Everything lands in $OUT/session.tgz; a
#   short table is printed last.
# Usage there: OUT=/some/dir scripts/gpu_session.sh   (Eigen/doctest/CLI11 carried in .deps/)
#   COURSE_SESSION=checks: build, tests and sanitizers only (no benchmarks).
#   COURSE_SESSION=bench: build, then the main job and Nsight Compute (no tests, no sanitizers).
#   COURSE_STAGES=03,05: the main job runs only these stages (./course run --stages). The whole main
#   job takes over 8 minutes on an H100, so split it across calls when a call is limited to 10.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
S=$OUT/session
mkdir -p "$S"
export COURSE_NO_APT=1 CMAKE_PREFIX_PATH=$PWD/.deps/usr PYTHONUNBUFFERED=1
status=()
pack() { tar czf "$OUT/session.tgz" -C "$OUT" session; }  # after every step: a timeout keeps the rest
step() { pack; echo "=== $* ($(date +%T))"; }
note() { status+=("$1"); echo "    $1"; }

step "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv | tee "$S/gpu.txt"
nvcc --version | tail -n 2 >> "$S/gpu.txt"

step "build"
if cmake --preset default >"$S/build.log" 2>&1 && cmake --build build -j 16 >>"$S/build.log" 2>&1; then
  note "build: ok, $(grep -ci 'warning' "$S/build.log") warning lines"
else
  note "build: FAILED"; tail -n 40 "$S/build.log"
  pack; exit 1
fi
for k in 02_tiled_matmul/CMakeFiles/02_tiled_matmul_lib.dir/kernels.cu.o \
         01_naive_matmul/CMakeFiles/01_naive_matmul_lib.dir/kernels.cu.o; do
  cuobjdump -res-usage "build/$k" >> "$S/resource_usage.txt" 2>&1
  cuobjdump -sass "build/$k" >> "$S/sass.txt" 2>&1
done

if [ "${COURSE_SESSION:-full}" != bench ]; then
step "tests"
ctest --test-dir build --output-on-failure >"$S/ctest.log" 2>&1
note "ctest: $(grep -E 'tests passed|tests failed' "$S/ctest.log" | tail -n 1)"
grep -E "measured / counted|copy of" "$S/ctest.log" | sed 's/^/    /'

step "compute-sanitizer"
for tool in memcheck racecheck synccheck initcheck; do
  for t in $(cd build/bin && ls test_*_gpu); do
    log="$S/sanitize_${tool}_${t}.log"
    COURSE_SANITIZER=1 timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "build/bin/$t" '-tce=*measured IO*,*too-large*' >"$log" 2>&1
    rc=$?
    note "sanitizer $tool $t: rc=$rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1)"
  done
done

fi  # tests and sanitizers

if [ "${COURSE_SESSION:-full}" = checks ]; then  # build, tests and sanitizers only
  step "summary"
  printf '%s\n' "${status[@]}"
  pack
  exit 0
fi

step "main job"
./course run --out "$S/results" ${COURSE_STAGES:+--stages "$COURSE_STAGES"} >"$S/run.log" 2>&1
note "main job: rc=$?"
grep -E "^\s*[0-9.]+x L2" "$S/run.log" | sed 's/^/    /'

step "three counters for the same SM<->L2 reads (for the chapters)"
views=lts__t_sectors_srcunit_tex_op_read.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
{ build/bin/01_naive_matmul --sizes 256,512,1024,2048 --reps 3 --metrics "$views" --csv "$S/views.csv"
  build/bin/02_tiled_matmul --sizes 256,512,1024,2048,4096 --reps 3 --metrics "$views" --csv "$S/views.csv"
} >"$S/counter_views.txt" 2>"$S/counter_views.err"
note "counter views: rc=$?"

step "ragged shapes (the 4-byte path of register_blocked)"
build/bin/02_tiled_matmul --shape 4095 4095 4095 --csv "$S/ragged.csv" >"$S/ragged.txt" 2>/dev/null
build/bin/02_tiled_matmul --shape 4092 4092 4092 --csv "$S/ragged.csv" >>"$S/ragged.txt" 2>/dev/null
note "ragged: rc=$?"
grep -E "^(smem_tiled|register_blocked|cublas) " "$S/ragged.txt" | sed 's/^/    /'

step "Nsight Compute cross-check"
metrics=dram__bytes_read.sum,dram__bytes_write.sum,l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum
ncu_run() {  # name kernel-regex program args...
  local name=$1 kernel=$2; shift 2
  ncu --clock-control none --metrics "$metrics" --print-units base -k "regex:$kernel" --launch-count 1 \
    --csv --log-file "$S/ncu_$name.csv" "$@" >"$S/ncu_$name.out" 2>&1
  echo "    ncu $name: rc=$?"
}
ncu_run copy copy_kernel build/bin/io_probe --no-counters --l2-multiples 20 --reps 1 --warmup 0
ncu_run coalesced naive_coalesced build/bin/01_naive_matmul --no-counters --sizes 1024 --variants coalesced --reps 1 --warmup 0
ncu_run smem_tiled smem_tiled build/bin/02_tiled_matmul --no-counters --sizes 2048 --variants smem_tiled --reps 1 --warmup 0
ncu_run register_blocked register_blocked build/bin/02_tiled_matmul --no-counters --sizes 2048 --variants register_blocked --reps 1 --warmup 0
ncu_run flash_v1 flash_v1 build/bin/05_flash_v1 --no-counters --batch 8 --heads 32 --seq 1024 --d 64 --variants flash_v1 --reps 1 --warmup 0
python3 scripts/compare_ncu.py --csv "$S/results/results.csv" --out "$S/ncu_vs_cupti.csv" \
  "$S/ncu_copy.csv:io_probe:copy:largest" \
  "$S/ncu_coalesced.csv:01_naive_matmul:coalesced:M=1024 N=1024 K=1024" \
  "$S/ncu_smem_tiled.csv:02_tiled_matmul:smem_tiled:M=2048 N=2048 K=2048" \
  "$S/ncu_register_blocked.csv:02_tiled_matmul:register_blocked:M=2048 N=2048 K=2048" \
  "$S/ncu_flash_v1.csv:05_flash_v1:flash_v1:B=8 H=32 N=1024 d=64 causal=0 M=65536 Bc=256 Br=64" \
  > "$S/ncu_vs_cupti.txt" 2>&1
cat "$S/ncu_vs_cupti.txt"

step "standard attention's kernels one by one (Nsight Compute)"
breakdown=()
for N in 512 1024 2048 4096; do
  for causal in 0 1; do
    flag=""; [ $causal = 1 ] && flag=--causal
    ncu --clock-control none --cache-control none --print-units base --csv \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      --log-file "$S/ncu_standard_${N}_${causal}.csv" build/bin/05_flash_v1 --no-counters --batch 8 \
      --heads 32 --seq $N --d 64 $flag --variants standard,flash_v1 --reps 1 --warmup 0 --seed 7 \
      >"$S/ncu_standard_${N}_${causal}.out" 2>&1
    breakdown+=("$N:$causal:$S/ncu_standard_${N}_${causal}.csv")
  done
done
python3 scripts/standard_breakdown.py --out "$S/standard_breakdown.csv" "${breakdown[@]}" \
  >"$S/standard_breakdown.md" 2>&1
note "standard breakdown: rc=$?"
cat "$S/standard_breakdown.md"

step "Nsight Compute details of register_blocked at 4096"
ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  -k regex:register_blocked --launch-count 1 build/bin/02_tiled_matmul --no-counters --sizes 4096 \
  --variants register_blocked --reps 1 --warmup 0 >"$S/ncu_register_blocked_details.txt" 2>&1

step "Nsight Compute details of flash_v1 at N = 4096"
ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  -k regex:flash_v1 --launch-count 1 build/bin/05_flash_v1 --no-counters --batch 8 --heads 32 \
  --seq 4096 --d 64 --variants flash_v1 --reps 1 --warmup 0 >"$S/ncu_flash_v1_details.txt" 2>&1

step "summary"
printf '%s\n' "${status[@]}"
cat "$S/results/summary.md" 2>/dev/null
pack
