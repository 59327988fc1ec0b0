"""The course's climb in one figure (docs/figures/climb.png), from the committed H100 run
(docs/results/h100/results.csv): attention forward, d = 64, N = 4096, not causal, B·N = 16384 (fp32
rows: B = 8, H = 32), each stage's kernels as they climb and the libraries a reader would otherwise
use. Left, TFLOP/s; right, the bytes read from DRAM a head, where the climb started."""
import csv
import os

from common import BLUE, GREEN, GREY, ORANGE, PURPLE, ROOT, VERMILION, plt, save

CSV = os.path.join(ROOT, "docs", "results", "h100", "results.csv")
CELL = {"N": "4096", "d": "64", "causal": "0"}
# (stage, variant, label, colour): ours in the order of the course, then the peers.
OURS = [("05_flash_v1", "standard", "05 standard\n(S, P in DRAM), fp32", VERMILION),
        ("05_flash_v1", "flash_v1", "05 FA-1, fp32", ORANGE),
        ("06_flash_v2", "flash_v2", "06 FA-2, fp32", GREEN),
        ("06_flash_v2", "mma", "06 tensor cores\n(mma), fp16", GREEN),
        ("06_flash_v2", "lazy_rescale", "06 last rung, fp16", GREEN),
        ("08_flash_v3", "wgmma", "08 wgmma, fp16", BLUE),
        ("08_flash_v3", "tuned", "08 last rung, fp16", BLUE),
        ("09_flash_v3_fp8", "fp8_per_tensor", "09 FP8 (e4m3)", PURPLE)]
PEERS = [("05_flash_v1", "pytorch_math", "PyTorch math, fp32"),
         ("05_flash_v1", "pytorch_efficient", "PyTorch mem-efficient, fp32"),
         ("08_flash_v3", "pytorch_flash", "FlashAttention-2 (SDPA), fp16"),
         ("08_flash_v3", "pytorch_cudnn", "cuDNN (SDPA), fp16")]


def rows():
    out = {}
    for r in csv.DictReader(open(CSV)):
        f = dict(x.split("=") for x in r["shape"].split() if "=" in x)
        if all(f.get(k) == v for k, v in CELL.items()) and r["tflops"] and r["round"] in ("", "1"):
            out.setdefault((r["stage"], r["variant"]), (r, f))
    return out


def main():
    got = rows()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw={"width_ratios": [3, 2]})
    labels, tf, dram, colours = [], [], [], []
    for stage, variant, label, colour in OURS:
        r, f = got[(stage, variant)]
        labels.append(label)
        tf.append(float(r["tflops"]))
        heads = int(f["B"]) * int(f["H"])
        dram.append(float(r["dram_read_bytes"]) / heads / 2**20 if r["dram_read_bytes"] else float("nan"))
        colours.append(colour)
    x = range(len(labels))
    ax.bar(x, tf, color=colours)
    for i, v in enumerate(tf):
        ax.text(i, v * 1.05, f"{v:.0f}", ha="center", va="bottom", fontsize=9)
    for (stage, variant, label), ls in zip(PEERS, (":", "-.", "--", "-")):
        v = float(got[(stage, variant)][0]["tflops"])
        ax.axhline(v, color=GREY, ls=ls, lw=1.2, label=f"{label}: {v:.0f}")
    ax.set_yscale("log")
    ax.set_ylim(10, 2000)
    ax.set_xticks(list(x), labels, rotation=35, ha="right", fontsize=9)
    ax.set_ylabel("TFLOP/s (4·B·H·N²·d / time)")
    ax.set_title("Speed")
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    bx.bar(x, dram, color=colours)
    for i, v in enumerate(dram):
        bx.text(i, v * 1.1, f"{v:.3g}", ha="center", va="bottom", fontsize=8)
    bx.set_yscale("log")
    bx.set_xticks(list(x), labels, rotation=35, ha="right", fontsize=9)
    bx.set_ylabel("MiB read from DRAM a head (measured)")
    bx.set_title("Bytes")
    fig.suptitle("Attention forward on an NVIDIA H100 (d = 64, N = 4096, not causal): the course's climb",
                 fontweight="bold")
    fig.tight_layout()
    save(fig, "climb.png")


if __name__ == "__main__":
    main()
