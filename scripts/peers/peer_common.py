"""What the peer scripts share: the course's CSV columns, its error measure, and timing its way.

Timing: the median of `reps` runs with CUDA events, after `warmup` untimed runs, each run after
reading a buffer three times the L2 (as the course's timer does: a read leaves no dirty lines).

Kernel time (Timer.kernel_time): the same calls with torch.profiler on (CUPTI's activity records,
as common/kernel_time.cpp reads them for ours): the GPU's own start and end of every kernel, memset
and copy of a call, summed, the L2 flush before it not counted; the median over the calls, and how
many pieces of GPU work a call runs. Where it agrees with the event time, no host work (PyTorch's
dispatch) is in the event time; the count shows what a call runs (one kernel, or a layout copy too).

Error: max_rel_err below, the one definition of the CSV's max_rel_err for the peers' rows, the same
as common/compare.cpp's for ours (README, "What a stage reports").
"""
import collections
import csv
import json
import math
import os
import statistics
import tempfile

# common/report.cpp's columns, in its order (the last five added at the end of the schema).
COLUMNS = ["stage", "variant", "device", "dtype", "shape", "size", "flops", "ms", "tflops", "gbps",
           "io_model_bytes", "io_counted_bytes", "dram_read_bytes", "dram_write_bytes",
           "l2_read_bytes", "l2_write_bytes", "peak_mem_bytes", "max_rel_err",
           "ms_min", "ms_max", "kernel_ms", "kernels", "round"]


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


Timing = collections.namedtuple("Timing", "median_ms min_ms max_ms")
KernelTime = collections.namedtuple("KernelTime", "median_ms min_ms max_ms calls ops names")


class GpuOp:
    """One piece of GPU work from a trace: its name, start and end (ns), whether it is the flush's."""

    def __init__(self, name, start_ns, end_ns, flush=False):
        self.name, self.start_ns, self.end_ns, self.flush = name, start_ns, end_ns, flush

    def __repr__(self):
        return f"GpuOp({self.name!r}, {self.start_ns}, {self.end_ns}, flush={self.flush})"


# Chrome-trace categories of GPU work (Kineto's, and older PyTorch's capitalised ones).
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}


def gpu_ops_of_trace(trace):
    """The GPU work in a Chrome trace (torch.profiler's export_chrome_trace), sorted by start."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    ops = [GpuOp(e.get("name", "?"), float(e["ts"]) * 1e3, (float(e["ts"]) + float(e.get("dur", 0))) * 1e3)
           for e in events
           if e.get("ph") == "X" and str(e.get("cat", "")).lower() in GPU_CATEGORIES and "ts" in e]
    return sorted(ops, key=lambda o: o.start_ns)


def mark_flush(ops, flush_names):
    """Marks the flush's pieces: each run of consecutive pieces named as the flush alone ran them."""
    n, i = len(flush_names), 0
    while n and i < len(ops):
        if [o.name for o in ops[i:i + n]] == flush_names:
            for o in ops[i:i + n]:
                o.flush = True
            i += n
        else:
            i += 1
    return ops


def split_calls(ops):
    """As common/kernel_time.cpp's split_calls: each run of flush pieces opens a call, which holds
    every piece up to the next flush; pieces before the first flush belong to no call."""
    calls, previous_flush = [], False
    for op in sorted(ops, key=lambda o: o.start_ns):
        if op.flush:
            if not previous_flush:
                calls.append([])
        elif calls:
            calls[-1].append(op)
        previous_flush = op.flush
    return calls


def kernel_time_of(calls, expected):
    """(KernelTime, "") for `calls` (split_calls), or (None, why) when they are not `expected` calls."""
    if len(calls) != expected or not calls:
        return None, f"found {len(calls)} calls between the L2 flushes, expected {expected}"
    ms = sorted(sum(o.end_ns - o.start_ns for o in call) * 1e-6 for call in calls)
    ops = len(calls[0]) if all(len(c) == len(calls[0]) for c in calls) else -1
    if ops == 0:
        return None, "no GPU work recorded between the L2 flushes"
    return KernelTime(statistics.median(ms), ms[0], ms[-1], len(ms), ops,
                      [short_kernel_name(o.name) for o in calls[0]]), ""


def short_kernel_name(name):
    """As common/kernel_time.cpp's: "void ns::flash_fwd_kernel<Traits>(Params)" -> "flash_fwd_kernel",
    "Memset (Device)" -> "Memset"."""
    s = (name[5:] if name.startswith("void ") else name).replace("(anonymous namespace)::", "")
    cut = min([i for i in (s.find("("), s.find("<")) if i >= 0], default=len(s))
    s = s[:cut].strip()
    s = s[s.rfind("::") + 2:] if "::" in s else s
    return s or name


class Timer:
    def __init__(self, torch):
        self.torch = torch
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush = torch.zeros(max(3 * l2, 64 << 20) // 4, dtype=torch.float32, device="cuda")
        self.start = torch.cuda.Event(enable_timing=True)
        self.stop = torch.cuda.Event(enable_timing=True)

    def time(self, fn, reps, warmup=3):
        """Timing(median, min, max) in ms of `reps` event-timed calls of fn."""
        times = []
        for i in range(warmup + reps):
            self.flush.sum()
            self.start.record()
            fn()
            self.stop.record()
            self.torch.cuda.synchronize()
            if i >= warmup:
                times.append(self.start.elapsed_time(self.stop))
        return Timing(statistics.median(times), min(times), max(times))

    def median_ms(self, fn, reps, warmup=3):
        return self.time(fn, reps, warmup).median_ms

    def _record(self, run):
        """The GPU work of run() under torch.profiler, from its Chrome trace."""
        from torch.profiler import ProfilerActivity, profile
        self.torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            self.torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                return gpu_ops_of_trace(json.load(f))

    def kernel_time(self, fn, reps, warmup=3):
        """(KernelTime, "") of fn, as the event timing runs it (flush, call, wait), or (None, why)."""
        try:
            if not getattr(self, "flush_names", None):  # what the flush alone runs, once
                self.flush.sum()
                self.flush_names = [o.name for o in self._record(lambda: self.flush.sum())]
            flush_names = self.flush_names
            if not flush_names:
                return None, "torch.profiler recorded no GPU work for the L2 flush"
            for _ in range(warmup):
                self.flush.sum()
                fn()

            def calls():
                for _ in range(reps):
                    self.flush.sum()
                    fn()
                    self.torch.cuda.synchronize()
            ops = mark_flush(self._record(calls), flush_names)
        except Exception as e:  # the profiler missing or failing: say why, keep the event time
            if isinstance(e, self.torch.cuda.OutOfMemoryError):
                raise
            return None, f"torch.profiler: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return kernel_time_of(split_calls(ops), reps)


def kernel_text(kt, event_ms):
    """A log line's account of a kernel time against the event time of the same round."""
    what = "a varying number of" if kt.ops < 0 else str(kt.ops)
    piece = "piece" if kt.ops == 1 else "pieces"
    return (f"kernels {kt.median_ms:.4g} ms ({100.0 * (kt.median_ms / event_ms - 1.0):+.1f}% of the events' "
            f"{event_ms:.4g}), {what} {piece} of GPU work a call: {', '.join(kt.names)}")


def append_csv(path, rows):
    """Appends rows (dicts keyed by COLUMNS), with the header first if the file is new or empty. An
    existing file with another header (another version of the schema) is refused, as
    common/report.cpp refuses it: SystemExit with a message."""
    new_file = not os.path.exists(path) or os.path.getsize(path) == 0
    if not new_file:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        if header != COLUMNS:
            raise SystemExit(f"{path} has another header (an older schema?); write to a new file")
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")  # as common/report.cpp ends lines
        if new_file:
            w.writeheader()
        for r in rows:
            w.writerow(r)
