#!/usr/bin/env bash
# CTest: what the peer scripts do without PyTorch or a GPU (Python's standard library alone):
#  - their options: the native layout by default, the refusals;
#  - the kernel time's bookkeeping (peer_common: a trace's GPU work split into calls at the L2
#    flushes, as common/kernel_time.cpp splits ours), and Timer.kernel_time end to end on a made-up
#    torch and torch.profiler;
#  - the CSV: the course's columns in common/report.cpp's order, an older header refused;
#  - rounds that alternate with ours: torch_attention.py --serve and scripts/peers/peer_turn.sh over
#    real named pipes, with the measurement itself made up.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PEERS="$here" ROOT="$root" TMP="$tmp" PYTHONPATH="$here" python3 - <<'PY'
import contextlib, csv, io, json, os, re, subprocess, sys, threading, types

peers, root, tmp = os.environ["PEERS"], os.environ["ROOT"], os.environ["TMP"]
import peer_common as pc
import torch_attention as ta

# --- options ---------------------------------------------------------------------------------------
a = ta.parse_args(["--csv", "x.csv", "--tokens", "16384", "--width", "2048", "--d", "64,128", "--mask", "both"])
assert a.layout == "bnhd" and a.mode == "fwd" and a.ds == [64, 128] and a.rounds == 1 and not a.kernel_time
a = ta.parse_args(["--csv", "x.csv", "--backward", "--layout", "bhnd", "--rounds", "5", "--kernel-time"])
assert a.layout == "bhnd" and a.mode == "bwd" and a.rounds == 5 and a.kernel_time
for bad in (["--backward", "--backends", "triton"], ["--pair-with", "tuned"], ["--heads", "16", "--width", "2048"],
            ["--width", "2000", "--d", "64"], ["--causal", "--mask", "none"], ["--layout", "nhd"], ["--rounds", "0"]):
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            ta.parse_args(["--csv", "x.csv"] + bad)
        except SystemExit as e:
            assert e.code == 2, bad
        else:
            raise AssertionError(f"accepted {bad}")
assert ta.shape_fields("B=1 H=16 N=16384 d=128 causal=1 Br=128 Bc=128") == dict(B=1, H=16, N=16384, d=128, causal=1)

# --- the kernel time's bookkeeping ------------------------------------------------------------------
assert pc.short_kernel_name("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>(Flash_fwd_params)") \
    == "flash_fwd_kernel"
assert pc.short_kernel_name("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0") \
    == "cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0"
assert pc.short_kernel_name("Memset (Device)") == "Memset"
assert pc.short_kernel_name("course::(anonymous namespace)::read_all(int4 const*, int)") == "read_all"
assert pc.short_kernel_name("void attention::fa3::flash_v3_tuned<__half, 128, 2>(CUtensorMap)") == "flash_v3_tuned"
trace = {"traceEvents": [
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0.5, "dur": 3},
    {"ph": "X", "cat": "kernel", "name": "reduce_kernel<float>", "ts": 10.0, "dur": 50.0},
    {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 61.0, "dur": 1.0},
    {"ph": "X", "cat": "kernel", "name": "void flash_fwd_kernel<T>(P)", "ts": 70.0, "dur": 100.0},
    {"ph": "X", "cat": "kernel", "name": "reduce_kernel<float>", "ts": 200.0, "dur": 50.0},
    {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 251.0, "dur": 1.0},
    {"ph": "X", "cat": "kernel", "name": "void flash_fwd_kernel<T>(P)", "ts": 260.0, "dur": 120.0},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "mine", "ts": 0, "dur": 400},
    {"ph": "i", "cat": "kernel", "name": "an instant", "ts": 5}]}
ops = pc.gpu_ops_of_trace(trace)
assert [o.name for o in ops] == ["reduce_kernel<float>", "Memset (Device)", "void flash_fwd_kernel<T>(P)"] * 2
# The flush ran the reduction alone: the memsets are the call's (a flush is matched as a sequence).
calls = pc.split_calls(pc.mark_flush(ops, ["reduce_kernel<float>"]))
kt, why = pc.kernel_time_of(calls, 2)
assert why == "" and kt.ops == 2 and kt.names == ["Memset", "flash_fwd_kernel"], (kt, why)
assert abs(kt.median_ms - 0.111) < 1e-9 and abs(kt.min_ms - 0.101) < 1e-9 and abs(kt.max_ms - 0.121) < 1e-9
# Had the flush been reduction + memset, each call is the kernel alone.
kt, why = pc.kernel_time_of(pc.split_calls(pc.mark_flush(pc.gpu_ops_of_trace(trace),
                                                         ["reduce_kernel<float>", "Memset (Device)"])), 2)
assert kt.ops == 1 and abs(kt.median_ms - 0.11) < 1e-9
kt, why = pc.kernel_time_of(calls, 3)
assert kt is None and "expected 3" in why
kt, why = pc.kernel_time_of(pc.split_calls(pc.mark_flush(pc.gpu_ops_of_trace(trace), ["nothing of the kind"])), 2)
assert kt is None and "found 0 calls" in why

# Timer.kernel_time on a made-up torch whose work lands on a made-up GPU timeline, and a made-up
# torch.profiler that exports it as Kineto does (Chrome trace, microseconds).
timeline, clock = [], [0.0]
def gpu(name, us):
    clock[0] += 2.0
    timeline.append({"ph": "X", "cat": "kernel", "name": name, "ts": clock[0], "dur": us})
    clock[0] += us
class Flush:
    def sum(self): gpu("void at::native::reduce_kernel<512, 1>(R)", 40.0)
class Event:
    def __init__(self, enable_timing): self.t = 0.0
    def record(self): self.t = clock[0]
    def elapsed_time(self, other): return (other.t - self.t) / 1e3
class OOM(Exception): pass
cuda = types.SimpleNamespace(get_device_properties=lambda i: types.SimpleNamespace(L2_cache_size=50 << 20),
                             Event=Event, synchronize=lambda: None, OutOfMemoryError=OOM)
fake_torch = types.SimpleNamespace(cuda=cuda, float32="f32", zeros=lambda *a, **k: Flush())
class Profile:
    def __init__(self, activities): pass
    def __enter__(self): self.start = len(timeline); return self
    def __exit__(self, *e): self.events = timeline[self.start:]; return False
    def export_chrome_trace(self, path):
        with open(path, "w") as f: json.dump({"traceEvents": self.events}, f)
sys.modules["torch"] = types.ModuleType("torch")
sys.modules["torch.profiler"] = types.SimpleNamespace(ProfilerActivity=types.SimpleNamespace(CUDA="cuda"),
                                                      profile=Profile)
timer = pc.Timer(fake_torch)
durations = iter([100.0, 90.0, 110.0, 95.0, 105.0] * 10)
def call():  # a layout copy, then the attention kernel
    gpu("void at::native::elementwise_kernel<128, 4>(F)", 5.0)
    gpu("void pytorch_flash::flash_fwd_kernel<T>(P)", next(durations))
t = timer.time(call, reps=5, warmup=0)
assert t.min_ms <= t.median_ms <= t.max_ms
kt, why = timer.kernel_time(call, reps=5, warmup=0)
assert why == "" and kt.calls == 5 and kt.ops == 2 and kt.names == ["elementwise_kernel", "flash_fwd_kernel"], (kt, why)
assert abs(kt.median_ms - 0.105) < 1e-9, kt
assert "2 pieces of GPU work a call: elementwise_kernel, flash_fwd_kernel" in pc.kernel_text(kt, 0.110)
del sys.modules["torch.profiler"], sys.modules["torch"]

# --- the CSV ----------------------------------------------------------------------------------------
cpp = open(os.path.join(root, "common", "report.cpp")).read()
block = cpp[cpp.index("csv_columns()"):cpp.index("return columns;")]
assert re.findall(r'"([a-z_0-9]+)"', block) == pc.COLUMNS, "peer_common.COLUMNS is not report.cpp's schema"
path = os.path.join(tmp, "rows.csv")
pc.append_csv(path, [dict(stage="s", variant="v", ms="1", round=1)])
pc.append_csv(path, [dict(stage="s", variant="v", ms="2", round=2)])
rows = list(csv.DictReader(open(path)))
assert [r["round"] for r in rows] == ["1", "2"] and list(rows[0]) == pc.COLUMNS
old = os.path.join(tmp, "old.csv")
with open(old, "w") as f:
    f.write(",".join(pc.COLUMNS[:18]) + "\n")
try:
    pc.append_csv(old, [dict(stage="s")])
except SystemExit as e:
    assert "another header" in str(e)
else:
    raise AssertionError("appended to a CSV of another schema")

# --- rounds that alternate with ours: --serve and peer_turn.sh ---------------------------------------
made, timed = [], []
class Problem:
    def __init__(self, env, *key):
        self.key = key
        made.append(key)
def measure(env, prob, variant, backend, round_no, stage):
    timed.append((variant, prob.key[2], round_no))
    return dict(stage=stage, variant=variant, dtype=prob.key[5], shape=f"N={prob.key[2]}", ms="1", round=round_no)
ta.Problem, ta.measure = Problem, measure
serve_dir = os.path.join(tmp, "serve")
os.mkdir(serve_dir)
os.mkfifo(os.path.join(serve_dir, "request"))
os.mkfifo(os.path.join(serve_dir, "reply"))
out = os.path.join(tmp, "served.csv")
args = ta.parse_args(["--csv", out, "--serve", serve_dir, "--pair-with", "tuned,split"])
env = types.SimpleNamespace(args=args, torch=types.SimpleNamespace(cuda=types.SimpleNamespace(empty_cache=lambda: None)),
                            backends=lambda dtype: [("pytorch_flash", "F"), ("pytorch_cudnn", "C")])
with contextlib.redirect_stdout(io.StringIO()):
    server = threading.Thread(target=ta.serve, args=(env,), daemon=True)
    server.start()
    turn = os.path.join(peers, "peer_turn.sh")
    def ours(variant, shape, round_no, timeout="20", where=serve_dir):
        e = dict(os.environ, COURSE_STAGE="08_flash_v3", COURSE_VARIANT=variant, COURSE_DTYPE="fp16",
                 COURSE_SHAPE=shape, COURSE_ROUND=str(round_no), PEER_TURN_TIMEOUT=timeout)
        return subprocess.run([turn, where], env=e, stderr=subprocess.DEVNULL).returncode
    s1 = "B=16 H=16 N=1024 d=128 causal=0 Br=128 Bc=128"
    s2 = "B=4 H=16 N=4096 d=128 causal=1 Br=128 Bc=128"
    assert [ours("tuned", s1, 1), ours("tuned", s1, 2), ours("wgmma", s1, 1), ours("tuned", s2, 1)] == [0, 0, 0, 0]
    with open(os.path.join(serve_dir, "request"), "w") as f:
        f.write("quit\n")
    server.join(10)
assert not server.is_alive(), "the server did not stop at quit"
assert made == [(16, 16, 1024, 128, False, "fp16"), (4, 16, 4096, 128, True, "fp16")], made  # inputs once a problem
assert timed == [("pytorch_flash", 1024, 1), ("pytorch_cudnn", 1024, 1), ("pytorch_flash", 1024, 2),
                 ("pytorch_cudnn", 1024, 2), ("pytorch_flash", 4096, 1), ("pytorch_cudnn", 4096, 1)], timed
rows = list(csv.DictReader(open(out)))
assert [(r["stage"], r["round"]) for r in rows] == [("08_flash_v3", "1")] * 2 + [("08_flash_v3", "2")] * 2 + \
    [("08_flash_v3", "1")] * 2
# No server there: refused at once. A server that does not answer: given up after the timeout.
assert ours("tuned", s1, 1, where=tmp) == 2
assert ours("tuned", s1, 1, timeout="1") == 124

# --- energy.py: our program's markers and the energy read between them; a failing program ----------
import energy as en


class FakeNvml:  # the counter moves 250 J between two reads
    def __init__(self):
        self.mj = 1000

    def millijoules(self):
        self.mj += 250000
        return self.mj


def fake_program(name, body):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return path


args = types.SimpleNamespace(variant="tuned", tokens=16384, seq=16384, heads=0, d=128, dtype="fp16", causal=False,
                             seconds=1.0)
args.program = fake_program("sustain.sh", "echo 'a table line'\necho '[sustain] start tuned | fp16 | x'\n"
                            "echo '[sustain] end'\necho '[sustain] result calls=100 gpu_ms=350.0 ms_per_call=3.5'\n")
assert en.ours(args, FakeNvml()) == (100, 350.0, 250.0)
for body in ("echo broken >&2\nexit 3\n", "echo '[sustain] start tuned'\n"):  # fails; ends without its markers
    args.program = fake_program("bad.sh", body)
    try:
        en.ours(args, FakeNvml())
        raise AssertionError("a failing program was accepted")
    except SystemExit as e:
        assert "failed" in str(e), e
print("peer scripts: options, kernel time, CSV, rounds with a server, energy's markers: every case")
PY
