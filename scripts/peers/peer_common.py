"""What the peer scripts share: the course's CSV columns, and timing the course's way.

Timing: the median of `reps` runs with CUDA events, after `warmup` untimed runs, each run after
reading a buffer three times the L2 (as the course's timer does: a read leaves no dirty lines).
"""
import csv
import os
import statistics

COLUMNS = ["stage", "variant", "device", "dtype", "shape", "size", "flops", "ms", "tflops", "gbps",
           "io_model_bytes", "io_counted_bytes", "dram_read_bytes", "dram_write_bytes",
           "l2_read_bytes", "l2_write_bytes", "peak_mem_bytes", "max_rel_err"]


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
