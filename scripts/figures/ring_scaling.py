"""Stage 10's scaling on two H200s, from the committed CSVs of docs/results/h200x2/stage10/.

Scaling = single / (G x ring): `single` is stage 08's last rung on the whole sequence on one GPU,
`ring` the time of the ring on G = 2 GPUs (the rows of 10_ring_attention, median of the timed
reps). 100% would be two GPUs twice as fast as one. Two runs: scaling_8k_32k.csv (N = 8192,
16384, 32768; NCCL only) and scaling_16k_64k_peer.csv (N = 16384 and 65536; NCCL and the copy
engines' peer copies). One line a variant, through run 1's points and run 2's, the marker saying
which run; N = 16384 is in both, and the line goes through run 2's (the run of the 64k point), run
1's left as a marker beside it. The *_compute rows (the same ring with nothing sent) are the
ceiling the transfers are measured against.
"""
import csv
import os

import matplotlib.pyplot as plt

from common import BLUE, GREY, ORANGE, ROOT, save

DATA = os.path.join(ROOT, "docs", "results", "h200x2", "stage10")
RUNS = (("scaling_8k_32k.csv", "o", "run 1 (8k–32k)"), ("scaling_16k_64k_peer.csv", "s", "run 2 (16k, 64k)"))
G = 2
LINES = (("ring", BLUE, "-", "plain ring, NCCL"), ("zigzag", ORANGE, "-", "zigzag, NCCL"),
         ("ring_peer", BLUE, ":", "plain ring, peer copies"),
         ("zigzag_peer", ORANGE, ":", "zigzag, peer copies"),
         ("ring_compute", BLUE, "--", "plain ring, nothing sent"),
         ("zigzag_compute", ORANGE, "--", "zigzag, nothing sent"))


def read(name):
    """{(N, causal): {variant: ms}}"""
    out = {}
    with open(os.path.join(DATA, name), newline="") as f:
        for row in csv.DictReader(f):
            items = dict(x.split("=", 1) for x in row["shape"].split() if "=" in x)
            out.setdefault((int(items["N"]), int(items["causal"])), {})[row["variant"]] = float(row["ms"])
    return out


def main():
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    runs = [(read(name), marker) for name, marker, _ in RUNS]
    for causal, ax in enumerate(axes):
        for variant, colour, style, _ in LINES:
            line = {}  # N -> (scaling, marker); a later run's point replaces an earlier one's
            for data, marker in runs:
                for (N, c), row in sorted(data.items()):
                    if c == causal and variant in row:
                        point = (100 * row["single"] / (G * row[variant]), marker)
                        if N in line:  # the earlier run's point, as a marker alone
                            ax.plot([N], [line[N][0]], linestyle="none", color=colour, marker=line[N][1],
                                    markersize=6, markerfacecolor="white" if style == "--" else colour)
                        line[N] = point
            Ns = sorted(line)
            if not Ns:
                continue
            ax.plot(Ns, [line[N][0] for N in Ns], linestyle=style, color=colour, linewidth=1.6)
            for N in Ns:
                ax.plot([N], [line[N][0]], linestyle="none", color=colour, marker=line[N][1], markersize=6,
                        markerfacecolor="white" if style == "--" else colour)
        ax.axhline(100, color=GREY, linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks([8192, 16384, 32768, 65536])
        ax.set_xticklabels(["8k", "16k", "32k", "64k"])
        ax.set_xlabel("N, the whole sequence (B = 1, H = 16, d = 128, fp16)")
        ax.set_ylim(20, 102)
        ax.grid(True, axis="y", color="#DDDDDD")
        ax.set_title("causal" if causal else "not causal", loc="left")
    axes[0].set_ylabel("scaling: single / (2 × ring), %")
    handles = [plt.Line2D([], [], color=c, linestyle=s, linewidth=1.6) for _, c, s, _ in LINES]
    labels = [label for *_, label in LINES]
    handles += [plt.Line2D([], [], color="black", marker=m, linestyle="none") for _, m, _ in RUNS]
    labels += [label for *_, label in RUNS]
    for ax in axes:  # a legend in each panel
        ax.legend(handles, labels, loc="lower right", ncol=2, fontsize=8, frameon=True, framealpha=0.9)
    fig.suptitle("Ring attention on two H200s (NVLink, NV18): the ring's speed against stage 08 on "
                 "one GPU", x=0.01, ha="left", fontsize=12)
    fig.subplots_adjust(left=0.07, right=0.99, top=0.87, bottom=0.14, wspace=0.05)
    save(fig, "ring_scaling.png")


if __name__ == "__main__":
    main()
