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
"$bin/06_flash_v2" --no-gpu --heads 1 --seq 64 --csv "$out/r.csv" >/dev/null 2>&1
"$bin/08_flash_v3" --no-gpu --heads 1 --seq 64 --csv "$out/r.csv" >/dev/null 2>&1
echo stale >"$out/backward_fig2.png"  # an earlier run's figure: these rows have no stage 07
"$py" "$here/report.py" "$out/r.csv" --out "$out" >"$out/summary.txt"
for f in matmul_io.png summary.md attention_counted_io.png; do
  [ -s "$out/$f" ] || { echo "report.py did not write $f"; exit 1; }
done
[ ! -e "$out/backward_fig2.png" ] || { echo "report.py left a figure these rows do not give"; exit 1; }
grep -q "02_tiled_matmul | register_blocked" "$out/summary.md" || { echo "summary lacks a row"; exit 1; }
for v in "tuned (fp16)" "tuned (bf16)" "flash_v2 (fp32)"; do
  grep -qF "06_flash_v2 | $v |" "$out/summary.md" || { echo "summary lacks 06_flash_v2 $v"; exit 1; }
done
[ "$(grep -c '^01_naive_matmul,' "$out/r.csv")" -eq 4 ] || { echo "unexpected CSV rows"; exit 1; }
# Without a GPU the summary shows the counted bytes (field 9) beside the model (field 8), and
# says why stage 06 has no figure of speed.
awk -F' [|] ' '/^[|] 01_naive_matmul [|] coalesced/ { found = 1; if ($8 == "n/a" || $9 != $8) bad = 1 }
               END { exit !(found && !bad) }' "$out/summary.md" || { echo "summary lacks the counted bytes"; exit 1; }
grep -qF "06_flash_v2: no GPU rows" "$out/summary.md" &&
  grep -qF "08_flash_v3: no GPU rows (its kernels run on a Hopper GPU alone" "$out/summary.md" ||
  { echo "summary does not say why figures are missing"; exit 1; }
grep -qF "08_flash_v3 | tuned (bf16) |" "$out/summary.md" || { echo "summary lacks 08_flash_v3 tuned"; exit 1; }

# Without matplotlib: the summary alone, saying so, and no figure left from before.
mkdir -p "$out/nompl/fake/matplotlib"
echo 'raise ImportError("no matplotlib here")' >"$out/nompl/fake/matplotlib/__init__.py"
cp "$out/matmul_io.png" "$out/nompl/"
PYTHONPATH="$out/nompl/fake" "$py" "$here/report.py" "$out/r.csv" --out "$out/nompl" >/dev/null
grep -qF "No figures: this Python has no matplotlib" "$out/nompl/summary.md" &&
  [ ! -e "$out/nompl/matmul_io.png" ] || { echo "without matplotlib: wrong summary or a stale figure"; exit 1; }

# Stage 06 with GPU rows (made up): fp16 and bf16 of one shape stay apart, the ladder's table and
# figures appear (rung 4a, exp2, in its column between cp_async and tuned), a CPU row's count joins the GPU row of its problem, and three rounds of
# lazy_rescale count as their median (330, not the last round's 310).
mkdir "$out/gpu"
h="B=4 H=32 N=4096 d=64 causal=0"
g="NVIDIA Test GPU"
cat >"$out/gpu/r.csv" <<CSV
stage,variant,device,dtype,shape,size,flops,ms,tflops,gbps,io_model_bytes,io_counted_bytes,dram_read_bytes,dram_write_bytes,l2_read_bytes,l2_write_bytes,peak_mem_bytes,max_rel_err
06_flash_v2,tuned,$g,fp16,$h Br=128 Bc=64,4096,549755813888,0.458,300,,1210056704,,201364224,62760192,1140850688,69206016,,0.0005
06_flash_v2,tuned,$g,bf16,$h Br=128 Bc=64,4096,549755813888,0.687,200,,1210056704,,201364224,62760192,1140850688,69206016,,0.004
06_flash_v2,tuned,cpu,fp16,$h Br=128 Bc=64,4096,549755813888,,,,1210056704,1210056704,,,,,,0.0005
06_flash_v2,lazy_rescale,$g,fp16,$h Br=128 Bc=64,4096,549755813888,0.416,330,,1210056704,,201364224,62760192,1140850688,69206016,,0.0005
06_flash_v2,lazy_rescale,$g,fp16,$h Br=128 Bc=64,4096,549755813888,0.393,350,,1210056704,,201364224,62760192,1140850688,69206016,,0.0005
06_flash_v2,lazy_rescale,$g,fp16,$h Br=128 Bc=64,4096,549755813888,0.443,310,,1210056704,,201364224,62760192,1140850688,69206016,,0.0005
06_flash_v2,pytorch_flash,$g,fp16,$h,4096,549755813888,0.55,250,,,,,,,,,0.0005
06_flash_v2,exp2,$g,fp16,$h Br=64 Bc=64,4096,549755813888,0.55,250,,2290089984,,201364224,62760192,2290089984,69206016,,0.0005
CSV
"$py" "$here/report.py" "$out/gpu/r.csv" --out "$out/gpu" >"$out/gpu/summary.txt"
for f in flash_v2_ladder.png flash_v2_ladder_bf16.png flash_v2_vs_fa2.png flash_v2_io.png; do
  [ -s "$out/gpu/$f" ] || { echo "report.py did not write $f"; exit 1; }
done
grep -qF "| fp16 | 64 | 0 | 4096 | 4 | 32 | n/a | n/a | n/a | 250.0 | n/a | n/a | n/a | 300.0 | 330.0 | 250.0 |" "$out/gpu/summary.md" &&
  grep -qF "| 1.20 | 1.32 | n/a |" "$out/gpu/summary.md" &&
  grep -qF "| bf16 | 64 | 0 | 4096 | 4 | 32 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | 200.0 | n/a | n/a |" "$out/gpu/summary.md" ||
  { echo "the stage 06 ladder table is wrong"; exit 1; }
[ "$(grep -c '^| 06_flash_v2 | tuned' "$out/gpu/summary.md")" -eq 2 ] ||
  { echo "the CPU row of tuned fp16 did not join its GPU row"; exit 1; }
# Stage 08 with GPU rows (made up, on an H100 for the dense peak of 989 TFLOP/s): two rounds of tuned
# give their median and spread; the ladder's table, its figures, tuned against the peers, and IO
# three ways from the counted line (a CPU row's count joins its GPU row).
mkdir "$out/gpu08"
g="NVIDIA H100 80GB HBM3"
s="B=1 H=4 N=1000 d=64 causal=0"
cat >"$out/gpu08/r.csv" <<CSV
stage,variant,device,dtype,shape,size,flops,ms,tflops,gbps,io_model_bytes,io_counted_bytes,dram_read_bytes,dram_write_bytes,l2_read_bytes,l2_write_bytes,peak_mem_bytes,max_rel_err
08_flash_v3,tuned,$g,fp16,$h Br=128 Bc=128,4096,549755813888,1.1,500,,1210056704,,201364224,62760192,1140850688,69206016,,0.0005
08_flash_v3,tuned,$g,fp16,$h Br=128 Bc=128,4096,549755813888,1.06,520,,1210056704,,201364224,62760192,1140850688,69206016,,0.0005
08_flash_v3,wgmma,$g,fp16,$h Br=128 Bc=128,4096,549755813888,1.83,300,,1210056704,,,,,,,0.0005
08_flash_v3,06_lazy_rescale,$g,fp16,$h Br=128 Bc=64,4096,549755813888,1.67,330,,1210056704,,,,,,,0.0005
08_flash_v3,pytorch_flash,$g,fp16,$h,4096,549755813888,1.62,340,,,,,,,,,0.0005
08_flash_v3,pytorch_cudnn,$g,fp16,$h,4096,549755813888,1.08,510,,,,,,,,,0.0005
08_flash_v3,tuned,$g,bf16,$h Br=128 Bc=128,4096,549755813888,1.09,505,,1210056704,,,,,,,0.004
08_flash_v3,tuned,cpu,fp16,$s Br=128 Bc=128,1000,1024000000,,,,9232384,9232384,,,,,,0.0005
08_flash_v3,tuned,$g,fp16,$s Br=128 Bc=128,1000,1024000000,0.01,100,,9232384,,5000000,2000000,7700000,1531904,,0.0005
CSV
"$py" "$here/report.py" "$out/gpu08/r.csv" --out "$out/gpu08" >"$out/gpu08/summary.txt"
for f in flash_v3_ladder.png flash_v3_ladder_bf16.png flash_v3_vs_cudnn.png flash_v3_io.png; do
  [ -s "$out/gpu08/$f" ] || { echo "report.py did not write $f"; exit 1; }
done
grep -qF "| fp16 | 64 | 0 | 4096 | 4 | 32 | 300.0 | n/a | n/a | n/a | n/a | n/a | n/a | 510.0 (500.0–520.0) | 330.0 | 340.0 | 510.0 | 100.0 | 150.0 | 51.6 | 1–2 |" "$out/gpu08/summary.md" &&
  grep -qF "| bf16 | 64 | 0 | 4096 | 4 | 32 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | 505.0 | n/a | n/a | n/a | n/a | n/a | 51.1 | 1 |" "$out/gpu08/summary.md" ||
  { echo "the stage 08 ladder table is wrong"; exit 1; }
! grep -qF "08_flash_v3:" "$out/gpu08/summary.md" || { echo "a stage 08 figure was said to be missing"; exit 1; }
# Without the peers: the figure against them is removed, and the summary says why.
grep -v pytorch_ "$out/gpu08/r.csv" >"$out/gpu08/no_peers.csv"
"$py" "$here/report.py" "$out/gpu08/no_peers.csv" --out "$out/gpu08" >/dev/null
[ ! -e "$out/gpu08/flash_v3_vs_cudnn.png" ] && [ -s "$out/gpu08/flash_v3_ladder.png" ] &&
  grep -qF "08_flash_v3: no peer rows in the ladder's cells" "$out/gpu08/summary.md" ||
  { echo "without peers: a stale figure, or no note"; exit 1; }
grep -qF "Ours against the peers" "$out/gpu08/summary.md" &&
  { echo "rows without rounds or kernel times (the older schema) got a fairness table"; exit 1; }

# Rows in the current schema (ms_min, ms_max, kernel_ms, kernels, round at the end), three rounds of
# ours alternating with the peers': the ladder's median as before, and the table of ours against each
# peer, round k against round k, with the kernel level from the first round.
mkdir "$out/rounds"
h="B=4 H=32 N=4096 d=64 causal=0"
{
  echo "stage,variant,device,dtype,shape,size,flops,ms,tflops,gbps,io_model_bytes,io_counted_bytes,dram_read_bytes,dram_write_bytes,l2_read_bytes,l2_write_bytes,peak_mem_bytes,max_rel_err,ms_min,ms_max,kernel_ms,kernels,round"
  for k in 1 2 3; do
    ours=$(echo "1.00 1.10 1.05" | cut -d' ' -f$k) peer=$(echo "1.20 1.21 1.26" | cut -d' ' -f$k)
    kern="" peerk="" ops="" peerops=""
    [ $k = 1 ] && kern=0.98 peerk=1.10 ops=2 peerops=1
    echo "08_flash_v3,tuned,$g,fp16,$h Br=128 Bc=128,4096,549755813888,$ours,,,,,,,,,,,$ours,$ours,$kern,$ops,$k"
    echo "08_flash_v3,pytorch_cudnn,$g,fp16,$h,4096,549755813888,$peer,,,,,,,,,,,$peer,$peer,$peerk,$peerops,$k"
  done
} >"$out/rounds/r.csv"
"$py" "$here/report.py" "$out/rounds/r.csv" --out "$out/rounds" >/dev/null
grep -qF "### Ours against the peers, round k against round k" "$out/rounds/summary.md" &&
  grep -qF "| 08 | fp16 | d=64 causal=0 N=4096 B=4 H=32 | tuned | pytorch_cudnn | 523.6 [499.8-549.8] | 454.3 [436.3-458.1] | 3/3 | 1.200 [1.100-1.200] | 1.122 | +2.0% / +9.1% | 2/1 |" \
    "$out/rounds/summary.md" || { echo "the table of ours against the peers is wrong"; exit 1; }
"$py" "$here/fairness.py" "$out/rounds/r.csv" >"$out/rounds/fairness.txt"
grep -qE "^08 +fp16 .*tuned +pytorch_cudnn .*1\.200 \[1\.100-1\.200\]" "$out/rounds/fairness.txt" ||
  { echo "fairness.py's text table is wrong"; exit 1; }
echo "report.py: figures and summary written"
