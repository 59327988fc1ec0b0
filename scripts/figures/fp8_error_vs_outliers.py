"""Stage 09: the error of O against the size of the outliers, for each FP8 scheme and the 16-bit
reference, from docs/results/cpu/fp8_error_vs_outliers.csv (09_flash_v3_fp8 --outlier-sweep).

The inputs are FA-3's: Q, K, V drawn from N(0, 1), with 0.1% of the entries drawn from N(0, σ²)
instead; σ = 10 is the paper's setting. For each σ the program computes float64 attention, plain
attention in fp16, and plain FP8 attention for each scheme (the same roundings as the GPU kernel,
whose errors agree with it within 2% in the accuracy table), all on the CPU. Left: RMSE of O, as the
paper reports it. Right: the same divided by the rms of O itself, since V's outliers make O grow
with σ: the error as a share of what is being computed.
"""
import csv
import os

import matplotlib.pyplot as plt

from common import BLUE, GREY, ORANGE, GREEN, PURPLE, ROOT, save

DATA = os.path.join(ROOT, "docs", "results", "cpu", "fp8_error_vs_outliers.csv")
LINES = (("fp16", GREY, "-", "fp16 (plain)"),
         ("fp8_per_tensor", BLUE, "-", "FP8, per tensor"),
         ("fp8_per_block", BLUE, "--", "FP8, per block"),
         ("fp8_per_tensor_hadamard", ORANGE, "-", "FP8, per tensor + Hadamard"),
         ("fp8_per_block_hadamard", ORANGE, "--", "FP8, per block + Hadamard"))


def read():
    """{variant: [(sigma, rmse, rmse / rms of O)]} and the shape."""
    out, shape = {}, ""
    with open(DATA, newline="") as f:
        for row in csv.DictReader(f):
            out.setdefault(row["variant"], []).append(
                (float(row["sigma"]), float(row["rmse"]), float(row["rmse"]) / float(row["ref_rms"])))
            shape = row["shape"]
    return out, shape


def main():
    data, shape = read()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for k, ax in enumerate(axes):
        for variant, colour, style, label in LINES:
            pts = sorted(data[variant])
            ax.plot([p[0] for p in pts], [p[1 + k] for p in pts], color=colour, linestyle=style, marker="o",
                    markersize=4, linewidth=1.6, label=label)
        ax.axvline(10, color=GREEN, linewidth=1, linestyle=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("σ of the outliers (0.1% of the entries of Q, K, V)")
        ax.grid(True, which="major", color="#DDDDDD")
    axes[0].set_ylabel("RMSE of O against float64")
    axes[1].set_ylabel("RMSE of O / rms of O")
    axes[0].text(10.5, axes[0].get_ylim()[0] * 1.5, "FA-3's σ = 10", color=GREEN, fontsize=9)
    axes[0].legend(loc="upper left", frameon=False, fontsize=9)
    fig.suptitle(f"Error of O against the outliers' size ({shape}, CPU: plain attention in each format)",
                 fontsize=11, x=0.01, ha="left", color=PURPLE)
    save(fig, "fp8_error_vs_outliers.png")


if __name__ == "__main__":
    main()
