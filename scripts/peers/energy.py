#!/usr/bin/env python3
"""Sustained speed and energy a call: one of our programs against cuDNN's attention, on one cell.

    python3 scripts/peers/energy.py --program build/bin/08_flash_v3 --variant tuned \\
        --tokens 16384 --seq 16384 --d 128 --dtype fp16 [--causal] --seconds 8 --rounds 4 --csv energy.csv

Where a GPU runs at its power cap (the H100 in stage 08's d = 128, N = 16384 cell), a median of 20
calls each after an L2 flush says little about who is faster: the clock moves with the power drawn,
call by call. What decides such a cell is the work done per joule. For each round, each side runs
the same problem back to back for --seconds (after a warm-up of a quarter of that; no L2 flush
between calls, for both), and the GPU's energy counter (NVML's nvmlDeviceGetTotalEnergyConsumption,
millijoules since the driver loaded) is read where the timed calls start and end. Reported for each
side and round: calls, ms a call (CUDA events over all of them), joules a call, mean power (joules
over the events' time); the sides alternate (round 1 ours first, round 2 cuDNN first, ...).

Ours: the program with --sustain, which prints "[sustain] start" just before its first timed call
and "[sustain] end" just after its last has finished (common/timer.cu, time_sustained); this script
reads the counter when it reads those lines. cuDNN: torch.nn.functional.scaled_dot_product_attention
under the cuDNN backend, in this process, with the same protocol; Q, K, V as (B, N, H, d) tensors
passed as transposed views (its native layout, as scripts/peers/torch_attention.py gives them),
uniform in [-1, 2) as ours. Rows (--csv, one a side a round): side, dtype, shape, round, calls, ms a
call, TFLOP/s, J a call, W, and the GPU's name. Exits 2 with a message without PyTorch, a GPU or NVML.
"""
import argparse
import ctypes
import csv
import os
import statistics
import subprocess
import sys
import time


class Nvml:
    """The GPU's energy counter (mJ) through libnvidia-ml, which the driver installs."""

    def __init__(self, index=0):
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            raise SystemExit(f"energy.py: NVML not found ({e}): it comes with the NVIDIA driver")
        self.check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        self.handle = ctypes.c_void_p()
        self.check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle)), "GetHandleByIndex")

    def check(self, code, what):
        if code != 0:
            raise SystemExit(f"energy.py: NVML {what} returned {code}")

    def millijoules(self):
        e = ctypes.c_ulonglong()
        self.check(self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(e)), "energy counter")
        return e.value


def ours(args, nvml):
    """One round of our program: (calls, gpu ms, joules)."""
    heads = args.heads or 2048 // args.d
    cmd = [args.program, "--tokens", str(args.tokens), "--heads", str(heads), "--seq", str(args.seq), "--d",
           str(args.d), "--dtype", args.dtype, "--variants", args.variant, "--no-counters", "--reps", "3",
           "--warmup", "1", "--sustain", str(args.seconds)] + (["--causal"] if args.causal else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    e0 = e1 = None
    result = None
    for line in proc.stdout:
        if line.startswith("[sustain] start"):
            e0 = nvml.millijoules()
        elif line.startswith("[sustain] end"):
            e1 = nvml.millijoules()
        elif line.startswith("[sustain] result"):
            f = dict(x.split("=") for x in line.split()[2:])
            result = (int(f["calls"]), float(f["gpu_ms"]))
    err = proc.stderr.read()
    if proc.wait() != 0 or result is None or e0 is None or e1 is None:
        raise SystemExit(f"energy.py: {' '.join(cmd)} failed (rc {proc.returncode}):\n{err[-2000:]}")
    return result[0], result[1], (e1 - e0) / 1000.0


def cudnn(args, nvml, torch, F, sdpa_kernel, backend, qkv):
    """One round of cuDNN's attention, the same protocol: (calls, gpu ms, joules)."""
    q, k, v = qkv

    def call():
        F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)

    def run_for(seconds, count):
        t0, calls = time.monotonic(), 0
        while True:
            for _ in range(10):
                call()
            torch.cuda.synchronize()
            calls += 10
            if time.monotonic() - t0 >= seconds:
                return calls if count else 0

    with sdpa_kernel(backend):
        run_for(0.25 * args.seconds, False)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0 = nvml.millijoules()
        start.record()
        calls = run_for(args.seconds, True)
        stop.record()
        stop.synchronize()
        e1 = nvml.millijoules()
    return calls, start.elapsed_time(stop), (e1 - e0) / 1000.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", required=True, help="our program (a stage's binary that takes --sustain)")
    ap.add_argument("--variant", required=True, help="our variant (its --variants name)")
    ap.add_argument("--tokens", type=int, default=16384, help="B*N")
    ap.add_argument("--seq", type=int, default=16384, help="N")
    ap.add_argument("--heads", type=int, default=0, help="H (default 2048 / d)")
    ap.add_argument("--d", type=int, default=128, choices=[64, 128])
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seconds", type=float, default=8.0, help="timed back-to-back calls a side a round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--csv", help="append the rows here")
    args = ap.parse_args()
    if args.tokens % args.seq:
        raise SystemExit(f"energy.py: --tokens {args.tokens} is not a multiple of --seq {args.seq}")
    if args.seconds <= 0 or args.rounds < 1:
        raise SystemExit("energy.py: --seconds must be > 0 and --rounds >= 1")
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        raise SystemExit(f"energy.py: PyTorch not found ({e})")
    if not torch.cuda.is_available():
        raise SystemExit("energy.py: no CUDA GPU for PyTorch")
    nvml = Nvml()
    B, N, d = args.tokens // args.seq, args.seq, args.d
    H = args.heads or 2048 // d
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    g = torch.Generator(device="cuda").manual_seed(1)
    qkv = [torch.rand(B, N, H, d, device="cuda", generator=g).mul_(3.0).sub_(1.0).to(dt).transpose(1, 2)
           for _ in range(3)]
    flops = 4.0 * B * H * N * N * d * (0.5 if args.causal else 1.0)
    shape = f"B={B} H={H} N={N} d={d} causal={int(args.causal)}"
    gpu = torch.cuda.get_device_name()
    rows = []
    for r in range(1, args.rounds + 1):
        order = ["ours", "cudnn"] if r % 2 else ["cudnn", "ours"]
        for side in order:
            if side == "ours":
                calls, ms, joules = ours(args, nvml)
            else:
                calls, ms, joules = cudnn(args, nvml, torch, F, sdpa_kernel, SDPBackend.CUDNN_ATTENTION, qkv)
            per = ms / calls
            row = dict(side=side if side == "cudnn" else args.variant, dtype=args.dtype, shape=shape, round=r,
                       calls=calls, ms_per_call=f"{per:.6f}", tflops=f"{flops / per / 1e9:.1f}",
                       joules_per_call=f"{joules / calls:.6f}", watts=f"{joules / (ms / 1000.0):.1f}", gpu=gpu)
            rows.append(row)
            print(f"round {r} {row['side']:8s} {calls:6d} calls  {per:.4f} ms a call  {row['tflops']} TFLOP/s  "
                  f"{row['joules_per_call']} J a call  {row['watts']} W", flush=True)
    if args.csv:
        new = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            if new:
                w.writeheader()
            w.writerows(rows)

    def med(side, key):
        return statistics.median(float(x[key]) for x in rows if x["side"] == side)

    o, c = args.variant, "cudnn"
    print(f"{gpu}, {args.dtype} {shape}, {args.rounds} rounds of {args.seconds:g} s a side:")
    print(f"  ms a call: {o} {med(o, 'ms_per_call'):.4f}, cuDNN {med(c, 'ms_per_call'):.4f}; "
          f"speed {o}/cuDNN {med(c, 'ms_per_call') / med(o, 'ms_per_call'):.3f}")
    print(f"  J a call: {o} {med(o, 'joules_per_call'):.4f}, cuDNN {med(c, 'joules_per_call'):.4f}; "
          f"cuDNN/{o} {med(c, 'joules_per_call') / med(o, 'joules_per_call'):.3f}")
    print(f"  W: {o} {med(o, 'watts'):.0f}, cuDNN {med(c, 'watts'):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
