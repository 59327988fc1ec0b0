"""The attention stages' part of the report (stages 05-09): their figures and summary tables
(report.py calls them; the shared pieces are report_common.py's)."""
import math
from collections import OrderedDict

from report_common import (LADDER_TOKENS, LADDER_WIDTH, add, cell_fields, dense_peak_tflops, device_name, fmt,
    fmt_bytes, ladder_cells, log_axes, md_table, percent, plt, ratio, save_figure, shape_fields, tflops_text,
    v2_find, v2_value)


# --- attention (stage 05 on) ---------------------------------------------------------------------

ATTENTION_STYLE = OrderedDict(
    standard=dict(color="tab:red", marker="o", label="standard (S, P in memory)"),
    flash_v1=dict(color="tab:blue", marker="s", label="FlashAttention-1"),
    pytorch_math=dict(color="gray", marker="v", label="PyTorch SDPA math (peer)"),
    pytorch_efficient=dict(color="black", marker="^", label="PyTorch SDPA mem-efficient (peer)"),
)


def attention_records(records, stage="05_flash_v1", **want):
    out = []
    for r in records:
        if r["stage"] != stage:
            continue
        f = shape_fields(r["shape"])
        if all(f.get(k) == str(v) for k, v in want.items()):
            out.append(dict(r, fields=f))
    return out


def default_m(recs):
    ms = [int(r["fields"]["M"]) for r in recs if r["variant"] == "flash_v1" and "M" in r["fields"]]
    return max(ms) if ms else None


def attention_series(recs, variant, key, m=None):
    pts = sorted((r["size"], r.get(key)) for r in recs if r["variant"] == variant and r.get(key) is not None
                 and (m is None or r["fields"].get("M") in (None, str(m))))
    return [p[0] for p in pts], [p[1] for p in pts]


def out_of_memory(recs, variant):
    """Sizes where the variant has a GPU row but no time: it did not fit in device memory."""
    return sorted(r["size"] for r in recs if r["variant"] == variant and r.get("device") and r.get("ms") is None)


def plot_attention(records, out):
    written = []
    sweep = attention_records(records, B=8, H=32, d=64)
    if sweep:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
        for ax, causal in zip(axes, (0, 1)):
            recs = [r for r in sweep if r["fields"].get("causal") == str(causal)]
            m = default_m(recs)
            for variant, st in ATTENTION_STYLE.items():
                x, y = attention_series(recs, variant, "tflops", m)
                if x:
                    ax.plot(x, y, marker=st["marker"], color=st["color"], label=st["label"],
                            ls="--" if variant.startswith("pytorch") else "-")
                for n in out_of_memory(recs, variant):
                    ax.plot([n], [0.5], marker="x", ms=10, color=st["color"])
                    ax.annotate("out of\nmemory", (n, 0.5), textcoords="offset points", xytext=(0, 8),
                                ha="center", fontsize=7, color=st["color"])
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length N (B = 8, H = 32, d = 64)")
            ax.set_title("causal" if causal else "not causal")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("TFLOP/s (4·B·H·N²·d, halved when causal)")
        axes[0].legend(fontsize=8)
        fig.suptitle(f"fp32 attention forward: speed — {device_name(sweep)}")
        path = save_figure(fig, out, "attention_speed.png")
        written.append(path)

        recs = [r for r in sweep if r["fields"].get("causal") == "0"]
        m = default_m(recs)
        fig, (ax, mem) = plt.subplots(1, 2, figsize=(12, 4.8))
        for r in recs:
            r["l2_total"] = add(r.get("l2_read_bytes"), r.get("l2_write_bytes"))
            r["dram_total"] = add(r.get("dram_read_bytes"), r.get("dram_write_bytes"))
        for variant in ("standard", "flash_v1"):
            st = ATTENTION_STYLE[variant]
            x, y = attention_series(recs, variant, "io_model_bytes", m)
            ax.plot(x, y, "-", color=st["color"], label=f"{variant}: model")
            x, y = attention_series(recs, variant, "l2_total", m)
            ax.plot(x, y, "o", mfc="none", color=st["color"], label=f"{variant}: measured SM↔L2")
            x, y = attention_series(recs, variant, "dram_total", m)
            ax.plot(x, y, "x", color=st["color"], label=f"{variant}: measured DRAM")
        log_axes(ax, "sequence length N (B = 8, H = 32, d = 64, not causal)", "bytes read + written",
                 "global memory traffic")
        for variant, st in ATTENTION_STYLE.items():
            x, y = attention_series(recs, variant, "peak_mem_bytes", m)
            if x:
                mem.plot(x, y, marker=st["marker"], color=st["color"], label=st["label"],
                         ls="--" if variant.startswith("pytorch") else "-")
            for n in out_of_memory(recs, variant):
                mem.axvline(n, color=st["color"], lw=0.8, ls=":")
                mem.annotate(f"{variant}: out of memory", (n, mem.get_ylim()[0]), rotation=90, fontsize=7,
                             color=st["color"], va="bottom")
        log_axes(mem, "sequence length N", "peak device memory, bytes", "device memory: N² against N")
        fig.suptitle(f"fp32 attention forward: IO and memory — {device_name(recs)}")
        path = save_figure(fig, out, "attention_io.png")
        written.append(path)

    fig2 = attention_records(records, B=64, H=16, N=1024, d=64)
    if fig2:
        fig, (left, mid) = plt.subplots(1, 2, figsize=(12, 4.8))
        m = default_m(fig2)
        pick = {v: next((r for r in fig2 if r["variant"] == v and r["fields"].get("M") in (None, str(m))
                         and r.get("ms") is not None), None) for v in ("standard", "flash_v1")}
        labels = ["GFLOP", "SM↔L2 GB", "DRAM GB", "runtime ms"]
        width = 0.35
        for k, (variant, r) in enumerate(pick.items()):
            if r is None:
                continue
            vals = [r["flops"] / 1e9, (add(r.get("l2_read_bytes"), r.get("l2_write_bytes")) or 0) / 1e9,
                    (add(r.get("dram_read_bytes"), r.get("dram_write_bytes")) or 0) / 1e9, r["ms"]]
            xs = [i + (k - 0.5) * width for i in range(len(labels))]
            bars = left.bar(xs, vals, width, color=ATTENTION_STYLE[variant]["color"], label=variant)
            for b, v in zip(bars, vals):
                left.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
        left.set_xticks(range(len(labels)))
        left.set_xticklabels(labels)
        left.set_yscale("log")
        left.set_title("B = 64, H = 16, N = 1024, d = 64 (forward)")
        left.legend(fontsize=8)
        left.text(0.30, 0.97, "paper, A100, forward + backward:\nstandard 40.3 GB, 41.7 ms;\n"
                  "FlashAttention 4.4 GB, 7.3 ms", transform=left.transAxes, fontsize=7, va="top")
        sweep_m = sorted((r for r in fig2 if r["variant"] == "flash_v1" and r.get("ms") is not None),
                         key=lambda r: int(r["fields"]["Bc"]))
        if sweep_m:
            bc = [int(r["fields"]["Bc"]) for r in sweep_m]
            mid.plot(bc, [r["io_model_bytes"] / 1e9 for r in sweep_m], "-", color="tab:blue", label="model")
            mid.plot(bc, [(add(r.get("l2_read_bytes"), r.get("l2_write_bytes")) or float("nan")) / 1e9
                          for r in sweep_m], "o", mfc="none", color="tab:blue", label="measured SM↔L2")
            mid.plot(bc, [(add(r.get("dram_read_bytes"), r.get("dram_write_bytes")) or float("nan")) / 1e9
                          for r in sweep_m], "x", color="tab:blue", label="measured DRAM")
            mid.set_xscale("log", base=2)
            mid.set_yscale("log")
            mid.set_xlabel("block size Bc (Br = min(Bc, d); M = 4·Bc·d floats)")
            mid.set_ylabel("global traffic, GB")
            t = mid.twinx()
            t.plot(bc, [r["ms"] for r in sweep_m], "-s", color="tab:green", label="runtime")
            t.set_ylabel("runtime, ms", color="tab:green")
            t.set_ylim(bottom=0)
            mid.legend(fontsize=7, loc="upper center")
            mid.set_title("FlashAttention-1: block size")
            mid.grid(True, which="both", alpha=0.3)
        fig.suptitle(f"The paper's Fig. 2, forward, fp32 — {device_name(fig2)}")
        path = save_figure(fig, out, "flash_v1_fig2.png")
        written.append(path)
    return written


# --- FlashAttention-2 and the tensor-core ladder (stage 06) -----------------------------------------

FLASH_V2 = "06_flash_v2"
# rung 4 (tuned) in its five steps, one idea each: exp2, one_barrier, skip_mask, heaviest_first, tuned
RUNGS = ["mma", "ldmatrix", "cp_async", "exp2", "one_barrier", "skip_mask", "heaviest_first", "tuned", "lazy_rescale"]
BEST_V2 = "lazy_rescale"  # the last rung: tuned (FA-2's own steps) with FlashAttention-4's lazy rescale
PEERS_V2 = ["pytorch_flash", "pytorch_cudnn", "pytorch_efficient", "pytorch_math"]
FLASH_V2_STYLE = OrderedDict(
    mma=dict(color="tab:orange", marker="o", label="mma"),
    ldmatrix=dict(color="tab:green", marker="s", label="ldmatrix"),
    cp_async=dict(color="tab:purple", marker="^", label="cp_async"),
    exp2=dict(color="tab:pink", marker="<", label="4a exp2"),
    one_barrier=dict(color="tab:olive", marker=">", label="4b one_barrier"),
    skip_mask=dict(color="tab:red", marker="p", label="4c skip_mask"),
    heaviest_first=dict(color="goldenrod", marker="h", label="4d heaviest_first"),
    tuned=dict(color="tab:cyan", marker="d", label="4e tuned (FA-2's steps)"),
    lazy_rescale=dict(color="tab:blue", marker="D", label="lazy_rescale (ours)"),
    pytorch_flash=dict(color="black", marker="v", label="FlashAttention-2 (SDPA flash)"),
    pytorch_cudnn=dict(color="gray", marker="P", label="cuDNN"),
    pytorch_efficient=dict(color="tab:brown", marker="x", label="SDPA mem-efficient"),
)
# "IO three ways": (variant, dtype, shape) of each group of bars.
BIG = dict(B=8, H=32, N=4096, d=64, causal=0)
LONG = dict(B=1, H=8, N=16384, d=64, causal=0)
SMALL = dict(B=1, H=4, N=1000, d=64, causal=0)
IO_PICKS = [("flash_v1", "fp32", BIG), ("flash_v2", "fp32", BIG), ("flash_v1", "fp32", LONG),
            ("flash_v2", "fp32", LONG), ("tuned", "fp16", dict(B=4, H=32, N=4096, d=64, causal=0)),
            ("flash_v1", "fp32", SMALL), ("flash_v2", "fp32", SMALL), ("cp_async", "fp16", SMALL),
            ("tuned", "fp16", SMALL)]
TRITON_SHAPE = dict(B=4, H=48, d=64, causal=1)  # where our Triton FA-2 was measured (fp16)
# What the ladder figures draw: stage 06's forward here, stage 07's backward below.
# flash_v2_vs_fa2.png: the rungs whose files are the chapter's milestones (rung 4's steps 4a-4d are
# in the ladder figure), so that a cell's group stays readable.
RUNGS_VS_FA2 = ["mma", "ldmatrix", "cp_async", "tuned", "lazy_rescale"]
LADDER_V2 = dict(style=FLASH_V2_STYLE, rungs=RUNGS, vs_fa2=RUNGS_VS_FA2, best=BEST_V2, fa2="pytorch_flash",
                 cudnn="pytorch_cudnn",
                 what="attention forward", ladder="The ladder", ylabel="TFLOP/s (4·B·H·N²·d, halved when causal)")


def plot_ladder(recs, dtype, out, name, spec=LADDER_V2):
    cells = ladder_cells(recs, dtype)
    if not cells:
        return None
    ds = sorted({c[0] for c in cells})
    fig, axes = plt.subplots(len(ds), 2, figsize=(13, 4.2 * len(ds)), sharey=True, squeeze=False)
    top = 0.0
    for row, d in zip(axes, ds):
        for ax, causal in zip(row, (0, 1)):
            mine = [c for c in cells if c[0] == d and c[1] == causal]
            for variant, st in spec["style"].items():
                pts = [(c[2], v2_value(recs, variant, dtype, **cell_fields(c))) for c in mine]
                pts = [p for p in pts if p[1] is not None]
                top = max([top] + [p[1] for p in pts])
                if pts:
                    ax.plot(*zip(*pts), marker=st["marker"], color=st["color"], label=st["label"],
                            ls=st.get("ls", "--" if variant.startswith("pytorch") else "-"))
            ax.set_xscale("log", base=2)
            ns = sorted({c[2] for c in cells})
            ax.set_xticks(ns)
            ax.set_xticklabels([str(n) for n in ns])
            ax.set_xlim(min(ns) / 1.4, max(ns) * 1.4)
            ax.minorticks_off()
            ax.set_xlabel(f"sequence length N (B = {LADDER_TOKENS} / N, H = {LADDER_WIDTH // d})")
            ax.set_title(f"d = {d}, " + ("causal" if causal else "not causal"))
            ax.grid(True, which="both", alpha=0.3)
        row[0].set_ylabel(spec["ylabel"])
    axes[0][0].set_ylim(0, top * 1.06)  # shared by all panels
    shown = OrderedDict()  # every panel's lines, in one legend beside the top-right panel
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            shown.setdefault(label, handle)
    axes[0][-1].legend(shown.values(), shown.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(f"{dtype} {spec['what']}, the ladder against its peers — {device_name(recs)}")
    return save_figure(fig, out, name)


def plot_vs_fa2(recs, out, spec=LADDER_V2, name="flash_v2_vs_fa2.png"):
    """Each rung's TFLOP/s as a % of FA-2's (SDPA flash) in the same cell (spec's vs_fa2 rungs where it
    names them); cuDNN as a mark."""
    rungs, style = spec.get("vs_fa2", spec["rungs"]), spec["style"]
    grid = {t: [c for c in ladder_cells(recs, t) if v2_find(recs, spec["fa2"], t, **cell_fields(c))]
            for t in ("fp16", "bf16")}
    dtypes = [t for t in grid if grid[t]]
    if not dtypes:
        return None
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(14, 4.3 * len(dtypes)), squeeze=False)
    width = 0.8 / len(rungs)
    for ax, dtype in zip(axes[:, 0], dtypes):
        cells = grid[dtype]
        fa2 = [v2_value(recs, spec["fa2"], dtype, **cell_fields(c)) for c in cells]
        all_pct = []
        best = (spec["best"],) if isinstance(spec["best"], str) else spec["best"]
        top = [None] * len(cells)  # per cell, the bar of the fastest of the `best` variants
        for k, variant in enumerate(rungs):
            pct = [100 * (ratio(v2_value(recs, variant, dtype, **cell_fields(c)), f) or math.nan)
                   for c, f in zip(cells, fa2)]
            all_pct += pct
            xs = [i + (k - (len(rungs) - 1) / 2) * width for i in range(len(cells))]
            st = style[variant]
            bars = ax.bar(xs, pct, width, color=st["color"], label=st["label"])
            if variant in best:
                for i, (b, v) in enumerate(zip(bars, pct)):
                    if not math.isnan(v) and (top[i] is None or v > top[i][1]):
                        top[i] = (b, v)
        for b, v in filter(None, top):
            ax.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
        cudnn = [100 * (ratio(v2_value(recs, spec["cudnn"], dtype, **cell_fields(c)), f) or math.nan)
                 for c, f in zip(cells, fa2)]
        marks = [(i, v) for i, v in enumerate(cudnn) if not math.isnan(v)]
        if marks:
            ax.hlines([v for _, v in marks], [i - 0.4 for i, _ in marks], [i + 0.4 for i, _ in marks],
                      color="gray", lw=2, label="cuDNN")
        ax.axhline(100, color="black", lw=1, ls="--", label="FlashAttention-2 (SDPA flash) = 100 %")
        cell_axis(ax, cells)
        shown = [v for v in cudnn + all_pct if not math.isnan(v)]
        ax.set_ylim(0, max(shown + [120]) * 1.12)
        ax.set_ylabel("% of FA-2's TFLOP/s")
        ax.set_title(f"{dtype} (B·N = {LADDER_TOKENS}, H·d = {LADDER_WIDTH})")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{spec['ladder']} as a share of FlashAttention-2 in each cell — {device_name(recs)}")
    return save_figure(fig, out, name)


def cell_axis(ax, cells):
    """The x axis of a per-cell bar chart: a tick a (d, causal, N) cell, a dotted line between groups of d and mask."""
    for i in range(1, len(cells)):
        if cells[i][:2] != cells[i - 1][:2]:
            ax.axvline(i - 0.5, color="gray", lw=0.8, ls=":")
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels([f"N={c[2]}\nd={c[0]}\n" + ("causal" if c[1] else "not causal") for c in cells],
                       fontsize=7)
    ax.set_xlim(-0.6, len(cells) - 0.4)


def io_picks(recs, wanted):
    """The records of `wanted` ((variant, dtype, shape fields) each) that have a model of their bytes,
    as (variant, dtype, fields, record)."""
    picks = [(v, t, f, v2_find(recs, v, t, need="io_model_bytes", **f)) for v, t, f in wanted]
    return [p for p in picks if p[3] is not None]


def plot_v2_io(recs, out, wanted=IO_PICKS, name="flash_v2_io.png", stage_name=""):
    """IO three ways: the model, the CPU count and the counters (SM↔L2, DRAM), for a few problems
    (stage_name, when given, opens the title)."""
    picks = io_picks(recs, wanted)
    if not picks:
        return None
    kinds = [("model", "tab:blue", lambda r: r.get("io_model_bytes")),
             ("counted (CPU)", "tab:cyan", lambda r: r.get("io_counted_bytes")),
             ("measured SM↔L2", "tab:orange", lambda r: add(r.get("l2_read_bytes"), r.get("l2_write_bytes"))),
             ("measured DRAM", "tab:red", lambda r: add(r.get("dram_read_bytes"), r.get("dram_write_bytes")))]
    fig, ax = plt.subplots(figsize=(13, 5.5))
    width = 0.8 / len(kinds)
    for k, (label, color, value) in enumerate(kinds):
        vals = [value(p[3]) or math.nan for p in picks]
        xs = [i + (k - (len(kinds) - 1) / 2) * width for i in range(len(picks))]
        bars = ax.bar(xs, vals, width, color=color, label=label)
        for b, v in zip(bars, vals):
            x = b.get_x() + b.get_width() / 2
            if math.isnan(v):  # not counted (too large for the CPU) or no counters
                ax.annotate("n/a", (x, 0.01), xycoords=("data", "axes fraction"), ha="center",
                            va="bottom", fontsize=6, rotation=90, color=color)
            else:
                ax.annotate(fmt_bytes(v), (x, v), ha="center", va="bottom", fontsize=6, rotation=90)
    for i in range(1, len(picks)):
        if picks[i][2] != picks[i - 1][2]:
            ax.axvline(i - 0.5, color="gray", lw=0.8, ls=":")
    ax.set_xticks(range(len(picks)))
    ax.set_xticklabels([f"{v} {t}\nB={f['B']} H={f['H']}\nN={f['N']} d={f['d']}" for v, t, f, _ in picks],
                       fontsize=7)
    ax.set_xlim(-0.5, len(picks) - 0.5)  # every group's bars (and n/a marks) inside the axes
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 8)  # room for the labels
    ax.set_ylabel("bytes read + written (not causal)")
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"{stage_name + ', ' if stage_name else ''}IO three ways: model, CPU count, hardware counters — "
                 f"{device_name(recs)}")
    return save_figure(fig, out, name)


def plot_flash_v2(records, out):
    recs = attention_records(records, stage=FLASH_V2)
    if not recs:
        return []
    return [plot_ladder(recs, "fp16", out, "flash_v2_ladder.png"),
            plot_ladder(recs, "bf16", out, "flash_v2_ladder_bf16.png"),
            plot_vs_fa2(recs, out), plot_v2_io(recs, out)]


BACKWARD = "07_backward"
BWD_RUNGS = ["tc", "tc_deterministic", "tuned", "tuned_deterministic", "wide", "wide_deterministic", "split",
             "split_deterministic"]
BWD_FASTEST = ("tuned", "wide", "split")  # the last rungs: wide at d = 64, split at d = 128 (their only d)
BACKWARD_STYLE = OrderedDict(
    standard=dict(color="tab:red", marker="x", label="standard (P kept)"),
    flash_bwd=dict(color="tab:olive", marker=".", label="flash_bwd (fp32)"),
    tc=dict(color="tab:orange", marker="o", label="tc"),
    tc_deterministic=dict(color="tab:green", marker="s", label="tc_deterministic"),
    tuned=dict(color="tab:blue", marker="D", label="tuned"),
    tuned_deterministic=dict(color="tab:purple", marker="^", label="tuned_deterministic"),
    wide=dict(color="tab:cyan", marker="*", label="wide (ours, d = 64)"),
    wide_deterministic=dict(color="tab:pink", marker="<", label="wide_deterministic"),
    split=dict(color="tab:brown", marker="p", label="split (ours, d = 128)"),
    split_deterministic=dict(color="tab:gray", marker=">", label="split_deterministic"),
    pytorch_flash_bwd=dict(color="black", marker="v", label="FlashAttention-2 (SDPA flash)"),
    pytorch_cudnn_bwd=dict(color="gray", marker="P", label="cuDNN"),
)
LADDER_BWD = dict(style=BACKWARD_STYLE, rungs=BWD_RUNGS, best=BWD_FASTEST, fa2="pytorch_flash_bwd",
                  cudnn="pytorch_cudnn_bwd", what="attention backward", ladder="The backward ladder",
                  ylabel="TFLOP/s (2.5 × 4·B·H·N²·d, halved when causal)")
FIG2 = dict(B=64, H=16, N=1024, d=64, causal=0)  # the paper's Fig. 2 shape (fp16 here)
FIG2_PAPER = dict(standard=(41.7, 40.3e9), flash=(7.3, 4.4e9))  # A100: ms, HBM bytes (fwd + bwd)
FIG2_RUNS = [("standard_fwdbwd", "standard"), ("wide_fwdbwd", "FlashAttention (ours)"),
             ("wide_deterministic_fwdbwd", "ours, deterministic"), ("pytorch_flash_fwdbwd", "FA-2 (SDPA)"),
             ("pytorch_cudnn_fwdbwd", "cuDNN (SDPA)"), ("pytorch_math_fwdbwd", "SDPA math")]


def plot_fig2(recs, out):
    """The paper's Fig. 2 in full: forward + backward runtime, and the bytes of standard attention
    and ours between the SMs and L2 and to DRAM, beside the paper's A100 figures."""
    runs = [(label, v2_find(recs, v, "fp16", need="ms", **FIG2)) for v, label in FIG2_RUNS]
    runs = [(label, r) for label, r in runs if r is not None]
    if not runs:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    names = [label for label, _ in runs] + ["paper (A100): standard", "paper (A100): FlashAttention"]
    ms = [r["ms"] for _, r in runs] + [FIG2_PAPER["standard"][0], FIG2_PAPER["flash"][0]]
    palette = dict(zip([label for _, label in FIG2_RUNS], ["tab:red", "tab:blue", "tab:purple", "black", "gray", "tab:brown"]))
    colors = [palette[label] for label, _ in runs] + ["#f4a3a3", "#a3c4f4"]
    bars = left.barh(range(len(ms)), ms, color=colors)
    for b, v in zip(bars, ms):
        left.annotate(f"{v:.2f} ms", (v, b.get_y() + b.get_height() / 2), va="center", fontsize=8,
                      xytext=(3, 0), textcoords="offset points")
    left.set_yticks(range(len(ms)))
    left.set_yticklabels(names, fontsize=8)
    left.invert_yaxis()
    left.set_xlim(0, max(ms) * 1.25)
    left.set_xlabel("forward + backward, ms (median)")
    left.grid(True, axis="x", alpha=0.3)
    ours = [(label, r) for label, r in runs if label in ("standard", "FlashAttention (ours)")]
    kinds = [("SM↔L2", lambda r: add(r.get("l2_read_bytes"), r.get("l2_write_bytes")), "tab:orange"),
             ("DRAM", lambda r: add(r.get("dram_read_bytes"), r.get("dram_write_bytes")), "tab:red")]
    groups = [label.replace(" (", "\n(") for label, _ in ours] + ["paper (A100):\nstandard", "paper (A100):\nFlashAttention"]
    width = 0.38
    for k, (kind, value, color) in enumerate(kinds):
        vals = [value(r) or math.nan for _, r in ours]
        vals += [math.nan, math.nan] if kind == "SM↔L2" else [FIG2_PAPER["standard"][1], FIG2_PAPER["flash"][1]]
        xs = [i + (k - 0.5) * width for i in range(len(groups))]
        bs = right.bar(xs, [v / 1e9 for v in vals], width, color=color, label=kind + (" (paper: HBM)" if kind == "DRAM" else ""))
        for b, v in zip(bs, vals):
            if not math.isnan(v):
                right.annotate(f"{v / 1e9:.1f}", (b.get_x() + b.get_width() / 2, v / 1e9), ha="center",
                               va="bottom", fontsize=8)
    right.set_xticks(range(len(groups)))
    right.set_xticklabels(groups, fontsize=8)
    right.set_ylabel("GB read + written, forward + backward")
    right.grid(True, axis="y", alpha=0.3)
    right.legend(fontsize=8)
    shape = " ".join(f"{k}={v}" for k, v in FIG2.items())
    fig.suptitle(f"The paper's Fig. 2 in full, fp16, {shape} — {device_name(recs)}")
    return save_figure(fig, out, "backward_fig2.png")


def plot_backward(records, out):
    recs = attention_records(records, stage=BACKWARD)
    if not recs:
        return []
    return [plot_ladder(recs, "fp16", out, "backward_ladder.png", LADDER_BWD),
            plot_ladder(recs, "bf16", out, "backward_ladder_bf16.png", LADDER_BWD),
            plot_vs_fa2(recs, out, LADDER_BWD, "backward_vs_fa2.png"), plot_fig2(recs, out)]


# --- FlashAttention-3 on Hopper (stage 08) ----------------------------------------------------------

FLASH_V3 = "08_flash_v3"
V3_RUNGS = ["wgmma", "tma", "warp_specialized", "pingpong", "overlap", "persistent", "three_warpgroups",
            "tuned"]  # the ladder, in order
BEST_V3 = "tuned"  # the last rung: O by TMA stores
# Beside the last rung (run only when named with --variants): its LPT tile order, the experiment tile_overlap
V3_ABLATIONS = ["tuned_lpt", "tile_overlap"]
STAGE06_IN_V3 = "06_lazy_rescale"  # stage 06's last rung, run by stage 08's program on the same inputs
V3_PEERS = ["pytorch_flash", "pytorch_cudnn"]  # FlashAttention-2 and cuDNN, through PyTorch's SDPA
FLASH_V3_STYLE = OrderedDict([
    ("wgmma", dict(color="tab:orange", marker="o", label="wgmma")),
    ("tma", dict(color="tab:green", marker="s", label="tma")),
    ("warp_specialized", dict(color="tab:purple", marker="^", label="warp_specialized")),
    ("pingpong", dict(color="tab:brown", marker="<", label="pingpong")),
    ("overlap", dict(color="tab:olive", marker=">", label="overlap")),
    ("persistent", dict(color="tab:pink", marker="X", label="persistent")),
    ("three_warpgroups", dict(color="tab:red", marker="p", label="three_warpgroups")),
    ("tuned", dict(color="tab:blue", marker="D", label="tuned (ours)")),
    (STAGE06_IN_V3, dict(color="tab:cyan", marker="d", ls=":", label="06 lazy_rescale (stage 06's last rung)")),
    ("pytorch_flash", dict(color="black", marker="v", label="FlashAttention-2 (SDPA flash)")),
    ("pytorch_cudnn", dict(color="gray", marker="P", label="cuDNN (SDPA)")),
])
LADDER_V3 = dict(style=FLASH_V3_STYLE, rungs=V3_RUNGS, best=BEST_V3, fa2="pytorch_flash", cudnn="pytorch_cudnn",
                 what="FlashAttention-3 forward (stage 08, medians of the rounds)", ladder="Stage 08's ladder",
                 ylabel="TFLOP/s (4·B·H·N²·d, halved when causal)")
# "IO three ways" for stage 08: the main job's counted line (N = 1000: TMA's boxes run past N) and two
# cells of the ladder's grid (counters only: too large to count on the CPU).
V3_SMALL = dict(B=1, H=4, N=1000, d=64, causal=0)
V3_IO_PICKS = ([(v, "fp16", V3_SMALL) for v in (STAGE06_IN_V3, "wgmma", "tma", "tuned")] +
               [(v, "fp16", dict(B=4, H=32, N=4096, d=64, causal=0))
                for v in (STAGE06_IN_V3, "wgmma", "tma", "tuned")] +
               [(v, "fp16", dict(B=1, H=16, N=16384, d=128, causal=0)) for v in (STAGE06_IN_V3, "tuned")])


def v3_cells(recs, dtype):
    """The cells of the ladder's grid (as ladder_cells) where one of stage 08's rungs was timed in
    this dtype: the peers alone (on a GPU that cannot run the rungs) do not make a cell."""
    return [c for c in ladder_cells(recs, dtype)
            if any(v2_find(recs, v, dtype, **cell_fields(c)) for v in V3_RUNGS)]


def tuned_against(recs, dtype, cell, peer):
    """tuned's TFLOP/s as a % of the peer's in one cell, and how far below and above that its slowest
    and fastest rounds lie (0, 0 with one round); None where either is missing."""
    mine = v2_find(recs, BEST_V3, dtype, **cell_fields(cell))
    theirs = v2_value(recs, peer, dtype, **cell_fields(cell))
    if mine is None or not theirs:
        return None
    pct = 100 * mine["tflops"] / theirs
    low, high = mine.get("range", {}).get("tflops", (mine["tflops"], mine["tflops"]))
    return pct, pct - 100 * low / theirs, 100 * high / theirs - pct


def plot_v3_vs_peers(recs, out):
    """The last rung, tuned, as a % of cuDNN's and of FA-2's TFLOP/s in each cell of the ladder's grid,
    one panel per dtype; error bars: tuned's slowest and fastest round against the peer's median."""
    grid = {t: [c for c in v3_cells(recs, t) if any(tuned_against(recs, t, c, p) for p in V3_PEERS)]
            for t in ("fp16", "bf16")}
    dtypes = [t for t in grid if grid[t]]
    if not dtypes:
        return None
    bars = [("pytorch_cudnn", "tuned as a % of cuDNN", "tab:blue"),
            ("pytorch_flash", "tuned as a % of FlashAttention-2 (SDPA flash)", "silver")]
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(14, 4.3 * len(dtypes)), squeeze=False)
    width = 0.4
    for ax, dtype in zip(axes[:, 0], dtypes):
        cells = grid[dtype]
        highest = 120.0
        for k, (peer, label, color) in enumerate(bars):
            got = [tuned_against(recs, dtype, c, peer) or (math.nan, 0.0, 0.0) for c in cells]
            pct = [g[0] for g in got]
            if all(math.isnan(v) for v in pct):
                continue  # this peer is missing in every cell (the other one is not)
            xs = [i + (k - 0.5) * width for i in range(len(cells))]
            ax.bar(xs, pct, width, color=color, label=label, yerr=[[g[1] for g in got], [g[2] for g in got]],
                   error_kw=dict(lw=0.8, capsize=2, ecolor="black"))
            for x, (v, _, above) in zip(xs, got):
                if not math.isnan(v):
                    ax.annotate(f"{v:.0f}", (x, v + above), xytext=(0, 2), textcoords="offset points",
                                ha="center", va="bottom", fontsize=7)
                    highest = max(highest, v + above)
        ax.axhline(100, color="black", lw=1, ls="--", label="the peer = 100 %")
        cell_axis(ax, cells)
        ax.set_ylim(0, highest * 1.12)
        ax.set_ylabel("% of the peer's TFLOP/s")
        ax.set_title(f"{dtype} (B·N = {LADDER_TOKENS}, H·d = {LADDER_WIDTH}; medians, bars: tuned's slowest "
                     "and fastest round)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"Stage 08's last rung (tuned) against cuDNN and FlashAttention-2 in each cell — "
                 f"{device_name(recs)}")
    return save_figure(fig, out, "flash_v3_vs_cudnn.png")


def v3_io_picks(recs):
    """The IO figure's problems, or [] when none has a CPU count or counters (the model alone is
    no comparison)."""
    picks = io_picks(recs, V3_IO_PICKS)
    measured = [p for p in picks if p[3].get("io_counted_bytes") is not None or p[3].get("l2_read_bytes") is not None]
    return picks if measured else []


def plot_flash_v3(records, out):
    """Stage 08's figures: the ladder per dtype, tuned against the peers, IO three ways."""
    recs = attention_records(records, stage=FLASH_V3)
    written = [plot_ladder(recs, dtype, out, name, LADDER_V3)
               for dtype, name in (("fp16", "flash_v3_ladder.png"), ("bf16", "flash_v3_ladder_bf16.png"))
               if v3_cells(recs, dtype)]
    written.append(plot_v3_vs_peers(recs, out))
    if v3_io_picks(recs):
        written.append(plot_v2_io(recs, out, V3_IO_PICKS, "flash_v3_io.png", "Stage 08"))
    return written


FP8 = "09_flash_v3_fp8"
FP8_BASE = "08_tuned"  # stage 08's last rung (fp16/bf16), run by stage 09's program on the same inputs
# Stage 09's rows are <rung>.<scheme> (09_flash_v3_fp8/variants.cpp): rung 2 (row_sum, the row sum on the
# tensor cores, key blocks of 128) under each scheme, and the last rungs per tensor: rung 6 (epilogue, key
# blocks of 256 with the exponential unit; d = 128) and rung 7 (lin, P̃ without it; d = 64 on rung 2).
FP8_SCHEMES = ["row_sum.per_tensor", "row_sum.per_block", "row_sum.per_tensor_hadamard", "row_sum.per_block_hadamard"]
FP8_LAST = ["epilogue.per_tensor", "lin.per_tensor"]
FP8_STYLE = OrderedDict([
    (FP8_BASE, dict(color="tab:blue", marker="D", label="stage 08 tuned (16-bit)")),
    ("row_sum.per_tensor", dict(color="tab:red", marker="o", label="FP8 rung 2, per tensor")),
    ("row_sum.per_block_hadamard", dict(color="tab:purple", marker="s", ls="--", label="FP8 rung 2, per block + Hadamard")),
    ("epilogue.per_tensor", dict(color="tab:green", marker="v", label="FP8 rung 6 (key blocks of 256), per tensor")),
    ("lin.per_tensor", dict(color="tab:brown", marker="*", label="FP8 rung 7 (no exp. unit), per tensor")),
])
# Dense FP8 (e4m3) tensor-core peaks, TFLOP/s, from NVIDIA's datasheets (without sparsity), by a piece of
# the GPU's name, as DENSE_PEAK_TFLOPS.
DENSE_FP8_PEAK_TFLOPS = [("H100 PCIe", 1513.0), ("NVL", 1670.0), ("H100", 1979.0), ("H200", 1979.0)]


def fp8_cells(recs, dtype="fp16"):
    """The cells (as ladder_cells) where an FP8 attention row was timed."""
    return [c for c in ladder_cells(recs, dtype) if any(v2_find(recs, v, dtype, **cell_fields(c)) for v in FP8_SCHEMES)]


def plot_fp8(records, out):
    """Stage 09's figures: TFLOP/s against N per (d, causal) for stage 08's last rung, two FP8 schemes
    and the last rungs (FP8_STYLE); and the bytes each moved (SM<->L2 and DRAM, the counters) at the largest N."""
    recs = attention_records(records, stage=FP8)
    cells = fp8_cells(recs)
    if not cells:
        return []
    panels = sorted({(c[0], c[1]) for c in cells})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (d, causal) in zip(axes[0], panels):
        for v, style in FP8_STYLE.items():
            pts = sorted((c[2], v2_value(recs, v, "fp16", **cell_fields(c))) for c in cells if c[:2] == (d, causal))
            pts = [(n, t) for n, t in pts if t is not None]
            if pts:
                ax.plot([n for n, _ in pts], [t for _, t in pts], **style)
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        ax.set_title(f"d = {d}{', causal' if causal else ''}")
        ax.set_xlabel("sequence length N (B·N = 16384)")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("TFLOP/s (fp16 out; medians of rounds)")
    # One legend for every line drawn (the wide rung's only at d = 128), on the panel with the most lines.
    legend = OrderedDict()
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(lab, h)
    fullest = max(axes[0], key=lambda ax: len(ax.get_lines()))
    fullest.legend(list(legend.values()), list(legend.keys()), fontsize=7, loc="lower right")
    fig.suptitle(f"FP8 attention (stage 09) against stage 08's 16-bit last rung, {device_name(records)}")
    written = [save_figure(fig, out, "flash_v3_fp8.png")]
    # The bytes moved, at each panel's largest N: FP8 reads 1-byte Q, K, V.
    picks = []
    for d, causal in panels:
        n = max(c[2] for c in cells if c[:2] == (d, causal))
        cell = next(c for c in cells if c[:3] == (d, causal, n))
        for v in (FP8_BASE, "row_sum.per_tensor"):
            r = v2_find(recs, v, "fp16", need="l2_read_bytes", **cell_fields(cell))
            if r:
                picks.append((f"d={d}{' causal' if causal else ''}\n{'16-bit' if v == FP8_BASE else 'FP8'}", r))
    if picks:
        fig, ax = plt.subplots(figsize=(1.3 * len(picks) + 2, 3.8))
        xs = range(len(picks))
        gib = 2.0 ** 30
        ax.bar([x - 0.2 for x in xs], [add(r["l2_read_bytes"], r.get("l2_write_bytes")) / gib for _, r in picks], 0.4,
               label="SM↔L2 (measured)", color="tab:blue")
        ax.bar([x + 0.2 for x in xs], [add(r.get("dram_read_bytes"), r.get("dram_write_bytes")) / gib for _, r in picks],
               0.4, label="DRAM (measured)", color="tab:orange")
        ax.plot(list(xs), [r["io_model_bytes"] / gib for _, r in picks], "k_", markersize=18, label="model (SM↔L2)")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([name for name, _ in picks], fontsize=8)
        ax.set_ylabel("GiB moved by one call")
        ax.legend(fontsize=8)
        ax.set_title("Bytes moved, 16-bit against FP8 (largest N of each panel)", fontsize=10)
        written.append(save_figure(fig, out, "flash_v3_fp8_io.png"))
    return written


def fp8_tables(records):
    """Stage 09's table for summary.md: stage 08's last rung and each FP8 scheme in every cell, the
    ratio FP8 / 16-bit, the quantisation's time, and the bytes moved."""
    recs = attention_records(records, stage=FP8)
    rows = []
    for c in fp8_cells(recs):
        found = {v: v2_find(recs, v, "fp16", **cell_fields(c)) for v in [FP8_BASE] + FP8_SCHEMES + FP8_LAST}
        value = {v: r and r["tflops"] for v, r in found.items()}
        best = max(FP8_SCHEMES + FP8_LAST, key=lambda v: value[v] or 0)
        quant = {q: v2_find(recs, q, "fp16", need="ms", **cell_fields(c))
                 for q in ("quant.per_tensor", "quant.per_block_hadamard")}
        attn = found["row_sum.per_tensor"]
        l2 = {v: found[v] and add(found[v].get("l2_read_bytes"), found[v].get("l2_write_bytes"))
              for v in (FP8_BASE, "row_sum.per_tensor")}
        per_tensor_quant = quant["quant.per_tensor"] and quant["quant.per_tensor"]["ms"]
        d, causal, N, B, H = c
        rows.append([str(d), str(causal), str(N), str(B), str(H)] +
                    [tflops_text(found[v]) for v in [FP8_BASE] + FP8_SCHEMES + FP8_LAST] +
                    [fmt(ratio(value["row_sum.per_tensor"], value[FP8_BASE]), ".2f"),
                     fmt(ratio(value[best], value[FP8_BASE]), ".2f"),
                     percent(value["row_sum.per_tensor"], dense_peak_tflops(attn and attn["device"], DENSE_FP8_PEAK_TFLOPS)),
                     " / ".join(fmt(quant[q] and quant[q]["ms"], ".3f") for q in quant),
                     percent(per_tensor_quant, attn and attn["ms"]),
                     fmt_bytes(l2[FP8_BASE]), fmt_bytes(l2["row_sum.per_tensor"])])
    table = md_table("Stage 09, FP8 attention: TFLOP/s (fp16 inputs and O), B·N = 16384, H·d = 2048; medians of rounds "
                     "with their min–max where there are several (08_tuned: stage 08's last rung on the same inputs; "
                     "row_sum: rung 2; epilogue: rung 6, key blocks of 256, d = 128 only; lin: rung 7, P̃ by fp16's bit "
                     "pattern, not the exponential unit; best: the fastest FP8 row; the "
                     "quantisation is timed apart: per tensor / per block + Hadamard, and per tensor as a % of the FP8 "
                     "attention's time; SM↔L2: measured bytes of one call)",
                     ["d", "causal", "N", "B", "H", FP8_BASE] + FP8_SCHEMES + FP8_LAST +
                     ["per tensor / 08", "best / 08", "per tensor % of dense FP8 peak", "quantisation ms",
                      "quant. % of attention", "SM↔L2 08", "SM↔L2 FP8"], rows)
    return "\n" + table if table else ""


def flash_v3_tables(records):
    """Stage 08's table for summary.md: every rung's TFLOP/s in each cell of the ladder's grid, stage
    06's last rung and the peers beside them, and tuned as a % of cuDNN, FA-2 and the dense peak."""
    recs = attention_records(records, stage=FLASH_V3)
    names = V3_RUNGS + [STAGE06_IN_V3] + V3_PEERS
    rows = []
    for dtype in ("fp16", "bf16"):
        for c in v3_cells(recs, dtype):
            found = {n: v2_find(recs, n, dtype, **cell_fields(c)) for n in names}
            value = {n: r and r["tflops"] for n, r in found.items()}
            best = found[BEST_V3]
            rounds = sorted({r.get("rounds", 1) for r in found.values() if r})  # of the cell's records
            d, causal, N, B, H = c
            rows.append([dtype, str(d), str(causal), str(N), str(B), str(H)] +
                        [tflops_text(found[n]) for n in names] +
                        [percent(value[BEST_V3], value["pytorch_cudnn"]),
                         percent(value[BEST_V3], value["pytorch_flash"]),
                         percent(value[BEST_V3], dense_peak_tflops(best and best["device"])),
                         f"{rounds[0]}–{rounds[-1]}" if len(rounds) > 1 else str(rounds[0])])
    devices = sorted({r["device"] for r in recs if r.get("device")})
    peaks = "; ".join(f"{dev}: {fmt(dense_peak_tflops(dev), '.0f')} TFLOP/s" for dev in devices)
    table = md_table(f"Stage 08 ladder: TFLOP/s, B·N = {LADDER_TOKENS}, H·d = {LADDER_WIDTH}; each the median of its "
                    "rounds (rows of one problem), with their min–max where there are several "
                    f"(pytorch_flash is FlashAttention-2; {STAGE06_IN_V3} is stage 06's last rung on the same inputs; "
                    f"the dense peak, fp16/bf16 tensor cores without sparsity, from NVIDIA's datasheets: {peaks})",
                    ["dtype", "d", "causal", "N", "B", "H"] + names +
                    ["tuned % of cuDNN", "tuned % of FA-2", "tuned % of dense peak", "rounds"], rows)
    return ("\n" + table if table else "") + ablation_table(recs)


def ablation_table(recs):
    """The ablations' TFLOP/s in each cell where one ran, and each as a multiple of tuned's (medians)."""
    rows = []
    for dtype in ("fp16", "bf16"):
        for c in v3_cells(recs, dtype):
            found = {n: v2_find(recs, n, dtype, **cell_fields(c)) for n in [BEST_V3] + V3_ABLATIONS}
            if not any(found[n] for n in V3_ABLATIONS):
                continue
            best = found[BEST_V3] and found[BEST_V3]["tflops"]
            d, causal, N, B, H = c
            rows.append([dtype, str(d), str(causal), str(N), tflops_text(found[BEST_V3])] +
                        [tflops_text(found[n]) +
                         (f", ×{ratio(found[n]['tflops'], best):.2f}" if found[n] and best else "")
                         for n in V3_ABLATIONS])
    table = md_table("Stage 08 ablations: TFLOP/s (median, min–max) and × tuned, where they were run (--variants)",
                     ["dtype", "d", "causal", "N", BEST_V3] + V3_ABLATIONS, rows)
    return "\n" + table if table else ""


def flash_v3_notes(records):
    """Lines for "Figures not drawn": what stage 08's figures lack, when its rungs ran on a GPU."""
    recs = attention_records(records, stage=FLASH_V3)
    if not recs or FLASH_V3 in cpu_only_stages(records):
        return []  # nothing, or the CPU-only note says it
    notes = []
    cells = {t: v3_cells(recs, t) for t in ("fp16", "bf16")}
    peers = "PyTorch's SDPA, scripts/peers/torch_attention.py --stage 08_flash_v3"
    if not any(cells.values()):
        notes.append(f"08_flash_v3: no rung timed on the ladder's grid (B·N = {LADDER_TOKENS}, H·d = "
                     f"{LADDER_WIDTH}): no flash_v3_ladder*.png, flash_v3_vs_cudnn.png or ladder table.")
    else:
        missing = [p for p in V3_PEERS if not any(v2_find(recs, p, t, **cell_fields(c))
                                                  for t in cells for c in cells[t])]
        if len(missing) == len(V3_PEERS):
            notes.append(f"08_flash_v3: no peer rows in the ladder's cells ({peers}): flash_v3_vs_cudnn.png "
                         "not drawn, and the ladder figures have no peer lines.")
        elif missing:
            notes.append(f"08_flash_v3: no {' or '.join(missing)} rows in the ladder's cells ({peers}): "
                         "their lines and bars are missing.")
    if not v3_io_picks(recs):
        notes.append("08_flash_v3: neither a CPU count (B=1 H=4 N=1000 d=64, the main job's first line) nor "
                     "the hardware counters for the IO figure's problems: flash_v3_io.png not drawn.")
    return notes


# --- without a GPU (stages 05 on) --------------------------------------------------------------------

ATTENTION_STAGES = ["05_flash_v1", FLASH_V2, BACKWARD, FLASH_V3]


def is_peer(variant):
    """Whether a variant is a library's (scripts/peers/), not one of the course's kernels."""
    return variant.startswith(("pytorch_", "triton_"))


def cpu_only_stages(records):
    """The attention stages whose own rows (the peers' aside) are all CPU rows: their figures of
    speed and measured traffic have nothing to draw. (Stage 08 on a GPU other than a Hopper: its
    peers ran, its kernels did not.)"""
    stages = []
    for stage in ATTENTION_STAGES:
        mine = [r for r in records if r["stage"] == stage and not is_peer(r["variant"])]
        if mine and not any(r.get("ms") is not None or r.get("device") for r in mine):
            stages.append(stage)
    return stages


def counted_picks(records, stage):
    """The rows counted on the CPU at the stage's largest counted problem (B, H, N, d, causal; the
    tiles aside), one per variant, dtype and SRAM budget M."""
    counted = [r for r in records if r["stage"] == stage and r.get("io_counted_bytes") is not None]
    if not counted:
        return None, []
    big = shape_fields(max(counted, key=lambda r: r.get("flops") or 0)["shape"])
    cell = {k: big[k] for k in ("B", "H", "N", "d", "causal") if k in big}
    picks = OrderedDict()
    for r in counted:
        f = shape_fields(r["shape"])
        if all(f.get(k) == v for k, v in cell.items()):
            picks.setdefault((r["variant"], r["dtype"], f.get("M")), r)
    return cell, list(picks.items())


def plot_counted_io(records, out):
    """Stages 05 on without a GPU: the model's bytes and the CPU count of every variant, at the
    largest problem counted, one panel per stage."""
    panels = [(stage,) + counted_picks(records, stage) for stage in cpu_only_stages(records)]
    panels = [p for p in panels if p[2]]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 4.4 * len(panels)), squeeze=False)
    for ax, (stage, cell, picks) in zip(axes[:, 0], panels):
        width = 0.38
        for k, (label, key, color) in enumerate([("model", "io_model_bytes", "tab:blue"),
                                                  ("counted (CPU)", "io_counted_bytes", "tab:cyan")]):
            vals = [r.get(key) or math.nan for _, r in picks]
            xs = [i + (k - 0.5) * width for i in range(len(picks))]
            bars = ax.bar(xs, vals, width, color=color, label=label)
            for b, v in zip(bars, vals):
                if not math.isnan(v):
                    ax.annotate(fmt_bytes(v), (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                                fontsize=6, rotation=90)
        ax.set_xticks(range(len(picks)))
        ax.set_xticklabels([f"{v}\n{t}" + (f"\nM={m}" if m else "") for (v, t, m), _ in picks], fontsize=7)
        values = [r.get(k) for _, r in picks for k in ("io_model_bytes", "io_counted_bytes") if r.get(k)]
        ax.set_yscale("log")
        ax.set_ylim(min(values) / 4, max(values) * 8)  # every bar visible, room for the labels
        ax.set_ylabel("bytes read + written")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
        ax.set_title(f"{stage}: " + " ".join(f"{k}={v}" for k, v in cell.items()))
    fig.suptitle("Bytes between the SMs and L2: the model and the CPU count (no GPU: no time, no counters)")
    # A tall figure: keep half an inch at the top for the title, clear of the first panel's own.
    return save_figure(fig, out, "attention_counted_io.png", rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))


def figure_notes(records):
    """Lines for summary.md that say why figures are missing."""
    notes = []
    if plt is None:
        notes.append("No figures: this Python has no matplotlib (install python3-matplotlib).")
    for stage in cpu_only_stages(records):
        why = " (its kernels run on a Hopper GPU alone, sm_90)" if stage in (FLASH_V3, FP8) else ""
        if counted_picks(records, stage)[1]:
            notes.append(f"{stage}: no GPU rows{why}, so no figure of speed or measured traffic; "
                         "attention_counted_io.png shows the model and the CPU count at the largest problem "
                         "counted.")
        else:
            notes.append(f"{stage}: no GPU rows{why}, and no problem small enough to count on the CPU "
                         "(--count-limit): no figure.")
    notes += flash_v3_notes(records)
    if not notes:
        return ""
    return "\n### Figures not drawn\n\n" + "".join(f"- {n}\n" for n in notes)


def backward_tables(records):
    """Stage 07's tables for summary.md: the backward ladder in every cell (with the deterministic
    variants' cost), and Fig. 2."""
    recs = attention_records(records, stage=BACKWARD)
    names = ["standard"] + BWD_RUNGS + ["pytorch_flash_bwd", "pytorch_cudnn_bwd"]
    rows = []
    for dtype in ("fp16", "bf16"):
        for c in ladder_cells(recs, dtype):
            v = {n: v2_value(recs, n, dtype, **cell_fields(c)) for n in names}
            d, causal, N, B, H = c
            fast = max((n for n in BWD_FASTEST if v[n] is not None), key=lambda n: v[n], default=None)
            best, det = (v[fast], v[fast + "_deterministic"]) if fast else (None, None)
            rows.append([dtype, str(d), str(causal), str(N), str(B), str(H)] + [fmt(v[n], ".1f") for n in names] +
                        [fast or "n/a", fmt(ratio(best, v["pytorch_flash_bwd"]), ".2f"),
                         fmt(ratio(best, v["pytorch_cudnn_bwd"]), ".2f"), fmt(ratio(det, best), ".2f")])
    ladder = md_table(f"Stage 07 backward ladder: TFLOP/s, B·N = {LADDER_TOKENS}, H·d = {LADDER_WIDTH} "
                      "(pytorch_flash_bwd is FlashAttention-2's backward; fastest: the faster of "
                      f"{' and '.join(BWD_FASTEST)}, whose deterministic form is set against it)",
                      ["dtype", "d", "causal", "N", "B", "H"] + names +
                      ["fastest", "fastest / FA-2", "fastest / cuDNN", "deterministic / atomic"], rows)
    fig2 = []
    for v, label in FIG2_RUNS + [(n, n) for n in ("standard", "wide", "wide_deterministic", "pytorch_flash_bwd",
                                                  "pytorch_cudnn_bwd", "pytorch_math_bwd")]:
        r = v2_find(recs, v, "fp16", need="ms", **FIG2)
        if r:
            fig2.append([v, fmt(r.get("ms"), ".2f"), fmt(r.get("tflops"), ".1f"), fmt_bytes(r.get("io_model_bytes")),
                         fmt_bytes(add(r.get("l2_read_bytes"), r.get("l2_write_bytes"))),
                         fmt_bytes(add(r.get("dram_read_bytes"), r.get("dram_write_bytes"))),
                         fmt_bytes(r.get("peak_mem_bytes"))])
    shape = " ".join(f"{k}={v}" for k, v in FIG2.items())
    fig2_table = md_table(f"Fig. 2, fp16, {shape} (_fwdbwd: forward + backward; the rest: backward alone)",
                          ["variant", "ms", "TFLOP/s", "model", "SM↔L2", "DRAM", "peak memory"], fig2)
    return "".join("\n" + t for t in (ladder, fig2_table) if t)


def ladder_table(recs):
    rows = []
    for dtype in ("fp16", "bf16"):
        for c in ladder_cells(recs, dtype):
            v = {n: v2_value(recs, n, dtype, **cell_fields(c)) for n in RUNGS + PEERS_V2}
            d, causal, N, B, H = c
            rows.append([dtype, str(d), str(causal), str(N), str(B), str(H)] +
                        [fmt(v[n], ".1f") for n in RUNGS + PEERS_V2] +
                        [fmt(ratio(v["tuned"], v["pytorch_flash"]), ".2f"),
                         fmt(ratio(v[BEST_V2], v["pytorch_flash"]), ".2f"),
                         fmt(ratio(v[BEST_V2], v["pytorch_cudnn"]), ".2f")])
    return md_table(f"Stage 06 ladder: TFLOP/s, B·N = {LADDER_TOKENS}, H·d = {LADDER_WIDTH} "
                    "(pytorch_flash is FlashAttention-2)",
                    ["dtype", "d", "causal", "N", "B", "H"] + RUNGS + PEERS_V2 +
                    ["tuned / FA-2", f"{BEST_V2} / FA-2", f"{BEST_V2} / cuDNN"], rows)


def triton_table(recs):
    want = dict(TRITON_SHAPE)
    ns = sorted({int(r["fields"]["N"]) for r in recs if r["dtype"] == "fp16" and r.get("tflops") is not None
                 and r["variant"] == "triton_fa2"
                 and all(r["fields"].get(k) == str(v) for k, v in want.items())})
    rows = []
    for n in ns:
        v = {name: v2_value(recs, name, "fp16", N=n, **want)
             for name in ("triton_fa2", "pytorch_flash", BEST_V2, "pytorch_cudnn")}
        rows.append([str(n)] + [fmt(x, ".1f") for x in v.values()] +
                    [fmt(ratio(v["triton_fa2"], v["pytorch_flash"]), ".2f"),
                     fmt(ratio(v[BEST_V2], v["pytorch_flash"]), ".2f")])
    shape = " ".join(f"{k}={v}" for k, v in want.items())
    return md_table(f"Triton vs FA-2: TFLOP/s, fp16, {shape}",
                    ["N", "triton_fa2", "pytorch_flash (FA-2)", f"{BEST_V2} (ours)", "pytorch_cudnn",
                     "triton / FA-2", f"{BEST_V2} / FA-2"], rows)


def fp32_table(recs):
    names = ["flash_v1", "flash_v2", "pytorch_efficient", "pytorch_math"]
    rows = []
    for f in (BIG, LONG):
        got = {n: v2_find(recs, n, "fp32", **f) for n in names}
        if not any(got.values()):
            continue
        cells = [f"{r['tflops']:.2f} ({r['ms']:.2f})" if r else "n/a" for r in got.values()]
        speedup = ratio(*(got[n]["tflops"] if got[n] else None for n in ("flash_v2", "flash_v1")))
        rows.append([str(f[k]) for k in ("B", "H", "N", "d", "causal")] + cells + [fmt(speedup, ".2f")])
    return md_table("fp32: TFLOP/s (ms)", ["B", "H", "N", "d", "causal"] + names + ["flash_v2 / flash_v1"],
                    rows)


def flash_v2_tables(records):
    """Stage 06's tables for summary.md: the ladder, Triton against FA-2, fp32."""
    recs = attention_records(records, stage=FLASH_V2)
    parts = [t for t in (ladder_table(recs), triton_table(recs), fp32_table(recs)) if t]
    return "".join("\n" + t for t in parts)
