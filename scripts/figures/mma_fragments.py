"""The register fragments of mma.sync.m16n8k16 (fp16/bf16 in, fp32 accumulators), lane by lane,
and how two accumulator tiles of S = Q·Kᵀ become the A operand of P̃·V.

A lane is g = lane / 4 (its group: a row) and t = lane % 4 (a pair of columns). From the comment
at the top of 06_flash_v2/ptx.cuh (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
  A 16 x 16:  a0 = A[g][2t, 2t+1]  a1 = A[g+8][2t, 2t+1]  a2 = A[g][2t+8, 2t+9]  a3 = A[g+8][2t+8, 2t+9]
  B 16 x 8:   b0 = B[2t, 2t+1][g]  b1 = B[2t+8, 2t+9][g]
  C 16 x 8:   c0, c1 = C[g][2t, 2t+1]  c2, c3 = C[g+8][2t, 2t+1]
Each register of A and B holds two 16-bit values; C holds four floats. 06_flash_v2/tc_common.cuh's
pack_a turns the C tiles 2k and 2k+1 of S into step k's A fragment of P̃·V:
  a0 = pack(C[2k][0], C[2k][1])      a1 = pack(C[2k][2], C[2k][3])
  a2 = pack(C[2k+1][0], C[2k+1][1])  a3 = pack(C[2k+1][2], C[2k+1][3])
Writes mma_fragments.png (A, B, C) and s_to_p_fragments.png (the repacking).
"""
import matplotlib.pyplot as plt

from common import BLUE, GREEN, ORANGE, PURPLE, box, save, tint

REG = [BLUE, ORANGE, GREEN, PURPLE]  # register 0, 1, 2, 3 of a fragment
LANE = 5  # the lane drawn with a heavy outline: g = 1, t = 1


def lane_cell(ax, x, y, w, h, lane, colour, text=None):
    box(ax, x, y, w, h, face=tint(colour, 0.45), edge="white", lw=0.8)
    if lane == LANE:
        box(ax, x + 0.04, y + 0.04, w - 0.08, h - 0.08, face="none", edge="black", lw=2.2)
    ax.text(x + w / 2, y + h / 2, text if text is not None else str(lane), ha="center",
            va="center", fontsize=8.5, weight="bold" if lane == LANE else "normal")


def a_fragment(ax, x0, y0, regs=(0, 1, 2, 3)):
    """A (16 x 16): lane (g, t) holds the pairs (g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8)."""
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r, (row, col) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8),
                                        (g + 8, 2 * t + 8)]):
            lane_cell(ax, x0 + col, y0 + row, 2, 1, lane, REG[regs[r]])


def b_fragment(ax, x0, y0):
    """B (16 x 8, k x n): lane (g, t) holds the pairs (2t, g) and (2t+8, g), down a column."""
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r, row in enumerate([2 * t, 2 * t + 8]):
            lane_cell(ax, x0 + g, y0 + row, 1, 2, lane, REG[r])


def c_fragment(ax, x0, y0, regs=(0, 1)):
    """C (16 x 8): lane (g, t) holds (g, 2t), (g, 2t+1) in c0, c1 and the same of row g+8 in c2, c3."""
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r, row in enumerate([g, g + 8]):
            lane_cell(ax, x0 + 2 * t, y0 + row, 2, 1, lane, REG[regs[r]])


def frame(ax, x0, y0, w, h, name, rows, cols):
    box(ax, x0, y0, w, h, face="none", edge="black", lw=1.5)
    ax.plot([x0, x0 + w], [y0 + 8, y0 + 8], color="black", lw=1.0)
    ax.text(x0 + w / 2, y0 - 1.5, name, ha="center", va="bottom", fontsize=13, weight="bold")
    for c in range(0, w + 1, 2 if w > 8 else 1):
        if c < w:
            ax.text(x0 + c + 0.5, y0 - 0.25, str(c), ha="center", va="bottom", fontsize=7,
                    color="#555555")
    for r in range(h):
        ax.text(x0 - 0.2, y0 + r + 0.5, str(r), ha="right", va="center", fontsize=7,
                color="#555555")
    ax.text(x0 + w / 2, y0 - 0.95, cols, ha="center", va="bottom", fontsize=9, color="#555555")
    ax.text(x0 - 1.1, y0 + h / 2, rows, ha="right", va="center", fontsize=9, color="#555555",
            rotation=90)


def legend(ax, x, y, entries):
    for n, (colour, text) in enumerate(entries):
        box(ax, x, y + 1.15 * n, 0.9, 0.9, face=tint(colour, 0.45), edge="black", lw=0.6)
        ax.text(x + 1.3, y + 1.15 * n + 0.45, text, va="center", fontsize=10)


def fragments():
    fig, ax = plt.subplots(figsize=(12, 7.4))
    ax.set_axis_off()
    ax.set_aspect("equal")
    xa, xb, xc = 0, 21, 34
    a_fragment(ax, xa, 0)
    frame(ax, xa, 0, 16, 16, "A  (16 × 16)", "m (row)", "k (column)")
    b_fragment(ax, xb, 0)
    frame(ax, xb, 0, 8, 16, "B  (16 × 8)", "k (row)", "n (column)")
    c_fragment(ax, xc, 0)
    frame(ax, xc, 0, 8, 16, "C, D  (16 × 8)", "m (row)", "n (column)")
    ax.text(18.5, 8, "·", ha="center", va="center", fontsize=30)
    ax.text(31, 8, "+", ha="center", va="center", fontsize=22)
    legend(ax, xa, 17.3, [
        (REG[0], "a0 = A[g][2t, 2t+1]"),
        (REG[1], "a1 = A[g+8][2t, 2t+1]"),
        (REG[2], "a2 = A[g][2t+8, 2t+9]"),
        (REG[3], "a3 = A[g+8][2t+8, 2t+9]"),
    ])
    legend(ax, xb - 2, 17.3, [
        (REG[0], "b0 = B[2t, 2t+1][g]"),
        (REG[1], "b1 = B[2t+8, 2t+9][g]"),
    ])
    legend(ax, xc - 1, 17.3, [
        (REG[0], "c0, c1 = C[g][2t, 2t+1]"),
        (REG[1], "c2, c3 = C[g+8][2t, 2t+1]"),
    ])
    ax.text(xb - 2, 20.4,
            "Numbers: the lane holding the pair.\n"
            f"g = lane / 4, t = lane % 4; lane {LANE} (g = 1, t = 1) outlined.\n"
            "A and B registers: two 16-bit values each; C: four floats.",
            va="top", fontsize=10)
    ax.set_xlim(-3, 43)
    ax.set_ylim(22.6, -3.2)
    ax.set_title("mma.sync.aligned.m16n8k16: D = A·B + C, one warp, per lane", loc="left",
                 fontsize=13)
    save(fig, "mma_fragments.png")


def s_to_p():
    fig, ax = plt.subplots(figsize=(12, 7.0))
    ax.set_axis_off()
    ax.set_aspect("equal")
    xs, xa = 0, 25
    # Left: the accumulators of S tiles n = 2k and 2k+1, side by side (keys 16k .. 16k+15).
    c_fragment(ax, xs, 0, regs=(0, 1))
    c_fragment(ax, xs + 8, 0, regs=(2, 3))
    box(ax, xs, 0, 16, 16, face="none", edge="black", lw=1.5)
    ax.plot([xs + 8, xs + 8], [0, 16], color="black", lw=2.5)
    ax.plot([xs, xs + 16], [8, 8], color="black", lw=1.0)
    ax.text(xs + 4, -0.3, "S tile 2k (C layout)", ha="center", va="bottom", fontsize=10)
    ax.text(xs + 12, -0.3, "S tile 2k+1 (C layout)", ha="center", va="bottom", fontsize=10)
    ax.text(xs + 8, -1.6, "$S = QK^T$ accumulators (fp32)", ha="center", va="bottom", fontsize=13,
            weight="bold")
    # Right: the A operand of P̃·V, step k.
    a_fragment(ax, xa, 0)
    box(ax, xa, 0, 16, 16, face="none", edge="black", lw=1.5)
    ax.plot([xa + 8, xa + 8], [0, 16], color="black", lw=1.0)
    ax.plot([xa, xa + 16], [8, 8], color="black", lw=1.0)
    ax.text(xa + 8, -0.3, r"keys 16k … 16k+15 = the k of $\tilde P V$", ha="center", va="bottom",
            fontsize=10)
    ax.text(xa + 8, -1.6, "A operand of $\\tilde P V$ (16-bit)", ha="center", va="bottom",
            fontsize=13, weight="bold")
    for x in (xs, xa):
        ax.text(x - 0.4, 8, "16 query rows", ha="right", va="center", rotation=90, fontsize=10,
                color="#555555")
    # The arrow and the code that does it.
    ax.annotate("", xy=(xa - 1.3, 8), xytext=(xs + 16.5, 8),
                arrowprops=dict(arrowstyle="-|>", lw=2.5, color="black", mutation_scale=22))
    ax.text((xs + 16 + xa) / 2 - 0.4, 7.2,
            "$\\tilde P = \\exp(\\mathrm{scale}\\,(S - m))$,\nthen pack\n2 floats\n→ 1 register",
            ha="center", va="bottom", fontsize=10)
    ax.text(xs, 17.0, "pack_a (tc_common.cuh), in each lane, no data moves between lanes:",
            va="top", fontsize=10.5)
    legend(ax, xs, 18.2, [(REG[0], "a0 = pack(c0, c1 of tile 2k)"),
                          (REG[1], "a1 = pack(c2, c3 of tile 2k)")])
    legend(ax, xs + 16, 18.2, [(REG[2], "a2 = pack(c0, c1 of tile 2k+1)"),
                               (REG[3], "a3 = pack(c2, c3 of tile 2k+1)")])
    ax.text(xs, 21.0,
            "Same lane, same place: each lane already holds the values its A fragment needs, so "
            r"$\tilde P$ goes from" "\n"
            "accumulators to operand in registers and never touches shared memory.",
            va="top", fontsize=10.5)
    ax.set_xlim(-2, 42)
    ax.set_ylim(23.4, -3.2)
    save(fig, "s_to_p_fragments.png")


if __name__ == "__main__":
    fragments()
    s_to_p()
