#!/usr/bin/env python3
"""Peer: PyTorch's attention on the same GPU, timed the course's way, in the course's CSV.

    python3 scripts/peers/torch_attention.py --csv results.csv --batch 8 --heads 32 --seq 1024,4096 --d 64 [--causal]
    python3 scripts/peers/torch_attention.py --csv results.csv --stage 06_flash_v2 --dtype fp16,bf16 ...
    python3 scripts/peers/torch_attention.py --csv results.csv --backward --dtype fp16 ...
    python3 scripts/peers/torch_attention.py --csv results.csv --tokens 16384 --width 2048 --d 64,128 --mask both ...
    python3 scripts/peers/torch_attention.py --csv results.csv --fwd-bwd --batch 64 --heads 16 --seq 1024 --d 64 --dtype fp16
    python3 scripts/peers/torch_attention.py --csv results.csv --serve DIR --backends flash,cudnn [--backward]

For each d, mask, N and dtype (--d takes several head dimensions, and with --width H = width / d;
--mask both runs every shape without the mask, then with it; one call starts PyTorch once): Q, K,
V of B × H × N × d, uniform in [-1, 2); torch.nn.functional.scaled_dot_product_attention with one
backend at a time:
  fp32        "math" (PyTorch's own matmul, softmax and matmul, with the scores in memory: what a
              reader would write by hand) and "efficient" (the memory-efficient kernel, the only
              fused backend that takes fp32). TF32 is off: plain fp32 on CUDA cores.
  fp16, bf16  "flash" (FlashAttention-2 itself, as PyTorch ships it), "cudnn" (NVIDIA's cuDNN
              fused attention, Hopper instructions included), "efficient" and "math"; and, named in
              --backends, "triton" (our Triton FA-2, scripts/peers/triton_attention.py; forward only).
Layout (--layout): "bnhd", the default, is the backends' native one: Q, K, V (and dO) are
allocated as (B, N, H, d) tensors, as a model's projections produce them, and passed to SDPA as
.transpose(1, 2) views, which FlashAttention-2, cuDNN and the memory-efficient kernel read in place
(and write O in, and the gradients), so no backend pays a layout copy that ours does not. "bhnd"
allocates B × H × N × d contiguous tensors (the course's own layout, and this script's before);
its rows are named pytorch_<backend>_bhnd. The Triton kernel takes B × H × N × d contiguous (its
pointer arithmetic), so it gets a contiguous copy, made once, outside the timing.
Timing: the median of --reps runs with CUDA events, each after reading a buffer three times the
L2 (ms; ms_min and ms_max: the fastest and slowest run). With --kernel-time, in the first round,
the same calls under torch.profiler: the GPU's own time of a call's kernels, memsets and copies
(kernel_ms) and how many there are (kernels), which confirm the event time at kernel level
(peer_common.Timer.kernel_time; ours: the programs' --kernel-time). --rounds R times every problem
R times in a row (a row a round, column round). The error is against float64 on the first head, on
the same (rounded) inputs. A backend that runs out of memory gets a row with no time, as the
course's programs write it; one that does not take the shape is skipped with its message. Rows:
stage 05_flash_v1 (or --stage), variants pytorch_<backend>. Exits 0 with a message when PyTorch or
a GPU is missing.

--backward times the backward pass alone. Q, K, V as above (requiring gradients) and dO of the
same shape and layout, drawn next from the same generator, uniform in [-1, 2) like Q (not small,
not smooth: a gradient that hides errors would make the check weak). Under each backend, O =
SDPA(Q, K, V) is computed once and torch.autograd.grad(O, (Q, K, V), dO, retain_graph=True) is
timed: the backend's backward kernels (D = rowsum(dO∘O) and the recomputation included where the
backend does them), not the forward. FLOPs: 2.5 × the forward's 4·B·H·N²·d (halved when causal),
as the course counts them. Variants pytorch_<backend>_bwd.
--fwd-bwd times the forward and the backward together (O = SDPA(Q, K, V), then autograd.grad of
O with dO), as the FlashAttention paper's Fig. 2 does (B = 64, H = 16, N = 1024, d = 64). FLOPs:
3.5 × the forward's. Variants pytorch_<backend>_fwdbwd.
In both: the peak memory is that of one forward + backward above what was allocated before it,
plus the inputs Q, K, V and dO; the error is the largest of dQ's, dK's and dV's on the first batch
and head against float64 autograd on the same (rounded) inputs and dO, each measured as stage 07
measures its own (peer_common.max_rel_err): |x − ref| / max(|ref|, rms(ref)) in fp32, and
|x − ref| / rms(ref) in fp16 and bf16. The default stage of their rows is
07_backward (--stage overrides it). Without either flag the script times the forward alone, as
described above.

--serve DIR: the peers' half of rounds that alternate with ours, problem by problem. DIR holds two
named pipes, request and reply (mkfifo). Each request is one line, tab-separated: stage, variant,
dtype, shape (ours: "B=.. H=.. N=.. d=.. causal=.." and its block sizes) and round, as a course
program's --between-rounds command (scripts/peers/peer_turn.sh) sends it after timing round k of
that problem; the server times the same problem (--backends, the mode and --layout as given) as
round k, appends its rows, and answers "done" on reply. "quit" ends it. --pair-with VARIANTS
answers requests for other variants of ours at once, timing nothing. The other problem options
are ignored; the inputs of a problem are made (and checked) once, at its first request.
"""
import argparse
import contextlib
import math
import os
import sys
import warnings

from peer_common import Timer, append_csv, kernel_text, max_rel_err

SUFFIX = {"fwd": "", "bwd": "_bwd", "fwdbwd": "_fwdbwd"}
FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", required=True)
    p.add_argument("--stage", default=None, help="default: 05_flash_v1; 07_backward with --backward or --fwd-bwd")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=0, help="B*N: when given, B = tokens / N for each N")
    p.add_argument("--heads", type=int, default=None, help="H (default 32; not with --width)")
    p.add_argument("--width", type=int, default=0,
                   help="H*d: when given, H = width / d for each d (FA-2's benchmark keeps it at 2048)")
    p.add_argument("--seq", default="1024,4096")
    p.add_argument("--d", default="64", help="head dimensions, comma-separated")
    p.add_argument("--causal", action="store_true", help="the causal mask alone (--mask causal)")
    p.add_argument("--mask", choices=["none", "causal", "both"], default=None,
                   help="none, causal, or both one after the other (default: none, or causal with --causal)")
    p.add_argument("--dtype", default="fp32", help="comma-separated: fp32, fp16, bf16")
    p.add_argument("--backends", default="",
                   help="comma-separated subset (default: all for the dtype); triton only when named")
    p.add_argument("--layout", choices=["bnhd", "bhnd"], default="bnhd",
                   help="bnhd: (B, N, H, d) tensors as transposed views, the backends' native layout (default); "
                        "bhnd: B x H x N x d contiguous")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1, help="time every problem this many times in a row, a row each")
    p.add_argument("--kernel-time", action="store_true",
                   help="also the GPU's own time of a call (torch.profiler), in the first round")
    p.add_argument("--serve", metavar="DIR", default=None,
                   help="serve rounds requested through the named pipes DIR/request and DIR/reply")
    p.add_argument("--pair-with", default="",
                   help="with --serve: time only after these variants of ours (comma-separated; default: any)")
    mode_group = p.add_mutually_exclusive_group()
    mode_group.add_argument("--backward", action="store_true",
                            help="time the backward pass alone (variants pytorch_<backend>_bwd, 2.5x the forward's FLOPs)")
    mode_group.add_argument("--fwd-bwd", action="store_true",
                            help="time forward + backward (variants pytorch_<backend>_fwdbwd, 3.5x the forward's FLOPs)")
    args = p.parse_args(argv)
    args.ds = [int(d) for d in args.d.split(",")]
    if args.width:
        if args.heads is not None:
            p.error("--heads and --width both set H: give one")
        for d in args.ds:
            if args.width % d:
                p.error(f"--width {args.width} is not a multiple of d = {d}")
    if args.causal and args.mask not in (None, "causal"):
        p.error(f"--causal and --mask {args.mask} disagree")
    if args.reps < 1 or args.rounds < 1:
        p.error("--reps and --rounds take a whole number >= 1")
    # What is timed: "fwd" (the forward, as the script always did), "bwd" or "fwdbwd".
    args.mode = "bwd" if args.backward else "fwdbwd" if args.fwd_bwd else "fwd"
    args.wanted = [b for b in args.backends.split(",") if b]
    if "triton" in args.wanted and args.mode != "fwd":
        p.error("the triton backend times the forward alone (not with --backward or --fwd-bwd)")
    if args.pair_with and not args.serve:
        p.error("--pair-with goes with --serve")
    return args


def shape_fields(text):
    """{"B": 1, "H": 16, ...} from a course shape, "B=1 H=16 N=16384 d=128 causal=0 Br=128 Bc=128"."""
    fields = dict(item.split("=", 1) for item in text.split() if "=" in item)
    return {k: int(fields[k]) for k in ("B", "H", "N", "d", "causal")}


def reference_grads(torch, F, q, k, v, dO, causal):
    """dQ, dK, dV of the first batch and head in float64 autograd, from the same rounded inputs and dO
    (float64 on CUDA leaves SDPA only its math path: matmul, softmax, matmul, all in float64)."""
    q64, k64, v64 = (t[:1, :1].detach().double().requires_grad_(True) for t in (q, k, v))
    o64 = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)
    return torch.autograd.grad(o64, (q64, k64, v64), dO[:1, :1].double())


class Env:
    """PyTorch, the timer and the settings every problem shares."""

    def __init__(self, args, torch, F, sdpa_kernel, SDPBackend):
        self.args, self.torch, self.F, self.sdpa_kernel = args, torch, F, sdpa_kernel
        self.dev = torch.device("cuda")
        self.name = torch.cuda.get_device_name(0)
        self.timer = Timer(torch)
        self.dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
        self.by_dtype = {
            "fp32": [("pytorch_math", SDPBackend.MATH), ("pytorch_efficient", SDPBackend.EFFICIENT_ATTENTION)],
            "half": [("pytorch_flash", SDPBackend.FLASH_ATTENTION), ("pytorch_cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("pytorch_efficient", SDPBackend.EFFICIENT_ATTENTION), ("pytorch_math", SDPBackend.MATH)],
        }
        self.triton = None
        if "triton" in args.wanted:
            import triton_attention  # noqa: E402 (beside this script)
            if triton_attention.triton is None:
                print("torch_attention.py: Triton is not installed; its rows are skipped")
            else:
                self.triton = triton_attention.attention

    def backends(self, dtype):
        """(variant, backend) pairs for a dtype: SDPA's, then Triton's (backend None) when asked for."""
        chosen = [b for b in self.by_dtype["fp32" if dtype == "fp32" else "half"]
                  if not self.args.wanted or b[0].replace("pytorch_", "") in self.args.wanted]
        if self.triton is not None and dtype != "fp32":
            chosen.append(("triton_fa2", None))
        return chosen

    def tensor(self, g, B, H, N, d, dtype):
        """Uniform in [-1, 2), as SDPA takes it (B × H × N × d): in the native layout a transposed view
        of (B, N, H, d) memory."""
        torch = self.torch
        if self.args.layout == "bnhd":
            t = torch.rand(B, N, H, d, device=self.dev, generator=g).mul_(3.0).sub_(1.0).to(self.dtypes[dtype])
            return t.transpose(1, 2)
        return torch.rand(B, H, N, d, device=self.dev, generator=g).mul_(3.0).sub_(1.0).to(self.dtypes[dtype])


class Problem:
    """One problem's inputs (and dO), its float64 reference, and what its first round measured."""

    def __init__(self, env, B, H, N, d, causal, dtype):
        torch, F, mode = env.torch, env.F, env.args.mode
        self.key = (B, H, N, d, causal, dtype)
        self.B, self.H, self.N, self.d, self.causal, self.dtype = B, H, N, d, causal, dtype
        self.shape = f"B={B} H={H} N={N} d={d} causal={1 if causal else 0}"
        self.flops = FLOP_FACTOR[mode] * 4.0 * B * H * N * N * d * (0.5 if causal else 1.0)
        g = torch.Generator(device=env.dev).manual_seed(N)
        self.q, self.k, self.v = (env.tensor(g, B, H, N, d, dtype) for _ in range(3))
        self.dO = None
        if mode == "fwd":
            self.ref = F.scaled_dot_product_attention(self.q[:1, :1].double(), self.k[:1, :1].double(),
                                                      self.v[:1, :1].double(), is_causal=causal)
        else:
            # dO drawn after Q, K, V from the same generator, uniform in [-1, 2) like them.
            self.dO = env.tensor(g, B, H, N, d, dtype)
            for t in (self.q, self.k, self.v):
                t.requires_grad_(True)
            self.ref = reference_grads(torch, F, self.q, self.k, self.v, self.dO, causal)
            torch.cuda.empty_cache()  # the float64 reference's N × N scores are gone before any measurement
        self.contiguous = None  # Triton's copies (B × H × N × d contiguous), made when first needed
        self.first = {}  # variant -> (peak, err) of its first round

    def triton_inputs(self):
        if self.contiguous is None:
            self.contiguous = tuple(t.contiguous() for t in (self.q, self.k, self.v))
        return self.contiguous


def measure(env, prob, variant, backend, round_no, stage):
    """One round of one backend on one problem: its row (no time if out of memory), or None when the
    backend does not take the problem."""
    torch, F, args = env.torch, env.F, env.args
    q, k, v, dO, causal = prob.q, prob.k, prob.v, prob.dO, prob.causal
    name = variant + SUFFIX[args.mode] + ("_bhnd" if args.layout == "bhnd" and backend is not None else "")
    row = dict(stage=stage, variant=name, device=env.name, dtype=prob.dtype, shape=prob.shape, size=prob.N,
               flops=f"{prob.flops:.12g}", round=round_no)
    first = name not in prob.first

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    try:
        with env.sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
            if backend is None:  # Triton, on its contiguous copies
                qc, kc, vc = prob.triton_inputs()
                fn = lambda: env.triton(qc, kc, vc, causal)  # noqa: E731
                if first:
                    o, _ = fn()  # the first call autotunes
                    prob.first[name] = (None, max_rel_err(o[:1, :1], prob.ref))
                    del o
            elif args.mode == "fwd":
                fn = forward
                if first:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    o = forward()
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() - base + q.element_size() * q.numel() * 3
                    prob.first[name] = (peak, max_rel_err(o[:1, :1], prob.ref))
                    del o
            else:
                if first:
                    # One forward + backward: the peak memory and the gradients to check.
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    grads = torch.autograd.grad(forward(), (q, k, v), dO)
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() - base + q.element_size() * q.numel() * 4  # + Q, K, V, dO
                    # fp16/bf16 gradients in units of their rms, as stage 07 measures its own (course::Scale::rms)
                    scale = "element" if q.dtype == torch.float32 else "rms"
                    errs = [max_rel_err(gr[:1, :1], r, scale) for gr, r in zip(grads, prob.ref)]
                    prob.first[name] = (peak, max(errs, key=lambda e: math.inf if math.isnan(e) else e))  # NaN stays
                    del grads
                if args.mode == "fwdbwd":
                    fn = lambda: torch.autograd.grad(forward(), (q, k, v), dO)  # noqa: E731
                else:
                    o = forward()  # once; each timed run is the backward of this graph alone
                    fn = lambda: torch.autograd.grad(o, (q, k, v), dO, retain_graph=True)  # noqa: E731
            t = env.timer.time(fn, args.reps)
            kt, why = (env.timer.kernel_time(fn, args.reps) if args.kernel_time and first else (None, ""))
            fn = o = None  # noqa: F841 (the backward's graph freed before the next backend)
    except torch.cuda.OutOfMemoryError:
        print(f"{name} {prob.dtype} {prob.shape}: out of memory")
        return row
    except RuntimeError as e:  # e.g. no kernel for this backend and shape
        print(f"{name} {prob.dtype} {prob.shape}: not run ({str(e).splitlines()[0]})")
        return None
    finally:
        torch.cuda.empty_cache()
    peak, err = prob.first[name]
    tflops = prob.flops / (t.median_ms * 1e9)
    row.update(ms=f"{t.median_ms:.6g}", ms_min=f"{t.min_ms:.6g}", ms_max=f"{t.max_ms:.6g}", tflops=f"{tflops:.6g}")
    if peak is not None:
        row.update(peak_mem_bytes=f"{peak:.12g}")
    if first:
        row.update(max_rel_err=f"{err:.3g}")
    if kt is not None:
        row.update(kernel_ms=f"{kt.median_ms:.6g}", kernels=kt.ops if kt.ops > 0 else "")
    what = "" if args.mode == "fwd" or backend is None else " (dQ, dK, dV)"
    text = f"{name} {prob.dtype} {prob.shape}"
    if args.rounds > 1 or args.serve:
        text += f" round {round_no}"
    text += f": {t.median_ms:.3f} ms ({t.min_ms:.3f}-{t.max_ms:.3f}), {tflops:.2f} TFLOP/s"
    if first:
        text += (f", peak {peak / 1e9:.2f} GB" if peak is not None else "") + f", max rel err{what} {err:.1e}"
    print(text)
    if kt is not None:
        print(f"    {kernel_text(kt, t.median_ms)}")
    elif why:
        print(f"    kernel time n/a: {why}")
    return row


def run_grid(env):
    args = env.args
    stage = args.stage or ("05_flash_v1" if args.mode == "fwd" else "07_backward")
    mask = args.mask or ("causal" if args.causal else "none")
    masks = {"none": [False], "causal": [True], "both": [False, True]}[mask]
    # One call for a whole grid (d, then the mask, then N and dtype): PyTorch starts once.
    problems = [(d, causal, int(n), t) for d in args.ds for causal in masks
                for n in args.seq.split(",") for t in args.dtype.split(",")]
    for d, causal, N, dtype in problems:
        H = args.width // d if args.width else (args.heads or 32)
        B = args.tokens // N if args.tokens else args.batch
        prob = Problem(env, B, H, N, d, causal, dtype)
        for round_no in range(1, args.rounds + 1):
            rows = [measure(env, prob, variant, backend, round_no, stage) for variant, backend in env.backends(dtype)]
            # each round's rows as soon as they exist: a later failure keeps them
            append_csv(args.csv, [r for r in rows if r is not None])
        del prob
        env.torch.cuda.empty_cache()


def serve(env):
    """Times a problem when ours asks (--between-rounds: scripts/peers/peer_turn.sh), until "quit"."""
    args = env.args
    request, reply = os.path.join(args.serve, "request"), os.path.join(args.serve, "reply")
    pair_with = [v for v in args.pair_with.split(",") if v]
    prob = None
    print(f"torch_attention.py: serving rounds through {args.serve} (mode {args.mode}, layout {args.layout})")
    while True:
        with open(request) as f:
            line = f.readline().rstrip("\n")
        if not line:
            continue  # a writer that wrote nothing
        if line == "quit":
            break
        try:
            stage, variant, dtype, shape, round_no = line.split("\t")
            if not pair_with or variant in pair_with:
                fields = shape_fields(shape)
                key = (fields["B"], fields["H"], fields["N"], fields["d"], fields["causal"] != 0, dtype)
                if prob is None or prob.key != key:
                    prob = None
                    env.torch.cuda.empty_cache()
                    prob = Problem(env, *key)
                rows = [measure(env, prob, v, backend, int(round_no), args.stage or stage)
                        for v, backend in env.backends(dtype)]
                append_csv(args.csv, [r for r in rows if r is not None])
        except Exception as e:  # say so, and answer: ours must not wait for a peer that failed
            print(f"torch_attention.py: request {line!r} failed: {type(e).__name__}: {e}")
        sys.stdout.flush()
        with open(reply, "w") as answer:
            answer.write("done\n")
    return 0


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except ImportError:
        print("torch_attention.py: PyTorch (with torch.nn.attention) is not installed; peer skipped")
        return 0
    if not torch.cuda.is_available():
        print("torch_attention.py: no CUDA device; peer skipped")
        return 0
    # Autograd's backward thread meets cuBLAS before any CUDA context of its own: PyTorch sets the primary one
    # and warns once. Harmless; kept out of the report.
    warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    env = Env(args, torch, F, sdpa_kernel, SDPBackend)
    print(f"torch_attention.py: layout {args.layout}: " +
          ("Q, K, V (and dO) allocated as (B, N, H, d), passed as .transpose(1, 2) views" if args.layout == "bnhd"
           else "Q, K, V (and dO) allocated as B x H x N x d contiguous"))
    return serve(env) if args.serve else run_grid(env) or 0


if __name__ == "__main__":
    sys.exit(main())
