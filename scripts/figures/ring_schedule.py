"""The ring's schedule for G = 4 ranks: the plain ring against zigzag, under a causal mask.

From 10_ring_attention/ring.hpp and ring.cpp (Split):
- The sequence of N rows is cut into chunks in order. Plain ring: G chunks, rank r holds chunk r.
  Zigzag: 2G chunks, rank r holds chunks r and 2G - 1 - r (rank 0 the first and the last).
- Each rank keeps its chunks of Q. Its K/V shard (K and V of the same chunks) travels: at step
  s = 0 ... G - 1 rank r holds the shard of rank (r - s) mod G (Split::source), computes its query
  chunks against it, and passes it on to rank r + 1 (rank G - 1 to rank 0). A shard's path is a
  diagonal of the table drawn here.
- Causal (Split::pairs): a pair (query chunk cq, key chunk ck) is computed in full when ck < cq,
  under the causal mask when ck == cq (the diagonal: the lower triangle of the pair), and skipped
  when ck > cq. Not causal, every pair is computed in full.
- Each rank's share of the causal scores: the plain ring's rank r computes r full pairs and one
  diagonal, (2r + 1)/16 of the scores at G = 4, so the last rank does 7 times the first's
  (2G - 1, rank_scores in ring.cpp); zigzag gives every rank 4/16.
The right-hand grid is the causal score matrix at chunk level: each (query chunk, key chunk) pair,
coloured by the rank that computes it (the owner of the query chunk), with the step it happens at.
"""
import matplotlib.pyplot as plt
from matplotlib.patches import Polygon

from common import BLUE, GREEN, LIGHT, ORANGE, PURPLE, box, save, tint

G = 4
RANK = [BLUE, ORANGE, GREEN, PURPLE]
CW, CH = 1.5, 1.1   # a cell of the schedule table
X0 = 1.75           # the table's first step column
WORK_X = X0 + G * CW + 0.25
GRID_X = WORK_X + 2.35


def chunks_of(rank, zigzag):
    return [rank, 2 * G - 1 - rank] if zigzag else [rank]


def owner(chunk, zigzag):
    return chunk if not zigzag or chunk < G else 2 * G - 1 - chunk


def source(rank, step):
    return (rank - step) % G


def kind(cq, ck):
    return "full" if ck < cq else "diag" if ck == cq else "skip"


def pair_mark(ax, x, y, w, h, state, colour):
    """One (query chunk, key chunk) pair: full square, lower triangle (diagonal) or skipped."""
    if state == "full":
        box(ax, x, y, w, h, face=tint(colour, 0.7), edge="black", lw=0.8)
    elif state == "diag":
        box(ax, x, y, w, h, face="white", edge="black", lw=0.8)
        ax.add_patch(Polygon([(x, y), (x, y + h), (x + w, y + h)], closed=True,
                             facecolor=tint(colour, 0.7), edgecolor="black", lw=0.8))
    else:
        box(ax, x, y, w, h, face=LIGHT, edge="#BBBBBB", lw=0.8)


def panel(ax, zigzag):
    n = 2 * G if zigzag else G
    rows_top = 0.85
    ax.set_xlim(-0.1, GRID_X + 4.5)
    ax.set_ylim(rows_top + G * (CH + 0.12) + 0.4, -0.95)
    ax.set_aspect("equal")
    ax.set_anchor("W")
    ax.set_axis_off()

    # The sequence, cut into chunks, each coloured by the rank that holds it.
    ax.text(0.0, -0.55, "the sequence\n(N rows)", ha="left", va="center", fontsize=9.5)
    w = G * CW / n
    for k in range(n):
        box(ax, X0 + k * w, -0.8, w, 0.5, face=tint(RANK[owner(k, zigzag)], 0.55), edge="black",
            lw=0.8)
        ax.text(X0 + (k + 0.5) * w, -0.55, f"chunk {k}" if not zigzag else str(k), ha="center",
                va="center", fontsize=9)
    ax.text(X0 + G * CW + 0.1, -0.55, "row 0 → N − 1", ha="left", va="center", fontsize=8.5,
            color="#444444")

    # The schedule: a row per rank, a column per step.
    ax.text(0.7, rows_top - 0.2, "rank: its Q", ha="center", va="bottom", fontsize=9.5)
    for s in range(G):
        ax.text(X0 + s * CW + (CW - 0.1) / 2, rows_top - 0.2, f"step {s}", ha="center",
                va="bottom", fontsize=10, weight="bold")
    ax.text(WORK_X + 0.95, rows_top - 0.2, "share of the\ncausal scores", ha="center",
            va="bottom", fontsize=9)
    for r in range(G):
        y = rows_top + r * (CH + 0.12)
        mine = chunks_of(r, zigzag)
        box(ax, 0.0, y, 1.45, CH, face=tint(RANK[r], 0.3), edge=RANK[r], lw=1.6)
        what = f"chunk {mine[0]}" if not zigzag else f"chunks {mine[0]}, {mine[1]}"
        ax.text(0.72, y + CH / 2, f"rank {r}\nQ: {what}", ha="center", va="center", fontsize=9.5)
        work = 0.0
        for s in range(G):
            src = source(r, s)
            theirs = chunks_of(src, zigzag)
            x = X0 + s * CW
            box(ax, x, y, CW - 0.1, CH, face="white", edge=RANK[src], lw=2.0)
            ax.text(x + (CW - 0.1) / 2, y + 0.19, f"K/V of rank {src}", ha="center",
                    va="center", fontsize=7.5, color=RANK[src], weight="bold")
            size = 0.62 if not zigzag else 0.3
            gx = x + (CW - 0.1 - size * len(theirs)) / 2 + (0.1 if zigzag else 0.0)
            gy = y + 0.37
            for i, cq in enumerate(mine):
                if zigzag:
                    ax.text(gx - 0.05, gy + (i + 0.5) * size, str(cq), ha="right", va="center",
                            fontsize=7, color="#444444")
                for j, ck in enumerate(theirs):
                    state = kind(cq, ck)
                    work += {"full": 1.0, "diag": 0.5, "skip": 0.0}[state] * (1 if zigzag else 4)
                    pair_mark(ax, gx + j * size, gy + i * size, size, size, state, RANK[r])
            if zigzag:
                for j, ck in enumerate(theirs):
                    ax.text(gx + (j + 0.5) * size, gy + len(mine) * size + 0.01, str(ck),
                            ha="center", va="top", fontsize=7, color="#444444")
        # The rank's share of the causal scores (in (N/8)² blocks: 32 in all).
        box(ax, WORK_X, y + 0.3, 1.9 * work / 16, 0.5, face=tint(RANK[r], 0.7), edge="black",
            lw=0.8)
        ax.text(WORK_X + 1.9 * work / 16 + 0.08, y + 0.55, f"{int(work) // 2}/16", ha="left",
                va="center", fontsize=9.5)
    foot = rows_top + G * (CH + 0.12) + 0.05
    ax.text(X0, foot, "a shard's path is a diagonal: rank r passes the one in hand to r + 1 "
            f"(rank {G - 1} to rank 0)", ha="left", va="top", fontsize=8.5, color="#444444")

    # The causal score matrix at chunk level: who computes each pair, and at which step.
    cell = 4.2 / n
    gy0 = rows_top
    ax.text(GRID_X + 2.1, gy0 - 0.2, "keys: chunk 0 → " + str(n - 1), ha="center", va="bottom",
            fontsize=9)
    ax.text(GRID_X - 0.15, gy0 + 2.1, "queries: chunk 0 → " + str(n - 1), ha="right",
            va="center", rotation=90, fontsize=9)
    for cq in range(n):
        for ck in range(n):
            r = owner(cq, zigzag)
            state = kind(cq, ck)
            x, y = GRID_X + ck * cell, gy0 + cq * cell
            pair_mark(ax, x, y, cell, cell, state, RANK[r])
            if state != "skip":
                step = (r - owner(ck, zigzag)) % G
                tx, ty = (x + cell / 2, y + cell / 2) if state == "full" else (x + cell * 0.3,
                                                                                 y + cell * 0.7)
                ax.text(tx, ty, f"s{step}", ha="center", va="center",
                        fontsize=9 if not zigzag else 7)
    ax.text(GRID_X + 2.1, gy0 + 4.3, "colour: the rank that computes the pair;\n"
            "s: the step; grey: skipped (above the diagonal)", ha="center", va="top",
            fontsize=8.5, color="#444444")

    title = ("Zigzag: 2G = 8 chunks, rank r holds chunks r and 7 − r" if zigzag else
             "Plain ring: G = 4 chunks, rank r holds chunk r")
    ax.set_title(title, loc="left", fontsize=13)


def legend(fig):
    ax = fig.add_axes([0.0, 0.0, 1.0, 0.045])
    ax.set_xlim(0, 20)
    ax.set_ylim(1, 0)
    ax.set_axis_off()
    x = 0.3
    for state, text in (("full", "computed in full (key chunk before the query chunk)"),
                        ("diag", "on the diagonal: under the causal mask"),
                        ("skip", "skipped (key chunk after the query chunk)")):
        pair_mark(ax, x, 0.25, 0.45, 0.45, state, BLUE)
        ax.text(x + 0.6, 0.48, text, ha="left", va="center", fontsize=9.5)
        x += 6.6
    ax.text(0.3, 0.98, "Not causal, every pair is computed in full and the ranks share the work "
            "equally in both layouts.", ha="left", va="center", fontsize=9.5)


def main():
    fig, axes = plt.subplots(2, 1, figsize=(13, 13.2))
    panel(axes[0], zigzag=False)
    panel(axes[1], zigzag=True)
    fig.suptitle("Ring attention on G = 4 ranks: which chunk each rank holds, which K/V shard it "
                 "holds at each step, which pairs it computes (causal)", x=0.01, y=0.99, ha="left",
                 fontsize=12)
    fig.subplots_adjust(left=0.01, right=0.99, top=0.94, bottom=0.06, hspace=0.1)
    legend(fig)
    save(fig, "ring_schedule.png")


if __name__ == "__main__":
    main()
