"""Stage 09's ladder in one figure (docs/figures/fp8_ladder.png), from the committed H200 run
(docs/results/h200/issue57/stage09/ladder.csv): TFLOP/s of each rung (per tensor) and of stage 08's
last rung, the medians of the rounds, one group of bars a cell."""
import csv
import os
import statistics

from common import BLUE, EIGHT, GREY, ROOT, plt, save

CSV = os.path.join(ROOT, "docs", "results", "h200", "issue57", "stage09", "ladder.csv")
RUNGS = ["08_tuned", "e4m3", "row_sum", "wide", "tile_overlap", "tile_start", "epilogue", "lin"]
LABELS = {"08_tuned": "stage 08 tuned (fp16)", "e4m3": "1 e4m3", "row_sum": "2 row_sum", "wide": "3 wide",
          "tile_overlap": "4 tile_overlap", "tile_start": "5 tile_start", "epilogue": "6 epilogue", "lin": "7 lin"}


def main():
    tf = {}
    for r in csv.DictReader(open(CSV)):
        if not r["tflops"]:
            continue
        f = dict(x.split("=") for x in r["shape"].split() if "=" in x)
        cell = (int(f["d"]), f["causal"] == "1", int(f["N"]))
        tf.setdefault((r["variant"].split(".")[0], cell), []).append(float(r["tflops"]))
    cells = sorted({c for _, c in tf}, key=lambda c: (-c[0], c[1], c[2]))
    fig, ax = plt.subplots(figsize=(13, 4.8))
    width = 0.8 / len(RUNGS)
    colours = [GREY] + [EIGHT[1 + k] for k in range(len(RUNGS) - 2)] + [BLUE]  # rungs 1-6, then the last
    for k, rung in enumerate(RUNGS):
        xs, ys = [], []
        for i, c in enumerate(cells):
            if (rung, c) in tf:
                xs.append(i + (k - len(RUNGS) / 2 + 0.5) * width)
                ys.append(statistics.median(tf[(rung, c)]))
        ax.bar(xs, ys, width, color=colours[k], label=LABELS[rung])
    ax.set_xticks(range(len(cells)),
                  [f"d = {d}{', causal' if c else ''}\nN = {N}" for d, c, N in cells], fontsize=9)
    ax.set_ylabel("TFLOP/s (4·B·H·N²·d / time, halved causal)")
    ax.legend(ncol=4, fontsize=8, frameon=False, loc="upper left")
    ax.set_ylim(0, 1.25 * max(statistics.median(v) for v in tf.values()))
    ax.set_title("Stage 09's ladder on an NVIDIA H200 (per tensor, fp16 out; B·N = 16384, H = 2048 / d)")
    fig.tight_layout()
    save(fig, "fp8_ladder.png")


if __name__ == "__main__":
    main()
