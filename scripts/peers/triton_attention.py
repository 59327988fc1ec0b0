#!/usr/bin/env python3
"""Peer: FlashAttention-2's forward written in Triton by us, timed the course's way, in the course's CSV.

    python3 scripts/peers/triton_attention.py --csv results.csv --batch 4 --heads 48 --seq 1024,4096 --d 64 --causal --dtype fp16

The well-known Triton formulation of FA-2 (the shape of Triton's fused-attention tutorial, written
here from the algorithm): one program per (query block of BLOCK_M rows, head); Q_i stays in
registers; K_j, V_j stream past it; max, sum and O kept in fp32; exp2 with scale·log₂e folded in;
O divided by l once at the end; L = scale·m + log l (natural log, m the max of the raw scores)
written for a backward pass. Causal: the key blocks strictly below the diagonal run without the mask, the
diagonal blocks are handled apart, with it. Triton picks the instruction mix (mma, ldmatrix,
cp.async pipelining over num_stages) itself: this peer shows what a compiler gets from the same
algorithm. Block sizes: a few configurations, the fastest per shape chosen by triton.autotune
(its timing runs are not the course's; the reported time is, measured after the choice).

Layout: the kernel takes Q, K, V, O as B × H × N × d contiguous (its pointer arithmetic: a head's
rows N × d apart, its values one after the other), so that is what it gets; SDPA's backends take
(B, N, H, d) views instead (torch_attention.py --layout), each its own native layout.

Rows: stage 06_flash_v2 (or --stage), variant triton_fa2, with the error of O against float64 on
the first head (ms: the median; ms_min, ms_max: the fastest and slowest run). --kernel-time also
times the kernel alone under torch.profiler (peer_common.Timer.kernel_time). torch_attention.py
--backends triton runs the same kernel beside SDPA's backends (and in rounds that alternate with
ours: --serve). Exits 0 with a message when PyTorch, Triton or a GPU is missing.
"""
import argparse
import math
import sys

from peer_common import Timer, append_csv, kernel_text, max_rel_err

try:
    import torch
    import triton
    import triton.language as tl
except ImportError:  # reported in main()
    triton = None

if triton is not None:
    CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st)
               for bm, bn, w, st in [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 4),
                                     (128, 32, 4, 4)]]

    @triton.jit
    def _block(acc, l_i, m_i, q, K, V, offs_m, start_n, N, c,
               D: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr):
        """One key block: S = Q·Kᵀ, the online softmax update, acc += P̃·V."""
        offs_n = start_n + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, D)
        k = tl.load(K + offs_n[None, :] * D + offs_d[:, None], mask=offs_n[None, :] < N, other=0.0)  # D × BLOCK_N
        s = tl.dot(q, k)
        if MASK:  # the causal diagonal (and keys past N)
            keep = (offs_m[:, None] >= offs_n[None, :]) & (offs_n[None, :] < N)
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1) * c)
        p = tl.math.exp2(s * c - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < N, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        return acc, l_i, m_new

    @triton.autotune(configs=CONFIGS, key=["N", "D", "CAUSAL"])
    @triton.jit
    def fa2_forward(Q, K, V, O, L, N, c, D: tl.constexpr, CAUSAL: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        start_m = tl.program_id(0)
        head = tl.program_id(1).to(tl.int64) * N * D
        Q, K, V, O = Q + head, K + head, V + head, O + head
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, D)
        q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < N, other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        if CAUSAL:
            # Below the diagonal: no mask. BLOCK_M is a multiple of BLOCK_N, so the diagonal blocks
            # are exactly those from start_m·BLOCK_M on.
            for start_n in range(0, start_m * BLOCK_M, BLOCK_N):
                acc, l_i, m_i = _block(acc, l_i, m_i, q, K, V, offs_m, start_n, N, c, D, BLOCK_N, False)
            for start_n in range(start_m * BLOCK_M, tl.minimum((start_m + 1) * BLOCK_M, N), BLOCK_N):
                acc, l_i, m_i = _block(acc, l_i, m_i, q, K, V, offs_m, start_n, N, c, D, BLOCK_N, True)
        else:
            full = (N // BLOCK_N) * BLOCK_N
            for start_n in range(0, full, BLOCK_N):
                acc, l_i, m_i = _block(acc, l_i, m_i, q, K, V, offs_m, start_n, N, c, D, BLOCK_N, False)
            for start_n in range(full, N, BLOCK_N):  # the tail past N, if any
                acc, l_i, m_i = _block(acc, l_i, m_i, q, K, V, offs_m, start_n, N, c, D, BLOCK_N, True)
        acc = acc / l_i[:, None]
        tl.store(L + tl.program_id(1).to(tl.int64) * N + offs_m, (m_i + tl.math.log2(l_i)) * 0.6931471805599453,
                 mask=offs_m < N)
        tl.store(O + offs_m[:, None] * D + offs_d[None, :], acc.to(O.dtype.element_ty), mask=offs_m[:, None] < N)


def attention(q, k, v, causal):
    B, H, N, D = q.shape
    o = torch.empty_like(q)
    L = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    c = 1.0 / math.sqrt(D) * 1.4426950408889634
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
    fa2_forward[grid](q, k, v, o, L, N, c, D=D, CAUSAL=causal)
    return o, L


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", required=True)
    p.add_argument("--stage", default="06_flash_v2")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--tokens", type=int, default=0, help="B*N: when given, B = tokens / N for each N")
    p.add_argument("--heads", type=int, default=48)
    p.add_argument("--seq", default="1024,4096")
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", default="fp16", help="comma-separated: fp16, bf16")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--kernel-time", action="store_true", help="also the GPU's own time of a call (torch.profiler)")
    args = p.parse_args()
    if triton is None:
        print("triton_attention.py: PyTorch or Triton is not installed; peer skipped")
        return 0
    if not torch.cuda.is_available():
        print("triton_attention.py: no CUDA device; peer skipped")
        return 0
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    timer = Timer(torch)
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    H, d = args.heads, args.d
    rows = []
    for N, dtype in [(int(n), t) for n in args.seq.split(",") for t in args.dtype.split(",")]:
        B = args.tokens // N if args.tokens else args.batch
        shape = f"B={B} H={H} N={N} d={d} causal={1 if args.causal else 0}"
        flops = 4.0 * B * H * N * N * d * (0.5 if args.causal else 1.0)
        g = torch.Generator(device=dev).manual_seed(N)
        q, k, v = (torch.rand(B, H, N, d, device=dev, generator=g).mul_(3.0).sub_(1.0).to(dtypes[dtype])
                   for _ in range(3))
        o, L = attention(q, k, v, args.causal)  # the first call autotunes
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[:1, :1].double(), k[:1, :1].double(), v[:1, :1].double(), is_causal=args.causal)
        err = max_rel_err(o[:1, :1], ref)
        t = timer.time(lambda: attention(q, k, v, args.causal), args.reps)
        ms = t.median_ms
        best = fa2_forward.best_config
        row = dict(stage=args.stage, variant="triton_fa2", device=name, dtype=dtype, shape=shape, size=N,
                   flops=f"{flops:.12g}", ms=f"{ms:.6g}", tflops=f"{flops / (ms * 1e9):.6g}",
                   max_rel_err=f"{err:.3g}", ms_min=f"{t.min_ms:.6g}", ms_max=f"{t.max_ms:.6g}", round=1)
        print(f"triton_fa2 {dtype} {shape}: {ms:.3f} ms, {flops / (ms * 1e9):.2f} TFLOP/s, "
              f"max rel err {err:.1e} ({best})")
        if args.kernel_time:
            kt, why = timer.kernel_time(lambda: attention(q, k, v, args.causal), args.reps)
            if kt is not None:
                row.update(kernel_ms=f"{kt.median_ms:.6g}", kernels=kt.ops if kt.ops > 0 else "")
            print(f"    {kernel_text(kt, ms)}" if kt is not None else f"    kernel time n/a: {why}")
        rows.append(row)
        del q, k, v, o, L
        torch.cuda.empty_cache()
    append_csv(args.csv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
