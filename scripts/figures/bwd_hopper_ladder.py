"""Stage 11's ladder in one figure (docs/figures/bwd_hopper_ladder.png), from the committed H200 run
(docs/results/h200/stage11/run_2026-12-03e/a/bench.csv, fp16): TFLOP/s of stage 07's fastest and of
each rung as bars, cuDNN's backward as a black line over each group; a panel for each d."""
import csv
import os
import statistics

from common import BLUE, EIGHT, GREY, ROOT, plt, save

CSV = os.path.join(ROOT, "docs", "results", "h200", "stage11", "run_2026-12-03e", "a", "bench.csv")
RUNGS = ["07", "wgmma", "tma", "warp_specialized", "bulk_dq", "one_dq", "deterministic"]
LABELS = {"07": "stage 07's fastest", "wgmma": "1 wgmma", "tma": "2 tma", "warp_specialized": "3 warp_specialized",
          "bulk_dq": "4 bulk_dq", "one_dq": "5 one_dq", "deterministic": "6 deterministic"}
COLOURS = [GREY, EIGHT[1], EIGHT[2], EIGHT[3], EIGHT[4], BLUE, EIGHT[5]]
PEER = "pytorch_cudnn_bwd"


def main():
    tf = {}
    for r in csv.DictReader(open(CSV)):
        if not r["tflops"] or r["dtype"] != "fp16":
            continue
        f = dict(x.split("=") for x in r["shape"].split() if "=" in x)
        variant = "07" if r["variant"] in ("07_wide", "07_split") else r["variant"]
        tf.setdefault((variant, (int(f["d"]), f["causal"] == "1", int(f["N"]))), []).append(float(r["tflops"]))
    top = 1.3 * max(statistics.median(v) for v in tf.values())
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    width = 0.8 / len(RUNGS)
    for ax, d in zip(axes, (64, 128)):
        cells = sorted({c for _, c in tf if c[0] == d}, key=lambda c: (c[1], c[2]))
        for k, rung in enumerate(RUNGS):
            xs = [i + (k - len(RUNGS) / 2 + 0.5) * width for i, c in enumerate(cells) if (rung, c) in tf]
            ys = [statistics.median(tf[(rung, c)]) for c in cells if (rung, c) in tf]
            ax.bar(xs, ys, width, color=COLOURS[k], label=LABELS[rung])
        for i, c in enumerate(cells):
            if (PEER, c) in tf:
                ax.hlines(statistics.median(tf[(PEER, c)]), i - 0.45, i + 0.45, colors="black", linewidth=2,
                          label="cuDNN's backward" if i == 0 else None)
        ax.set_xticks(range(len(cells)), [f"{'causal' if c else 'full'}\nN = {N}" for _, c, N in cells], fontsize=9)
        ax.set_title(f"d = {d}, H = {2048 // d}")
        ax.set_ylim(0, top)
        ax.legend(ncol=3, fontsize=8, frameon=False, loc="upper left")
    axes[0].set_ylabel("TFLOP/s (backward: 2.5 × the forward's FLOPs)")
    fig.suptitle("Stage 11's ladder on an NVIDIA H200 (fp16, B·N = 16384; event times, one round)", fontweight="bold")
    fig.tight_layout()
    save(fig, "bwd_hopper_ladder.png")


if __name__ == "__main__":
    main()
