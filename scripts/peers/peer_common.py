"""What the peer scripts share: the course's CSV columns, its error measure, and timing its way.

Timing: the median of `reps` runs with CUDA events, after `warmup` untimed runs, each run after
reading a buffer three times the L2 (as the course's timer does: a read leaves no dirty lines).

Error: max_rel_err below, the one definition of the CSV's max_rel_err for the peers' rows, the same
as common/compare.cpp's for ours (README, "What a stage reports").
"""
import csv
import math
import os
import statistics

COLUMNS = ["stage", "variant", "device", "dtype", "shape", "size", "flops", "ms", "tflops", "gbps",
           "io_model_bytes", "io_counted_bytes", "dram_read_bytes", "dram_write_bytes",
           "l2_read_bytes", "l2_write_bytes", "peak_mem_bytes", "max_rel_err"]


def rel_errors(x, ref, scale="element"):
    """Each element's error of x against its float64 reference ref, as common/compare.cpp measures
    it: |x − ref| / max(|ref|, rms(ref)), rms over the finite elements of ref, and |x − ref| itself
    where that scale is 0; with scale="rms" (course::Scale::rms, stage 07's fp16/bf16 gradients,
    FlashAttention's own measure) |x − ref| / rms(ref). Where ref is finite, a NaN or ±inf in x is an
    infinite error (NaN never passes); a NaN in ref wants a NaN, an inf in ref the same inf (else
    the error is infinite). x and ref: torch tensors (on any device) or numpy arrays of one shape;
    x is taken in float64."""
    assert scale in ("element", "rms"), scale
    if type(ref).__module__.startswith("torch"):
        import torch as xp
        x, ref = x.double(), ref.double()
    else:
        import numpy as xp
        x, ref = xp.asarray(x, dtype=xp.float64), xp.asarray(ref, dtype=xp.float64)
    zero, one = xp.zeros_like(ref), xp.ones_like(ref)
    finite = xp.isfinite(ref)
    clean = xp.where(finite, ref, zero)
    rms = ((clean * clean).sum() / max(int(finite.sum()), 1)) ** 0.5
    by = xp.maximum(abs(clean), rms) if scale == "element" else rms * one
    err = abs(xp.where(xp.isfinite(x), x, zero) - clean) / xp.where(by > 0, by, one)
    inf = xp.full_like(ref, math.inf)
    err = xp.where(xp.isfinite(x), err, inf)
    err = xp.where(xp.isnan(ref), xp.where(xp.isnan(x), zero, inf), err)
    return xp.where(xp.isinf(ref), xp.where(x == ref, zero, inf), err)


def max_rel_err(x, ref, scale="element"):
    """The course's max_rel_err of x against ref: the largest of rel_errors(x, ref, scale), a float."""
    return float(rel_errors(x, ref, scale).max())


class Timer:
    def __init__(self, torch):
        self.torch = torch
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush = torch.zeros(max(3 * l2, 64 << 20) // 4, dtype=torch.float32, device="cuda")
        self.start = torch.cuda.Event(enable_timing=True)
        self.stop = torch.cuda.Event(enable_timing=True)

    def median_ms(self, fn, reps, warmup=3):
        times = []
        for i in range(warmup + reps):
            self.flush.sum()
            self.start.record()
            fn()
            self.stop.record()
            self.torch.cuda.synchronize()
            if i >= warmup:
                times.append(self.start.elapsed_time(self.stop))
        return statistics.median(times)


def append_csv(path, rows):
    """Appends rows (dicts keyed by COLUMNS), with the header first if the file is new or empty."""
    new_file = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if new_file:
            w.writeheader()
        for r in rows:
            w.writerow(r)
