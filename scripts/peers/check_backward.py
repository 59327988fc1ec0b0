#!/usr/bin/env python3
"""Independent check: the course's backward gradients against PyTorch autograd in float64.

    build/bin/07_backward --dump DIR ...
    python3 scripts/peers/check_backward.py DIR [--tolerance-factor F] [--peers]

What 07_backward --dump writes into DIR, and this script reads:
  meta.json                 {"B", "H", "N", "d", "causal": 0/1, "dtype": "fp32|fp16|bf16", "variants": [names]}
  Q.bin K.bin V.bin dO.bin  the inputs exactly as the GPU saw them (already rounded to the dtype)
  <v>.dQ.bin <v>.dK.bin <v>.dV.bin   for each variant v: its gradients, converted to float32
Every .bin file is raw little-endian float32, B × H × N × d, row-major.

Reference: the same rounded inputs and dO in float64 on the CPU, through the formula written out
(no fused kernel): S = Q Kᵀ / sqrt(d), with -inf above the diagonal when causal; P = softmax(S)
along the keys; O = P V; then torch.autograd.grad(O, (Q, K, V), dO). Query rows are taken in
blocks to bound the memory of the scores (each row of O depends on its own row of Q and on all of
K and V, so dQ is written block by block and dK, dV are summed over the blocks).

Error, the course's measure (peer_common.rel_errors, as common/compare.cpp measures it): for each
gradient, max over elements of |x − ref| / max(|ref|, rms(ref)), rms over the whole tensor; a NaN
or ±inf in x counts as an infinite error.

Tolerance: fp32 1e-4, fp16 1e-2, bf16 5e-2, times --tolerance-factor: fixed bounds tied to the
dtype, as docs/DESIGN.md ties the course's tolerances to it (its own figures, fp32 ≲ 1e-5 and fp16/bf16
≲ 1e-2, are for the forward).
The C++ tests hold the kernels to bounds derived per problem instead (07_backward/reference.hpp:
twice the error of the backward computed plainly in the dtype; for fp32, the sums' rounding); this
script is an independent cross-check of both the formula and the kernels with a different
implementation (PyTorch's autograd in float64), not a replacement for those tests. Fixed bounds do
not grow with N while the rounding of P and dS does: on an H100, PyTorch's own fused backward
(FlashAttention-2) reached gradient errors of 1.1e-2 (fp16) and 1.0e-1 (bf16, in dQ) at N = 2048,
d = 64, and 4.9e-2 (fp16) at N = 16384; check large problems with a --tolerance-factor that says so.

--peers (needs a CUDA GPU): the same inputs through two more backwards, measured the same way and
reported beside ours, to tell a kernel's error from the dtype's: PyTorch SDPA's flash backend
(FlashAttention-2) and the formula computed plainly in the dtype (S, P, dP and dS rounded to it),
one head at a time. For each it also prints FlashAttention's own test measure, max |x − ref| over
the tensor, and its ratio to the plain backward's (FlashAttention's tests ask for at most 2).
The reference then runs on the GPU (still float64).

Exit status: 0 when every variant is within the tolerance (or when numpy or PyTorch is missing:
the check is then skipped with a message), 1 when any variant is not, 2 when DIR lacks a file or
a file does not match meta.json.
"""
import argparse
import json
import os
import sys

from peer_common import rel_errors

TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2}
INPUTS = ["Q", "K", "V", "dO"]
GRADIENTS = ["dQ", "dK", "dV"]
SCORE_BLOCK_ELEMENTS = 1 << 24  # float64 scores per query block: 128 MB for S (autograd keeps a few such)


class DumpError(Exception):
    """DIR does not hold a complete, consistent dump."""


def read_meta(directory):
    """meta.json, checked: the shape, causal, dtype and the variant names."""
    path = os.path.join(directory, "meta.json")
    if not os.path.isfile(path):
        raise DumpError(f"{path} not found (write it with build/bin/07_backward --dump {directory})")
    try:
        with open(path) as f:
            meta = json.load(f)
        B, H, N, d = (int(meta[key]) for key in ("B", "H", "N", "d"))
        causal = bool(int(meta["causal"]))
        dtype = str(meta["dtype"])
        variants = [str(v) for v in meta["variants"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DumpError(f"{path}: not the expected meta.json ({type(e).__name__}: {e})")
    if min(B, H, N, d) <= 0:
        raise DumpError(f"{path}: B, H, N and d must be positive (B={B} H={H} N={N} d={d})")
    if dtype not in TOLERANCE:
        raise DumpError(f"{path}: dtype {dtype!r} is none of {', '.join(TOLERANCE)}")
    if not variants:
        raise DumpError(f"{path}: no variants listed")
    return dict(B=B, H=H, N=N, d=d, causal=causal, dtype=dtype, variants=variants)


def check_files(directory, meta):
    """Every file the dump should hold is there, with B·H·N·d float32 values."""
    expected = 4 * meta["B"] * meta["H"] * meta["N"] * meta["d"]
    names = [f"{t}.bin" for t in INPUTS] + [f"{v}.{g}.bin" for v in meta["variants"] for g in GRADIENTS]
    missing = [n for n in names if not os.path.isfile(os.path.join(directory, n))]
    if missing:
        raise DumpError(f"{directory} lacks {len(missing)} file(s): {', '.join(missing)}")
    for n in names:
        size = os.path.getsize(os.path.join(directory, n))
        if size != expected:
            raise DumpError(f"{os.path.join(directory, n)}: {size} bytes, expected {expected} "
                            f"(B × H × N × d float32 values for the shape in meta.json)")


def load(np, directory, name, shape):
    """One raw little-endian float32 file as a float64 array of `shape`."""
    return np.fromfile(os.path.join(directory, name), dtype="<f4").reshape(shape).astype(np.float64)


def plain_gradients(torch, Q, K, V, dO, causal, dtype):
    """dQ, dK, dV of the formula computed plainly in `dtype` on the GPU, one head at a time: the
    products accumulate in float32 inside cuBLAS but S, P, dP, dS and the results are rounded to the
    dtype, as a framework without a fused kernel would do it. Returned as float64 on the CPU."""
    B, H, N, d = Q.shape
    out = [torch.empty_like(Q) for _ in range(3)]
    mask = torch.ones(N, N, dtype=torch.bool, device="cuda").triu(1) if causal else None
    for b in range(B):
        for h in range(H):
            q, k, v, do = (t[b, h].to("cuda", dtype) for t in (Q, K, V, dO))
            q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
            S = torch.matmul(q, k.transpose(0, 1)) * (1.0 / d ** 0.5)
            if causal:
                S = S.masked_fill(mask, float("-inf"))
            O = torch.matmul(torch.softmax(S, dim=-1), v)
            for o, g in zip(out, torch.autograd.grad(O, (q, k, v), do)):
                o[b, h] = g.double().cpu()
    return out


def flash_gradients(torch, Q, K, V, dO, causal, dtype):
    """dQ, dK, dV from PyTorch SDPA's flash backend (FlashAttention-2) in `dtype` on the GPU."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v, do = (t.to("cuda", dtype) for t in (Q, K, V, dO))
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        O = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return [g.double().cpu() for g in torch.autograd.grad(O, (q, k, v), do)]


def reference_gradients(torch, Q, K, V, dO, causal):
    """dQ, dK, dV of O = softmax(Q Kᵀ / sqrt(d), causal mask) V by float64 autograd on the CPU.

    Q, K, V, dO: float64 tensors B × H × N × d. Query rows go in blocks of `rows`: S for a block is
    B × H × rows × N; dQ of the block is its own, dK and dV are sums over all blocks."""
    B, H, N, d = Q.shape
    scale = 1.0 / d ** 0.5
    dQ, dK, dV = torch.empty_like(Q), torch.zeros_like(K), torch.zeros_like(V)
    device = Q.device
    K = K.clone().requires_grad_(True)  # leaves shared by every block's graph
    V = V.clone().requires_grad_(True)
    rows = max(1, min(N, SCORE_BLOCK_ELEMENTS // (B * H * N)))
    keys = torch.arange(N, device=device)
    for r0 in range(0, N, rows):
        r1 = min(N, r0 + rows)
        q = Q[:, :, r0:r1].clone().requires_grad_(True)
        S = torch.matmul(q, K.transpose(-1, -2)) * scale                       # B × H × rows × N
        if causal:  # query i sees keys j ≤ i (top-left aligned, the diagonal always kept)
            above = keys.unsqueeze(0) > torch.arange(r0, r1, device=device).unsqueeze(1)  # rows × N
            S = S.masked_fill(above, float("-inf"))
        P = torch.softmax(S, dim=-1)
        O = torch.matmul(P, V)                                                  # B × H × rows × d
        gq, gk, gv = torch.autograd.grad(O, (q, K, V), dO[:, :, r0:r1])
        dQ[:, :, r0:r1] = gq
        dK += gk
        dV += gv
    return dQ, dK, dV


def max_rel_err(np, x, ref):
    """The course's error (peer_common.rel_errors, as common/compare.cpp measures it), and the flat
    index of the worst element."""
    err = rel_errors(x, ref)
    worst = int(np.argmax(err))
    return float(err.flat[worst]), worst


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DIR", help="the directory written by build/bin/07_backward --dump DIR")
    p.add_argument("--tolerance-factor", type=float, default=1.0,
                   help="multiplies the dtype's tolerance (fp32 1e-4, fp16 1e-2, bf16 5e-2); default 1")
    p.add_argument("--peers", action="store_true",
                   help="also measure PyTorch's flash backward and the plain backward in the dtype on the "
                        "same inputs (needs a CUDA GPU; fp16/bf16 dumps)")
    args = p.parse_args()
    if not args.tolerance_factor > 0:
        p.error("--tolerance-factor must be positive")

    # The dump first (no numpy needed): a missing or inconsistent file is an error on any machine.
    if not os.path.isdir(args.dir):
        print(f"check_backward.py: {args.dir} is not a directory (write it with build/bin/07_backward --dump DIR)")
        return 2
    try:
        meta = read_meta(args.dir)
        check_files(args.dir, meta)
    except DumpError as e:
        print(f"check_backward.py: {e}")
        return 2

    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"check_backward.py: {e.name or 'numpy or PyTorch'} is not installed; check skipped")
        return 0

    B, H, N, d, causal, dtype = (meta[k] for k in ("B", "H", "N", "d", "causal", "dtype"))
    shape = (B, H, N, d)
    tolerance = TOLERANCE[dtype] * args.tolerance_factor
    print(f"{args.dir}: B={B} H={H} N={N} d={d} causal={int(causal)} {dtype}, {len(meta['variants'])} variant(s); "
          f"reference: float64 autograd on the CPU; tolerance {tolerance:.1e}")

    inputs = {t: load(np, args.dir, f"{t}.bin", shape) for t in INPUTS}
    bad = [t for t, a in inputs.items() if not np.isfinite(a).all()]
    if bad:
        print(f"check_backward.py: {', '.join(bad)} hold NaN or ±inf; this check is for finite inputs")
        return 2
    # The inputs should be values of the dtype already (the dump is what the GPU saw): say so if not.
    if dtype != "fp32":
        torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        for t, a in inputs.items():
            a32 = torch.from_numpy(a.astype(np.float32))
            if not torch.equal(a32.to(torch_dtype).to(torch.float32), a32):
                print(f"note: {t}.bin holds values that are not {dtype} values; checked as they are")

    Q, K, V, dO = (torch.from_numpy(inputs[t]) for t in INPUTS)
    if args.peers and (dtype == "fp32" or not torch.cuda.is_available()):
        print("check_backward.py: --peers needs a CUDA GPU and an fp16 or bf16 dump")
        return 2
    on = "cuda" if args.peers else "cpu"
    ref = dict(zip(GRADIENTS, (g.cpu().numpy() for g in reference_gradients(
        torch, *(t.to(on) for t in (Q, K, V, dO)), causal))))

    failed = []
    for v in meta["variants"]:
        ok = True
        for g in GRADIENTS:
            x = load(np, args.dir, f"{v}.{g}.bin", shape)
            err, worst = max_rel_err(np, x, ref[g])
            within = err <= tolerance
            ok = ok and within
            line = f"{v:>24} {g}: max rel err {err:.2e} {'<=' if within else '>'} {tolerance:.1e}  " \
                   f"{'ok' if within else 'FAIL'}"
            if not within:  # where, and what the values are
                idx = np.unravel_index(worst, shape)
                line += (f"  (worst at b={idx[0]} h={idx[1]} row={idx[2]} col={idx[3]}: "
                         f"{x[idx]:.6g}, reference {ref[g][idx]:.6g})")
            print(line)
        if not ok:
            failed.append(v)

    if args.peers:  # the yardsticks on the same inputs: FlashAttention-2 and the plain backward
        torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        peers = {"pytorch_flash": flash_gradients(torch, Q, K, V, dO, causal, torch_dtype),
                 f"plain_{dtype}": plain_gradients(torch, Q, K, V, dO, causal, torch_dtype)}
        ours = {v: {g: load(np, args.dir, f"{v}.{g}.bin", shape) for g in GRADIENTS} for v in meta["variants"]}
        plain_abs = {g: float(np.abs(peers[f"plain_{dtype}"][i].numpy() - ref[g]).max())
                     for i, g in enumerate(GRADIENTS)}
        print("same inputs, every backward: the course's error | max |x - ref| (FlashAttention's test "
              "measure) and its ratio to the plain backward's")
        rows = {**{k: {g: x[i].numpy() for i, g in enumerate(GRADIENTS)} for k, x in peers.items()}, **ours}
        for name, grads in rows.items():
            cells = []
            for g in GRADIENTS:
                err, _ = max_rel_err(np, grads[g], ref[g])
                abs_err = float(np.abs(grads[g] - ref[g]).max())
                cells.append(f"{g} {err:.2e} | {abs_err:.2e} ({abs_err / plain_abs[g]:.2f}x)")
            print(f"{name:>24} " + "   ".join(cells))

    n = len(meta["variants"])
    if failed:
        print(f"{len(failed)} of {n} variants disagree with PyTorch autograd (float64): {', '.join(failed)}")
        return 1
    print(f"all {n} variants agree with PyTorch autograd (float64)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
