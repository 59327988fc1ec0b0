"""How the 4 warps of a thread block share one step (Q_i against K_j, V_j): split K against split Q.

Split K (FA-1's arrangement, as the FlashAttention-2 paper describes it): Q_i is read by every
warp, each warp takes Bc/4 of the keys (its columns of S_ij, its rows of V_j) and so computes a
partial row max, row sum and a partial O_i of the full Br x d; the four must be exchanged through
shared memory, with a barrier, and merged (rescaled and added) before the step is done.
Split Q (FA-2; stage 06's tensor-core rungs: 4 warps of 16 rows each, Br = Bc = 64): each warp
takes Br/4 rows of Q_i and all of K_j and V_j (read from shared memory by every warp); its rows
of S, P̃ and O are its own, a row's max and sum are reduced among the 4 lanes that hold it
(shuffles), and nothing is exchanged between warps.
"""
import matplotlib.pyplot as plt

from common import BLUE, GREEN, ORANGE, PURPLE, box, save, tint

WARPS = [BLUE, ORANGE, GREEN, PURPLE]
SHARED = "#D9D9D9"


def matrix(ax, x, y, name, dims, split):
    """A 1 x 1 square at (x, y) (top-left), split among the warps by 'rows', 'cols' or None."""
    if split is None:
        box(ax, x, y, 1, 1, face=SHARED, edge="black", lw=1.2)
        ax.text(x + 0.5, y + 0.5, "all\nwarps", ha="center", va="center", fontsize=9,
                color="#444444")
    for w, colour in enumerate(WARPS if split else []):
        if split == "rows":
            box(ax, x, y + w / 4, 1, 0.25, face=tint(colour, 0.6), edge="white", lw=0.8)
            ax.text(x + 0.5, y + w / 4 + 0.125, f"warp {w}", ha="center", va="center",
                    fontsize=8.5)
        else:
            box(ax, x + w / 4, y, 0.25, 1, face=tint(colour, 0.6), edge="white", lw=0.8)
            ax.text(x + w / 4 + 0.125, y + 0.5, f"warp {w}", ha="center", va="center",
                    fontsize=8.5, rotation=90)
    if split:
        box(ax, x, y, 1, 1, face="none", edge="black", lw=1.2)
    ax.text(x + 0.5, y - 0.06, name, ha="center", va="bottom", fontsize=12)
    ax.text(x + 0.5, y + 1.05, dims, ha="center", va="top", fontsize=9, color="#444444")


def op(ax, x, y, s):
    ax.text(x, y + 0.5, s, ha="center", va="center", fontsize=18)


def panel(ax, split_q):
    ax.set_xlim(-0.1, 6.7)
    ax.set_ylim(5.0, -0.75)
    ax.set_aspect("equal")
    ax.set_axis_off()
    q, k, s = ("rows", None, "rows") if split_q else (None, "cols", "cols")
    v = None if split_q else "rows"
    y1, y2 = 0.0, 1.75
    matrix(ax, 0.0, y1, "$Q_i$", "Br × d", q)
    op(ax, 1.3, y1, "·")
    matrix(ax, 1.6, y1, "$K_j^T$", "d × Bc", k)
    op(ax, 2.9, y1, "=")
    matrix(ax, 3.2, y1, "$S_{ij}$", "Br × Bc", s)
    matrix(ax, 0.0, y2, "$\\tilde P_{ij}$", "Br × Bc", s)
    op(ax, 1.3, y2, "·")
    matrix(ax, 1.6, y2, "$V_j$", "Bc × d", v)
    op(ax, 2.9, y2, "→")
    if split_q:
        matrix(ax, 3.2, y2, "$O_i$", "Br × d", "rows")
        ax.text(4.45, y2 + 0.5, "each warp\nkeeps and\nwrites its\nown rows", va="center",
                fontsize=10)
        notes = ("Each warp owns Br/4 = 16 rows of $Q_i$, $S_{ij}$, $\\tilde P_{ij}$ and $O_i$.\n"
                 "Row max m and row sum l: among the 4 lanes of a row\n"
                 "(two shuffles). $K_j$, $V_j$: read from shared memory by all.\n"
                 "No m, l or O pass between warps: no exchange, no merge\n"
                 "(the only barrier guards the $K_j$, $V_j$ tiles, as in split K).")
        title = "Split Q (FlashAttention-2; stage 06's rungs)"
    else:
        for w, colour in reversed(list(enumerate(WARPS))):  # four partial O_i, fanned out
            box(ax, 3.2 + 0.12 * w, y2 + 0.12 * w, 1, 1, face=tint(colour, 0.6), edge="black",
                lw=1)
        ax.text(3.7, y2 + 0.5, "warp 0", ha="center", va="center", fontsize=8.5)
        for w in (1, 2, 3):  # the visible edge of each partial behind the first
            ax.text(3.2 + 1 + 0.12 * w - 0.06, y2 + 1 + 0.12 * w - 0.06, str(w), ha="center",
                    va="center", fontsize=7.5)
        ax.text(3.7, y2 - 0.06, "4 partial $O_i$", ha="center", va="bottom", fontsize=12)
        ax.text(3.7 + 0.18, y2 + 1.41, "Br × d each", ha="center", va="top", fontsize=9,
                color="#444444")
        op(ax, 4.85, y2 + 0.18, "⊕")
        box(ax, 5.3, y2 + 0.18, 1, 1, face="white", edge="black", lw=1.2)
        ax.text(5.8, y2 + 0.68, "$O_i$", ha="center", va="center", fontsize=12)
        ax.text(5.8, y2 + 1.25, "via shared\nmemory", ha="center", va="top", fontsize=9,
                color="#444444")
        notes = ("Each warp owns Bc/4 = 16 keys: its columns of $S_{ij}$, rows of $V_j$.\n"
                 "Every row's max m and sum l are spread over 4 warps, and\n"
                 "each warp holds a partial $O_i$: all go through shared memory,\n"
                 "a barrier, then a merge (rescale and add) before the next step.")
        title = "Split K (FA-1's warps, as the FA-2 paper draws them)"
    ax.set_title(title, loc="left", fontsize=13)
    ax.text(0.0, 3.85 if not split_q else 3.65, notes, va="top", fontsize=10)


def main():
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6))
    panel(axes[0], split_q=False)
    panel(axes[1], split_q=True)
    fig.suptitle("One step of one thread block, 4 warps: $Q_i$ (Br = 64 rows) against $K_j$, "
                 "$V_j$ (Bc = 64 keys), d = 64", x=0.01, ha="left", fontsize=12)
    fig.subplots_adjust(wspace=0.04, left=0.01, right=0.99, top=0.88, bottom=0.01)
    save(fig, "split_k_vs_split_q.png")


if __name__ == "__main__":
    main()
