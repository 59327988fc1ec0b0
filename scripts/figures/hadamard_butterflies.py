"""Chapter 09's fast Walsh–Hadamard transform (docs/figures/hadamard_butterflies.png), drawn for
d = 8: log₂ d rounds of butterflies (a, b) → (a + b, a − b) at strides 1, 2, 4 (fp8.hpp's fwht, in the
same order), on a row with one outlier channel, after the random signs; the last column is the
transformed row over √d, as M = H·diag(σ)/√d gives it. Laid over 4 lanes, 2 values a lane (as
fwht_quad lays d = 128 over 4 lanes, 32 a lane), the stride-1 round runs in each lane's registers
and the last two take a shuffle between lanes each."""
import math

import matplotlib.pyplot as plt

from common import BLUE, GREY, ORANGE, VERMILION, box, save, tint

D = 8
ROW = [0.3, -0.2, 0.1, 8.0, 0.2, -0.1, 0.4, 0.05]  # channel 3: the outlier
SIGNS = [1, -1, 1, 1, -1, 1, -1, -1]


def main():
    cols = [[x * s for x, s in zip(ROW, SIGNS)]]
    stride = 1
    while stride < D:
        x = list(cols[-1])
        for i in range(D):
            if not i & stride:
                x[i], x[i + stride] = x[i] + x[i + stride], x[i] - x[i + stride]
        cols.append(x)
        stride *= 2
    cols.append([v / math.sqrt(D) for v in cols[-1]])
    fig, ax = plt.subplots(figsize=(12, 6.2))
    ax.set_axis_off()
    xs = [0, 3, 6, 9, 12.2]
    heads = ["σ·q (signs)", "stride 1\n(in registers)", "stride 2\n(a shuffle)", "stride 4\n(a shuffle)", "÷ √8"]
    top = max(abs(v) for c in cols for v in c)
    for k, (x, col) in enumerate(zip(xs, cols)):
        for i, v in enumerate(col):
            colour = VERMILION if abs(v) > 2.5 else BLUE
            box(ax, x, i, 1.6, 0.8, face=tint(colour, 0.25 + 0.6 * abs(v) / top), edge="white")
            ax.text(x + 0.8, i + 0.4, f"{v:+.2f}", ha="center", va="center", fontsize=9)
        ax.text(x + 0.8, -0.5, heads[k], ha="center", va="bottom", fontsize=10)
    for k in range(3):  # butterflies between columns k and k + 1
        s = 1 << k
        for i in range(D):
            partner = i ^ s
            ax.plot([xs[k] + 1.6, xs[k + 1]], [i + 0.4, partner + 0.4], color=ORANGE if i & s else GREY,
                    linewidth=1.0)
            ax.plot([xs[k] + 1.6, xs[k + 1]], [i + 0.4, i + 0.4], color=ORANGE if i & s else GREY, linewidth=1.0)
    for i in range(D):
        ax.text(-0.3, i + 0.4, f"channel {i}  (lane {i // 2})", ha="right", va="center", fontsize=9)
        ax.plot([xs[3] + 1.6, xs[4]], [i + 0.4, i + 0.4], color=GREY, linewidth=0.8, linestyle=":")
    ax.text(6.8, D + 0.6, "Each round takes pairs (a, b) at the stride to (a + b, a − b): grey lines carry a, orange lines b.\n"
            "The outlier (channel 3, 8.0) ends up spread over all 8 channels at ±8/√8 ≈ ±2.8, so a scale taken\n"
            "over the row no longer sits on one channel; Q·Kᵀ is unchanged since M is orthogonal.",
            ha="center", va="top", fontsize=10)
    ax.set_xlim(-3.6, 14.2)
    ax.set_ylim(D + 2.6, -1.4)
    ax.set_title("The fast Walsh–Hadamard transform of one row, d = 8: log₂ d rounds of butterflies")
    save(fig, "hadamard_butterflies.png")


if __name__ == "__main__":
    main()
