"""FlashAttention-1's and FlashAttention-2's loop orders over the blocks of S = Q·Kᵀ, for one head.

FA-1 (Algorithm 1 of the paper; 05_flash_v1/kernels.cu, one thread block per head): the outer loop
walks the key blocks j, holding K_j and V_j on chip; the inner loop walks the query blocks i and
reads Q_i, O_i, l_i, m_i from memory and writes O_i, l_i, m_i back at every step.
FA-2 (06_flash_v2: one thread block per query block i and head): the outer loop is over i (across
thread blocks, in parallel), Q_i and the unnormalised o_i, m_i, l_i stay on chip, the inner loop
streams K_j and V_j past them, and O_i = o_i / l_i and L_i are written once, at the end.
Bytes per head (the models of chapters 05 and 06, N much larger than the blocks):
FA-1 ~ 12·N²·d/Bc in fp32; FA-2 ~ 2·e·N²·d/Br with e bytes per element.
"""
import matplotlib.pyplot as plt

from common import BLUE, GREEN, ORANGE, PURPLE, arrow, box, save, tint

T = 4  # blocks per side in the drawing (Tr = Tc = 4)
CELL = 1.0
ON_CHIP, STREAMED = GREEN, ORANGE


def panel(ax, fa2):
    ax.set_xlim(-2.2, T + 2.5)
    ax.set_ylim(T + 3.3, -1.9)
    ax.set_aspect("equal")
    ax.set_axis_off()
    cur_i, cur_j = (1, 2) if fa2 else (2, 1)  # the step the panel highlights (0-based)
    # Key blocks on top (K_j and V_j), query blocks on the left (Q_i), outputs on the right (O_i).
    for j in range(T):
        face = "white"
        if j == cur_j:
            face = tint(STREAMED if fa2 else ON_CHIP, 0.7)
        box(ax, j, -1.3, CELL, 1.0, face=face, edge="black")
        ax.text(j + 0.5, -0.8, f"$K_{j + 1}$\n$V_{j + 1}$", ha="center", va="center", fontsize=11)
    for i in range(T):
        face = "white"
        if i == cur_i:
            face = tint(ON_CHIP if fa2 else STREAMED, 0.7)
        box(ax, -1.3, i, 1.0, CELL, face=face, edge="black")
        ax.text(-0.8, i + 0.5, f"$Q_{i + 1}$", ha="center", va="center", fontsize=11)
        box(ax, T + 0.3, i, 1.25, CELL, face=face, edge="black")
        out = f"$O_{i + 1}$, $L_{i + 1}$" if fa2 else f"$O_{i + 1}$\n$l_{i + 1}, m_{i + 1}$"
        ax.text(T + 0.925, i + 0.5, out, ha="center", va="center", fontsize=10)
    ax.text(T / 2, -1.55, "keys →  (Bc a block)", ha="center", va="bottom", fontsize=10)
    ax.text(-1.55, T / 2, "queries →  (Br a block)", ha="center", va="center", rotation=-90,
            fontsize=10)
    # The blocks of S, numbered in the order one thread block visits them.
    for i in range(T):
        for j in range(T):
            order = i * T + j + 1 if fa2 else j * T + i + 1
            face = tint(PURPLE, 0.55) if (i, j) == (cur_i, cur_j) else tint(BLUE, 0.08)
            box(ax, j, i, CELL, CELL, face=face, edge="#888888")
            if fa2:
                label = str(j + 1)  # each row is its own thread block
            else:
                label = str(order)
            ax.text(j + 0.5, i + 0.5, label, ha="center", va="center", fontsize=11,
                    weight="bold" if (i, j) == (cur_i, cur_j) else "normal")
    ax.text(T / 2, T + 0.15, "$S_{ij} = Q_i K_j^T$, $\\tilde P_{ij}$: on chip only, never written",
            ha="center", va="top", fontsize=10)
    # The path of the loops.
    if fa2:
        for i in range(T):
            arrow(ax, 0.12, i + 0.85, T - 0.12, i + 0.85, colour=PURPLE, lw=1.3, scale=10)
    else:
        for j in range(T):
            arrow(ax, j + 0.85, 0.12, j + 0.85, T - 0.12, colour=PURPLE, lw=1.3, scale=10)
    # Legends for the colours, and the loop nest.
    if fa2:
        title = "FlashAttention-2: Q outer, K/V inner"
        lines = [
            (ON_CHIP, "$Q_i$; $o_i$, $m_i$, $l_i$ on chip for the whole row;\n"
                      "$O_i = o_i / l_i$ and $L_i$ written once, at the end"),
            (STREAMED, "$K_j$, $V_j$ loaded at every step"),
        ]
        loops = ("for i in 1 … Tr  (a thread block each, in parallel)\n"
                 "    for j in 1 … Tc  (numbers: j)")
        bytes_ = ("per head: Q read once, O and L written once,\n"
                  "K and V read Tr times:  ≈ 2·e·N²·d / Br bytes")
    else:
        title = "FlashAttention-1: K/V outer, Q inner"
        lines = [
            (ON_CHIP, "$K_j$, $V_j$ on chip for the whole column"),
            (STREAMED, "$Q_i$, $O_i$, $l_i$, $m_i$ read, and $O_i$, $l_i$, $m_i$\n"
                       "written back, at every step"),
        ]
        loops = ("for j in 1 … Tc  (one thread block per head)\n"
                 "    for i in 1 … Tr  (numbers: the order of the steps)")
        bytes_ = ("per head: K and V read once, Q read Tc times, O, l, m\n"
                  "written Tc times and read Tc − 1:  ≈ 12·N²·d / Bc bytes (fp32)")
    ax.set_title(title, loc="left", fontsize=13)
    y = T + 0.85
    ax.text(-2.2, y, loops, va="top", family="DejaVu Sans Mono", fontsize=9.5)
    y += 1.05
    for colour, text in lines:
        box(ax, -2.2, y, 0.35, 0.35, face=tint(colour, 0.7), edge="black")
        ax.text(-1.7, y + 0.175, text, va="center", fontsize=10)
        y += 0.75
    ax.text(-2.2, y, bytes_, va="top", fontsize=10)


def main():
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 7.4))
    panel(axes[0], fa2=False)
    panel(axes[1], fa2=True)
    fig.subplots_adjust(wspace=0.05, left=0.01, right=0.99, top=0.95, bottom=0.01)
    save(fig, "loop_orders.png")


if __name__ == "__main__":
    main()
