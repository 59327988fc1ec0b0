#!/usr/bin/env python3
"""Peer: PyTorch's attention on the same GPU, timed the course's way, in the course's CSV.

    python3 scripts/peers/torch_attention.py --csv results.csv --batch 8 --heads 32 --seq 1024,4096 --d 64 [--causal]
    python3 scripts/peers/torch_attention.py --csv results.csv --stage 06_flash_v2 --dtype fp16,bf16 ...

For each N and dtype: Q, K, V of B × H × N × d, uniform in [-1, 2); torch.nn.functional.
scaled_dot_product_attention with one backend at a time:
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
"""
import argparse
import sys

from peer_common import Timer, append_csv


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", required=True)
    p.add_argument("--stage", default="05_flash_v1")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=0, help="B*N: when given, B = tokens / N for each N")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--seq", default="1024,4096")
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", default="fp32", help="comma-separated: fp32, fp16, bf16")
    p.add_argument("--backends", default="", help="comma-separated subset (default: all for the dtype)")
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
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
    H, d = args.heads, args.d
    rows = []
    for N, dtype in [(int(n), t) for n in args.seq.split(",") for t in args.dtype.split(",")]:
        B = args.tokens // N if args.tokens else args.batch
        backends = [b for b in by_dtype["fp32" if dtype == "fp32" else "half"]
                    if not wanted or b[0].replace("pytorch_", "") in wanted]
        shape = f"B={B} H={H} N={N} d={d} causal={1 if args.causal else 0}"
        flops = 4.0 * B * H * N * N * d * (0.5 if args.causal else 1.0)
        g = torch.Generator(device=dev).manual_seed(N)
        q, k, v = (torch.rand(B, H, N, d, device=dev, generator=g).mul_(3.0).sub_(1.0).to(torch_dtypes[dtype])
                   for _ in range(3))
        ref = F.scaled_dot_product_attention(q[:1, :1].double(), k[:1, :1].double(), v[:1, :1].double(),
                                             is_causal=args.causal)
        for variant, backend in backends:
            row = dict(stage=args.stage, variant=variant, device=name, dtype=dtype, shape=shape,
                       size=N, flops=f"{flops:.12g}")
            try:
                with sdpa_kernel(backend):
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() - base + q.element_size() * q.numel() * 3
                    scale = torch.maximum(ref.abs(), ref.pow(2).mean().sqrt())
                    err = ((o[:1, :1].double() - ref).abs() / scale).max().item()
                    del o
                    ms = timer.median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal),
                                         args.reps)
                row.update(ms=f"{ms:.6g}", tflops=f"{flops / (ms * 1e9):.6g}", peak_mem_bytes=f"{peak:.12g}",
                           max_rel_err=f"{err:.3g}")
                print(f"{variant} {dtype} {shape}: {ms:.3f} ms, {flops / (ms * 1e9):.2f} TFLOP/s, "
                      f"peak {peak / 1e9:.2f} GB, max rel err {err:.1e}")
            except torch.cuda.OutOfMemoryError:
                print(f"{variant} {dtype} {shape}: out of memory")
            except RuntimeError as e:  # e.g. no kernel for this backend and shape
                print(f"{variant} {dtype} {shape}: not run ({str(e).splitlines()[0]})")
                continue
            torch.cuda.empty_cache()
            rows.append(row)
        del q, k, v, ref
        torch.cuda.empty_cache()
    append_csv(args.csv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
