#!/usr/bin/env bash
# CTest: the peers' max_rel_err (peer_common.rel_errors) is the course's, case for case as
# common/tests/test_common.cpp checks common/compare.cpp (numpy; PyTorch takes the same code path
# with torch's functions). Exits 77, "skipped", when no Python has numpy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import numpy' 2>/dev/null; then
    py=$candidate
    break
  fi
done
[ -n "$py" ] || { echo "SKIP: no Python with numpy"; exit 77; }
PYTHONPATH="$here" "$py" - <<'PY'
import math
import numpy as np
from peer_common import max_rel_err, rel_errors

ref = np.array([1.0, -2.0, 3.0, 0.0])
assert max_rel_err(ref.astype(np.float32), ref) == 0.0
x = ref.copy(); x[2] = 3.0 * (1 + 1e-3)
assert math.isclose(max_rel_err(x, ref), 1e-3, rel_tol=1e-9)       # relative to the element (3 > rms)
x[2] = math.nan; assert max_rel_err(x, ref) == math.inf              # NaN never passes
x[2] = math.inf; assert max_rel_err(x, ref) == math.inf
ref = np.array([0.0, 4.0, -4.0])                                      # a zero element: against the rms
x = np.array([1e-7, 4.0, -4.0])
assert math.isclose(max_rel_err(x, ref), 1e-7 / math.sqrt(32 / 3), rel_tol=1e-9)
ref = np.array([math.nan, 1.0])                                       # a NaN reference wants a NaN
assert max_rel_err(np.array([math.nan, 1.0]), ref) == 0.0
assert max_rel_err(np.array([0.0, 1.0]), ref) == math.inf
ref = np.array([math.inf, 1.0])
assert max_rel_err(np.array([math.inf, 1.0]), ref) == 0.0
assert max_rel_err(np.array([-math.inf, 1.0]), ref) == math.inf
assert max_rel_err(np.array([0.5, 0.0]), np.zeros(2)) == 0.5          # scale 0: the absolute error
ref = np.array([3.0, -4.0, 0.0, 0.0])                                 # rms 2.5
x = np.array([3.03, -4.0, 0.0, 0.0])
assert math.isclose(max_rel_err(x, ref), 0.01, rel_tol=1e-9)
assert math.isclose(max_rel_err(x, ref, "rms"), 0.03 / 2.5, rel_tol=1e-9)  # Scale::rms
x[2] = math.nan; assert max_rel_err(x, ref, "rms") == math.inf
e = rel_errors(np.array([[1.0, 2.5], [3.0, 4.0]]), np.array([[1.0, 2.0], [3.0, 4.0]]))
assert e.shape == (2, 2) and int(e.argmax()) == 1
print("peer_common.max_rel_err: the course's measure, every case")
PY

# torch_attention.py end to end on a stand-in for PyTorch (fake_torch.py: numpy, a made-up GPU
# timeline): the rows, rounds, errors, kernel times, the layouts SDPA gets, --backward, --serve.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TMP="$tmp" HERE="$here" PYTHONPATH="$here" "$py" - <<'PY'
import contextlib, csv, io, os, subprocess, threading
import fake_torch
import torch_attention as ta

tmp, here = os.environ["TMP"], os.environ["HERE"]
def run(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ta.main(argv) == 0
    return out.getvalue()
def rows(path):
    return list(csv.DictReader(open(path)))

# The forward over a grid: two rounds, the native layout, one backend that refuses the shapes.
fake_torch.refuse = {"efficient"}
path = os.path.join(tmp, "fwd.csv")
log = run(["--csv", path, "--stage", "08_flash_v3", "--tokens", "64", "--width", "32", "--d", "16", "--seq", "16,32",
           "--mask", "both", "--dtype", "fp16", "--backends", "flash,cudnn,efficient", "--reps", "3", "--rounds", "2",
           "--kernel-time"])
got = rows(path)
assert len(got) == 2 * 2 * 2 * 2, len(got)  # masks x N x rounds x (flash, cudnn)
assert "layout bnhd" in log and "pytorch_efficient fp16 B=4 H=2 N=16 d=16 causal=0: not run (No available kernel" in log
for r in got:
    first = r["round"] == "1"
    assert r["variant"] in ("pytorch_flash", "pytorch_cudnn") and r["stage"] == "08_flash_v3", r
    assert float(r["ms_min"]) <= float(r["ms"]) <= float(r["ms_max"])
    assert (r["max_rel_err"] != "") == first and (r["kernel_ms"] != "") == first, r
    if first:
        assert float(r["max_rel_err"]) < 2e-3, r["max_rel_err"]
        assert r["kernels"] == "1" and abs(float(r["kernel_ms"]) - 0.1) < 1e-9, r  # the SDPA kernel alone
assert "kernels 0.1 ms" in log and "1 piece of GPU work a call: fwd_kernel" in log, log
# SDPA got (B, N, H, d) memory as B x H x N x d views: the head stride is d, the row stride H·d.
B, N, H, d = 4, 16, 2, 16
assert ("flash", (N * H * d, d, H * d, 1)) in fake_torch.calls, fake_torch.calls[:3]
fake_torch.calls.clear()
path = os.path.join(tmp, "bhnd.csv")
run(["--csv", path, "--batch", "2", "--heads", "2", "--seq", "16", "--d", "16", "--dtype", "fp16",
     "--backends", "flash", "--reps", "2", "--layout", "bhnd"])
assert [r["variant"] for r in rows(path)] == ["pytorch_flash_bhnd"]
assert fake_torch.calls[0] == ("flash", (2 * 16 * 16, 16 * 16, 16, 1)), fake_torch.calls[0]

# Our Triton FA-2 beside SDPA (a stand-in kernel here): B x H x N x d contiguous copies, made once.
import sys, types
seen = []
def triton_fa2(q, k, v, causal):
    seen.append(tuple(x // q.a.itemsize for x in q.a.strides))
    fake_torch._work("fa2_forward", 90.0)
    o, _ = fake_torch._attention(q, k, v, causal)
    return fake_torch.Tensor(o.astype(q.dtype)), None
sys.modules["triton_attention"] = types.SimpleNamespace(triton=object(), attention=triton_fa2)
path = os.path.join(tmp, "triton.csv")
run(["--csv", path, "--stage", "06_flash_v2", "--batch", "2", "--heads", "3", "--seq", "16", "--d", "16", "--causal",
     "--dtype", "fp16", "--backends", "flash,triton", "--reps", "2", "--rounds", "2", "--kernel-time"])
got = rows(path)
assert [(r["variant"], r["round"]) for r in got] == [("pytorch_flash", "1"), ("triton_fa2", "1"),
                                                     ("pytorch_flash", "2"), ("triton_fa2", "2")], got
assert float(got[1]["max_rel_err"]) < 2e-3 and got[1]["kernels"] == "1" and not got[1]["peak_mem_bytes"]
assert set(seen) == {(3 * 16 * 16, 16 * 16, 16, 1)}, seen
del sys.modules["triton_attention"]

# The backward: the gradients' error (rms-scaled in fp16), two pieces of GPU work a call.
path = os.path.join(tmp, "bwd.csv")
log = run(["--csv", path, "--backward", "--tokens", "64", "--width", "32", "--d", "16", "--seq", "32", "--causal",
           "--dtype", "fp16", "--backends", "flash,cudnn", "--reps", "2", "--kernel-time"])
got = rows(path)
assert [r["variant"] for r in got] == ["pytorch_flash_bwd", "pytorch_cudnn_bwd"] and got[0]["stage"] == "07_backward"
assert all(float(r["max_rel_err"]) < 5e-3 and r["kernels"] == "2" for r in got), got
assert abs(float(got[0]["kernel_ms"]) - 0.251) < 1e-9 and "memset" in log.lower()

# --serve: our program's turn command asks; rows of the problem ours timed, the round ours gave.
pipes = os.path.join(tmp, "pipes")
os.mkdir(pipes)
os.mkfifo(os.path.join(pipes, "request"))
os.mkfifo(os.path.join(pipes, "reply"))
path = os.path.join(tmp, "served.csv")
server = threading.Thread(target=run, args=(["--csv", path, "--serve", pipes, "--backends", "cudnn", "--reps", "2",
                                             "--kernel-time"],), daemon=True)
server.start()
for round_no in (1, 2):
    env = dict(os.environ, COURSE_STAGE="08_flash_v3", COURSE_VARIANT="tuned", COURSE_DTYPE="fp16",
               COURSE_SHAPE="B=2 H=2 N=32 d=16 causal=1 Br=128 Bc=128", COURSE_ROUND=str(round_no),
               PEER_TURN_TIMEOUT="30")
    assert subprocess.run([os.path.join(here, "peer_turn.sh"), pipes], env=env).returncode == 0
with open(os.path.join(pipes, "request"), "w") as f:
    f.write("quit\n")
server.join(10)
got = rows(path)
assert [(r["variant"], r["shape"], r["round"]) for r in got] == \
    [("pytorch_cudnn", "B=2 H=2 N=32 d=16 causal=1", "1"), ("pytorch_cudnn", "B=2 H=2 N=32 d=16 causal=1", "2")], got
assert got[0]["kernel_ms"] and not got[1]["kernel_ms"] and got[0]["max_rel_err"] and not got[1]["max_rel_err"]
print("torch_attention.py on a stand-in for PyTorch: grid, rounds, layouts, backward, kernel time, --serve")
PY
