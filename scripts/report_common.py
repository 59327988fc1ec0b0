"""What report.py and report_attention.py share: the CSV's rows (read, merged by problem), a
variant's series, the figures' list, saving and axes, the attention ladder's cells and values, and
the tables' formatting."""
import csv
import os
import statistics
import sys
from collections import OrderedDict

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # the summary is still written; the figures say why they are missing
    plt = None

NUMERIC = ["size", "flops", "ms", "tflops", "gbps", "io_model_bytes", "io_counted_bytes",
           "dram_read_bytes", "dram_write_bytes", "l2_read_bytes", "l2_write_bytes",
           "peak_mem_bytes", "max_rel_err",
           # added at the end of the schema; older CSVs lack them (read as None)
           "ms_min", "ms_max", "kernel_ms", "kernels"]


def read_rows(paths):
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for raw in csv.DictReader(f):
                row = dict(raw)
                for key in NUMERIC:
                    text = row.get(key, "")
                    row[key] = float(text) if text not in ("", None) else None
                rows.append(row)
    return rows


def merged(rows):
    """One record per (stage, variant, shape, dtype, GPU), with the CPU-only values of the same
    problem (the counted bytes) filled in; problems that only ran on the CPU keep a record of their
    own. (fp16 and bf16 rows of one shape are two problems; a CSV without a dtype column has "".)
    Several rows of one problem (rounds of the same run, or CSVs given together) give each column
    its median; the record keeps each column's (min, max) in "range" and the number of rows in
    "rounds", so that a table can show the spread."""
    gpu, cpu = OrderedDict(), OrderedDict()
    for r in rows:
        problem = (r["stage"], r["variant"], r["shape"], r.get("dtype") or "")
        on_cpu = r["device"] == "cpu"
        table, key = (cpu, problem) if on_cpu else (gpu, problem + (r["device"],))
        rec = table.setdefault(key, dict(stage=r["stage"], variant=r["variant"], shape=r["shape"],
                                         dtype=problem[3], device=None if on_cpu else r["device"],
                                         rounds=0, values={}))
        rec["rounds"] += 1
        for k in NUMERIC:
            if r[k] is not None:
                rec["values"].setdefault(k, []).append(r[k])
    for rec in list(gpu.values()) + list(cpu.values()):
        values = rec.pop("values")
        rec["range"] = {k: (min(v), max(v)) for k, v in values.items()}
        rec.update({k: statistics.median(v) for k, v in values.items()})
    records, covered = [], set()
    for key, rec in gpu.items():
        for k, v in cpu.get(key[:4], {}).items():
            if k in NUMERIC and rec.get(k) is None:
                rec[k] = v
        covered.add(key[:4])
        records.append(rec)
    records += [rec for key, rec in cpu.items() if key not in covered]
    devices = sorted({r["device"] for r in records if r["device"]})
    if len(devices) > 1:
        print("report.py: warning: rows from several GPUs (" + ", ".join(devices) +
              "); the figures mix them. Report one CSV per GPU.", file=sys.stderr)
    return records


def add(a, b):
    return None if a is None or b is None else a + b


def series(records, stage, variant, key):
    pts = sorted((r["size"], r.get(key)) for r in records
                 if r["stage"] == stage and r["variant"] == variant and r.get("size") is not None
                 and r.get(key) is not None)
    return [p[0] for p in pts], [p[1] for p in pts]


def device_name(records):
    names = sorted({r["device"] for r in records if r.get("device")})
    return ", ".join(names) if names else "no GPU (CPU parts only)"


def variants_of(records, spec):
    seen = OrderedDict()
    for r in records:
        if r["stage"] not in spec["stages"] or r["variant"] in spec.get("exclude", []):
            continue
        if "only" in spec and r["variant"] not in spec["only"]:
            continue
        seen[(r["stage"], r["variant"])] = True
    return list(seen)


# The figures this script draws (a stage's figures exist only when its rows do): those that it
# does not draw in a run are removed from --out, so that no figure stays beside data it was not
# drawn from.
FIGURES = [f"{family}_{kind}.png" for family in ("matmul", "softmax", "attention_row") for kind in ("io", "speed")] + [
    "io_probe.png", "attention_speed.png", "attention_io.png", "flash_v1_fig2.png", "flash_v2_ladder.png",
    "flash_v2_ladder_bf16.png", "flash_v2_vs_fa2.png", "flash_v2_io.png", "backward_ladder.png",
    "backward_ladder_bf16.png", "backward_vs_fa2.png", "backward_fig2.png", "flash_v3_ladder.png",
    "flash_v3_ladder_bf16.png", "flash_v3_vs_cudnn.png", "flash_v3_io.png", "attention_counted_io.png",
    "flash_v3_fp8.png", "flash_v3_fp8_io.png"]


def save_figure(fig, out, name, rect=None):
    """Lays the figure out (inside rect, a (left, bottom, right, top) fraction of it, when given),
    writes it to out/name and closes it."""
    assert name in FIGURES, f"{name}: add it to FIGURES"
    path = os.path.join(out, name)
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def log_axes(ax, xlabel, ylabel, title):
    """Log-log axes, x in powers of two, with a grid and a small legend."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)

def shape_fields(text):
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)
# The ladder's grid, as in FA-2's benchmarks: B·N = 16384 tokens and H·d = 2048 at every N.
LADDER_TOKENS, LADDER_WIDTH = 16384, 2048


def v2_find(recs, variant, dtype, need="tflops", **want):
    """The record of a variant in one cell (B, H, N, d, causal and dtype; the tiles aside) that has
    `need`, the fastest where several do."""
    hits = [r for r in recs if r["variant"] == variant and r["dtype"] == dtype and r.get(need) is not None
            and all(r["fields"].get(k) == str(v) for k, v in want.items())]
    return max(hits, key=lambda r: r.get("tflops") or 0, default=None)


def v2_value(recs, variant, dtype, key="tflops", **want):
    r = v2_find(recs, variant, dtype, need=key, **want)
    return None if r is None else r[key]


def ratio(a, b):
    return a / b if a is not None and b else None


def ladder_cells(recs, dtype):
    """(d, causal, N, B, H) of the ladder's grid that have a timed row in this dtype (standard attention's
    alone do not make a cell: stage 07's memory line, B = 8 and N = 2048, lies on the grid too)."""
    cells = set()
    for r in recs:
        try:
            B, H, N, d = (int(r["fields"][k]) for k in ("B", "H", "N", "d"))
        except (KeyError, ValueError):
            continue
        if r["dtype"] == dtype and r.get("tflops") is not None and B * N == LADDER_TOKENS \
                and H * d == LADDER_WIDTH and r["variant"] != "standard":
            cells.add((d, int(r["fields"].get("causal", 0)), N, B, H))
    return sorted(cells)


def cell_fields(cell):
    d, causal, N, B, H = cell
    return dict(B=B, H=H, N=N, d=d, causal=causal)
# Dense fp16/bf16 tensor-core peaks, TFLOP/s, by a piece of the GPU's name (NVIDIA's datasheets print
# twice these, "with sparsity"); the first piece found in the name wins.
DENSE_PEAK_TFLOPS = [("H100 PCIe", 756.0), ("NVL", 835.0), ("H100", 989.0), ("H200", 989.0)]


def dense_peak_tflops(device, table=None):
    """The GPU's dense fp16/bf16 peak in TFLOP/s (or the given table's, e.g. FP8's), or None for a GPU
    not in it."""
    return next((peak for piece, peak in (table or DENSE_PEAK_TFLOPS) if piece in (device or "")), None)


def tflops_text(rec):
    """A record's TFLOP/s (the median), with the min–max over its rounds where there are several."""
    if rec is None:
        return "n/a"
    low, high = rec.get("range", {}).get("tflops", (rec["tflops"], rec["tflops"]))
    return f"{rec['tflops']:.1f}" + (f" ({low:.1f}–{high:.1f})" if rec.get("rounds", 1) > 1 else "")


def percent(a, b):
    """a as a % of b, with one decimal, or n/a."""
    return fmt(None if a is None or not b else 100 * a / b, ".1f")


def md_table(title, header, rows):
    """A markdown table under a heading line, or "" without rows."""
    if not rows:
        return ""
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def fmt_bytes(b):
    if b is None:
        return "n/a"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b:.0f} B"


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)
