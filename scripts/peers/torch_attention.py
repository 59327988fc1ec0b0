#!/usr/bin/env python3
"""Peer: PyTorch's attention on the same GPU, timed the course's way, in the course's CSV.

    python3 scripts/peers/torch_attention.py --csv results.csv --batch 8 --heads 32 --seq 1024,4096 --d 64 [--causal]
    python3 scripts/peers/torch_attention.py --csv results.csv --stage 06_flash_v2 --dtype fp16,bf16 ...
    python3 scripts/peers/torch_attention.py --csv results.csv --backward --dtype fp16 ...
    python3 scripts/peers/torch_attention.py --csv results.csv --tokens 16384 --width 2048 --d 64,128 --mask both ...
    python3 scripts/peers/torch_attention.py --csv results.csv --fwd-bwd --batch 64 --heads 16 --seq 1024 --d 64 --dtype fp16

For each d, mask, N and dtype (--d takes several head dimensions, and with --width H = width / d;
--mask both runs every shape without the mask, then with it; one call starts PyTorch once): Q, K,
V of B × H × N × d, uniform in [-1, 2); torch.nn.functional.scaled_dot_product_attention with one
backend at a time:
  fp32        "math" (PyTorch's own matmul, softmax and matmul, with the scores in memory: what a
              reader would write by hand) and "efficient" (the memory-efficient kernel, the only
              fused backend that takes fp32). TF32 is off: plain fp32 on CUDA cores.
  fp16, bf16  "flash" (FlashAttention-2 itself, as PyTorch ships it), "cudnn" (NVIDIA's cuDNN
              fused attention, Hopper instructions included), "efficient" and "math".
Timing: the median of --reps runs with CUDA events, each after reading a buffer three times the
L2. The error is against float64 on the first head, on the same (rounded) inputs. A backend that
runs out of memory gets a row with no time, as the course's programs write it; one that does not
take the shape is skipped with its message. Rows: stage 05_flash_v1 (or --stage), variants
pytorch_<backend>. Exits 0 with a message when PyTorch or a GPU is missing.

--backward times the backward pass alone. Q, K, V as above (requiring gradients) and dO of the
same shape, drawn next from the same generator, uniform in [-1, 2) like Q (not small, not smooth:
a gradient that hides errors would make the check weak). Under each backend, O = SDPA(Q, K, V) is
computed once and torch.autograd.grad(O, (Q, K, V), dO, retain_graph=True) is timed: the backend's
backward kernels (D = rowsum(dO∘O) and the recomputation included where the backend does them),
not the forward. FLOPs: 2.5 × the forward's 4·B·H·N²·d (halved when causal), as the course counts
them. Variants pytorch_<backend>_bwd.
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
"""
import argparse
import math
import sys
import warnings

from peer_common import Timer, append_csv, max_rel_err


def reference_grads(torch, F, q, k, v, dO, causal):
    """dQ, dK, dV of the first batch and head in float64 autograd, from the same rounded inputs and dO
    (float64 on CUDA leaves SDPA only its math path: matmul, softmax, matmul, all in float64)."""
    q64, k64, v64 = (t[:1, :1].detach().double().requires_grad_(True) for t in (q, k, v))
    o64 = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)
    return torch.autograd.grad(o64, (q64, k64, v64), dO[:1, :1].double())


def run_backward(torch, F, timer, q, k, v, dO, ref, causal, reps, with_forward):
    """One backend's backward (with_forward: forward + backward), called inside sdpa_kernel(backend).
    Returns (median ms, peak bytes, max relative error of dQ, dK, dV). Everything it allocates is
    local, so it is freed when it returns or raises (out of memory)."""
    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    # One forward + backward: the peak memory and the gradients to check.
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    grads = torch.autograd.grad(forward(), (q, k, v), dO)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base + q.element_size() * q.numel() * 4  # + Q, K, V, dO
    # fp16/bf16 gradients in units of their rms, as stage 07 measures its own (course::Scale::rms)
    scale = "element" if q.dtype == torch.float32 else "rms"
    errs = [max_rel_err(g[:1, :1], r, scale) for g, r in zip(grads, ref)]
    err = max(errs, key=lambda e: math.inf if math.isnan(e) else e)  # a NaN stays NaN
    del grads
    if with_forward:
        ms = timer.median_ms(lambda: torch.autograd.grad(forward(), (q, k, v), dO), reps)
    else:
        o = forward()  # once; each timed run is the backward of this graph alone
        ms = timer.median_ms(lambda: torch.autograd.grad(o, (q, k, v), dO, retain_graph=True), reps)
    return ms, peak, err


def main():
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
    p.add_argument("--backends", default="", help="comma-separated subset (default: all for the dtype)")
    p.add_argument("--reps", type=int, default=20)
    mode_group = p.add_mutually_exclusive_group()
    mode_group.add_argument("--backward", action="store_true",
                            help="time the backward pass alone (variants pytorch_<backend>_bwd, 2.5x the forward's FLOPs)")
    mode_group.add_argument("--fwd-bwd", action="store_true",
                            help="time forward + backward (variants pytorch_<backend>_fwdbwd, 3.5x the forward's FLOPs)")
    args = p.parse_args()
    ds = [int(d) for d in args.d.split(",")]
    if args.width:
        if args.heads is not None:
            p.error("--heads and --width both set H: give one")
        for d in ds:
            if args.width % d:
                p.error(f"--width {args.width} is not a multiple of d = {d}")
    if args.causal and args.mask not in (None, "causal"):
        p.error(f"--causal and --mask {args.mask} disagree")
    # What is timed: "fwd" (the forward, as the script always did), "bwd" or "fwdbwd".
    mode = "bwd" if args.backward else "fwdbwd" if args.fwd_bwd else "fwd"
    flop_factor = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}[mode]
    suffix = {"fwd": "", "bwd": "_bwd", "fwdbwd": "_fwdbwd"}[mode]
    stage = args.stage or ("05_flash_v1" if mode == "fwd" else "07_backward")
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
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    timer = Timer(torch)
    torch_dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    by_dtype = {
        "fp32": [("pytorch_math", SDPBackend.MATH), ("pytorch_efficient", SDPBackend.EFFICIENT_ATTENTION)],
        "half": [("pytorch_flash", SDPBackend.FLASH_ATTENTION), ("pytorch_cudnn", SDPBackend.CUDNN_ATTENTION),
                 ("pytorch_efficient", SDPBackend.EFFICIENT_ATTENTION), ("pytorch_math", SDPBackend.MATH)],
    }
    wanted = [b for b in args.backends.split(",") if b]
    mask = args.mask or ("causal" if args.causal else "none")
    masks = {"none": [False], "causal": [True], "both": [False, True]}[mask]
    rows = []
    # One call for a whole grid (d, then the mask, then N and dtype): PyTorch starts once.
    problems = [(d, causal, int(n), t) for d in ds for causal in masks
                for n in args.seq.split(",") for t in args.dtype.split(",")]
    for d, causal, N, dtype in problems:
        H = args.width // d if args.width else (args.heads or 32)
        B = args.tokens // N if args.tokens else args.batch
        backends = [b for b in by_dtype["fp32" if dtype == "fp32" else "half"]
                    if not wanted or b[0].replace("pytorch_", "") in wanted]
        shape = f"B={B} H={H} N={N} d={d} causal={1 if causal else 0}"
        flops = flop_factor * 4.0 * B * H * N * N * d * (0.5 if causal else 1.0)
        g = torch.Generator(device=dev).manual_seed(N)
        q, k, v = (torch.rand(B, H, N, d, device=dev, generator=g).mul_(3.0).sub_(1.0).to(torch_dtypes[dtype])
                   for _ in range(3))
        if mode == "fwd":
            ref = F.scaled_dot_product_attention(q[:1, :1].double(), k[:1, :1].double(), v[:1, :1].double(),
                                                 is_causal=causal)
        else:
            # dO drawn after Q, K, V from the same generator, uniform in [-1, 2) like them.
            dO = torch.rand(B, H, N, d, device=dev, generator=g).mul_(3.0).sub_(1.0).to(torch_dtypes[dtype])
            for t in (q, k, v):
                t.requires_grad_(True)
            ref = reference_grads(torch, F, q, k, v, dO, causal)
            torch.cuda.empty_cache()  # the float64 reference's N × N scores are gone before any measurement
        for backend_variant, backend in backends:
            variant = backend_variant + suffix
            row = dict(stage=stage, variant=variant, device=name, dtype=dtype, shape=shape,
                       size=N, flops=f"{flops:.12g}")
            try:
                with sdpa_kernel(backend):
                    if mode == "fwd":
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                        base = torch.cuda.memory_allocated()
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        torch.cuda.synchronize()
                        peak = torch.cuda.max_memory_allocated() - base + q.element_size() * q.numel() * 3
                        err = max_rel_err(o[:1, :1], ref)
                        del o
                        ms = timer.median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                             args.reps)
                    else:
                        ms, peak, err = run_backward(torch, F, timer, q, k, v, dO, ref, causal, args.reps,
                                                     with_forward=(mode == "fwdbwd"))
                row.update(ms=f"{ms:.6g}", tflops=f"{flops / (ms * 1e9):.6g}", peak_mem_bytes=f"{peak:.12g}",
                           max_rel_err=f"{err:.3g}")
                what = "" if mode == "fwd" else " (dQ, dK, dV)"
                print(f"{variant} {dtype} {shape}: {ms:.3f} ms, {flops / (ms * 1e9):.2f} TFLOP/s, "
                      f"peak {peak / 1e9:.2f} GB, max rel err{what} {err:.1e}")
            except torch.cuda.OutOfMemoryError:
                print(f"{variant} {dtype} {shape}: out of memory")
            except RuntimeError as e:  # e.g. no kernel for this backend and shape
                print(f"{variant} {dtype} {shape}: not run ({str(e).splitlines()[0]})")
                continue
            torch.cuda.empty_cache()
            rows.append(row)
        append_csv(args.csv, rows)  # each problem's rows as soon as they exist: a later failure keeps them
        rows = []
        del q, k, v, ref
        if mode != "fwd":
            del dO
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
