#!/usr/bin/env python3
"""Stage 12's peers: PyTorch's scaled_dot_product_attention for one decode step (one query row a
sequence, grouped-query attention through enable_gqa), each backend that takes the problem, in
two layouts of the cache: contiguous (B, H_kv, N, d) and the (B, N, H_kv, d) view of a server's
cache. SDPA takes no block table, so its cache is dense, all B sequences `context` tokens long;
its GB/s is its own cache's bytes (and Q, O) over the time, the measure stage 12's rows give for
theirs. Timed as the course times (L2 flushed before each call, CUDA events, median of --reps);
O checked against float64 on sequence 0. Rows go to --csv in the course's schema."""
import argparse
import math
import sys

from peer_common import Timer, append_csv, max_rel_err


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", required=True)
    p.add_argument("--batch", default="1")
    p.add_argument("--context", default="8192")
    p.add_argument("--heads-q", default="32")
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not torch.cuda.is_available():
        raise SystemExit("torch_decode.py: no CUDA device")
    dt = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    timer = Timer(torch)
    device = torch.cuda.get_device_name(0)
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    rows = []
    for B in map(int, a.batch.split(",")):
        for N in map(int, a.context.split(",")):
            g = torch.Generator(device="cuda").manual_seed(12)
            k_bnhd = (torch.rand(B, N, a.heads_kv, a.d, device="cuda", generator=g) * 3 - 1).to(dt)
            v_bnhd = (torch.rand(B, N, a.heads_kv, a.d, device="cuda", generator=g) * 3 - 1).to(dt)
            layouts = {"bnhd": (k_bnhd.transpose(1, 2), v_bnhd.transpose(1, 2)),
                       "bhnd": (k_bnhd.transpose(1, 2).contiguous(), v_bnhd.transpose(1, 2).contiguous())}
            for Hq in map(int, a.heads_q.split(",")):
                q = (torch.rand(B, Hq, 1, a.d, device="cuda", generator=g) * 3 - 1).to(dt)
                G = Hq // a.heads_kv
                k0 = k_bnhd[0].transpose(0, 1).double().repeat_interleave(G, 0)  # Hq, N, d
                v0 = v_bnhd[0].transpose(0, 1).double().repeat_interleave(G, 0)
                s0 = (q[0].double() @ k0.transpose(1, 2)) / math.sqrt(a.d)
                ref = (torch.softmax(s0, -1) @ v0)  # Hq, 1, d
                nbytes = 2 * B * N * a.heads_kv * a.d * 2 + 2 * B * Hq * a.d * 2
                for layout, (k, v) in layouts.items():
                    for name, be in backends.items():
                        if name == "math" and B * Hq * N > (1 << 26):
                            continue  # its score matrix alone is larger than the cache
                        run = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                        try:
                            with sdpa_kernel(be):
                                out = run()
                                torch.cuda.synchronize()
                                err = max_rel_err(out[0].double().cpu().numpy(), ref.cpu().numpy())
                                t = timer.time(run, a.reps)
                        except RuntimeError as e:
                            print(f"sdpa_{name} {layout} B={B} N={N} Hq={Hq}: not run ({str(e).splitlines()[0][:120]})",
                                  file=sys.stderr)
                            continue
                        shape = f"B={B} Hq={Hq} Hkv={a.heads_kv} d={a.d} rows=1 len={N} dense"
                        rows.append({"stage": "12_inference", "variant": f"sdpa_{name}_{layout}", "device": device,
                                     "dtype": a.dtype, "shape": shape, "size": N, "flops": 4.0 * Hq * B * N * a.d,
                                     "ms": t.median_ms, "tflops": 4.0 * Hq * B * N * a.d / t.median_ms / 1e9,
                                     "gbps": nbytes / t.median_ms / 1e6, "io_model_bytes": nbytes,
                                     "max_rel_err": err, "ms_min": t.min_ms, "ms_max": t.max_ms, "round": 1})
                        print(f"sdpa_{name:9} {layout} {shape:50} {t.median_ms:8.4f} ms {nbytes / t.median_ms / 1e6:7.0f} GB/s err {err:.1e}")
    append_csv(a.csv, [{c: r.get(c, "") for c in __import__("peer_common").COLUMNS} for r in rows])


if __name__ == "__main__":
    main()
