"""Stage 02's register_blocked matmul at three levels: thread block, warp, thread.

What it draws is 02_tiled_matmul/kernels.cu (register_blocked) with the sizes of algorithm.hpp:
BM = BN = 128, BK = 8, TM = TN = 8, 256 threads a block (tx = tid % 16, ty = tid / 16).
- Block: C is cut into 128 x 128 tiles, one per thread block; the block walks K in steps of BK = 8,
  staging an 8 x 128 slice of A (stored transposed, As[k][m]) and of B (Bs[k][n]) in shared memory.
- Warp: warp w holds threads 32w .. 32w+31, that is ty = 2w, 2w+1 and every tx, so it owns rows
  8w .. 8w+7 and 64+8w .. 64+8w+7 of the tile, all 128 columns.
- Thread: thread (ty, tx) owns rows 4ty .. 4ty+3 and 64+4ty .. 64+4ty+3, columns 4tx .. 4tx+3 and
  64+4tx .. 64+4tx+3: an 8 x 8 sub-tile in four 4 x 4 pieces, in 64 registers. Per k it reads two
  float4 of As[k] and two of Bs[k] and does 64 FMAs.
"""
import matplotlib.pyplot as plt

from common import BLUE, EIGHT, GREEN, ORANGE, VERMILION, box, save, tint

A_COL, B_COL, C_COL = BLUE, GREEN, ORANGE


def grid(ax, x0, y0, w, h, step, colour="#BBBBBB", lw=0.6):
    for x in range(step, w, step):
        ax.plot([x0 + x, x0 + x], [y0, y0 + h], color=colour, lw=lw)
    for y in range(step, h, step):
        ax.plot([x0, x0 + w], [y0 + y, y0 + y], color=colour, lw=lw)


def setup(ax, xlim, ylim, title):
    ax.set_xlim(*xlim)
    ax.set_ylim(ylim[1], ylim[0])  # rows grow downwards
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.set_title(title, loc="left")


def block_level(ax):
    n, t = 512, 128  # a 512 x 512 x 512 product: 4 x 4 block tiles
    gap = 150
    setup(ax, (-10, 3 * n + 2 * gap + 10), (-40, n + 250),
          "1 · Thread block: a 128 × 128 tile of C")
    bi, bj, k0 = 1, 2, 200  # the block's tile row and column, and the current k step
    xa, xb, xc = 0, n + gap, 2 * (n + gap)
    # A (M x K), B (K x N) and C (M x N) side by side: C = A · B.
    box(ax, xa, 0, n, n, face=tint(A_COL, 0.08), edge=A_COL, lw=1.5)
    box(ax, xa, bi * t, n, t, face=tint(A_COL, 0.35), edge=A_COL, lw=1.5)
    box(ax, xa + k0, bi * t, 8 * 3, t, face=A_COL, edge=A_COL)  # BK = 8, drawn 3x wide
    box(ax, xb, 0, n, n, face=tint(B_COL, 0.08), edge=B_COL, lw=1.5)
    box(ax, xb + bj * t, 0, t, n, face=tint(B_COL, 0.35), edge=B_COL, lw=1.5)
    box(ax, xb + bj * t, k0, t, 8 * 3, face=B_COL, edge=B_COL)
    box(ax, xc, 0, n, n, face="white", edge=C_COL, lw=1.5)
    grid(ax, xc, 0, n, n, t)
    box(ax, xc + bj * t, bi * t, t, t, face=tint(C_COL, 0.6), edge=C_COL, lw=2)
    ax.text(xa + n + gap / 2, n / 2, "×", ha="center", va="center", fontsize=26)
    ax.text(xb + n + gap / 2, n / 2, "=", ha="center", va="center", fontsize=26)
    ax.text(xa + n / 2, n + 25, "A (M × K)", ha="center", va="top", color=A_COL, weight="bold")
    ax.text(xb + n / 2, n + 25, "B (K × N)", ha="center", va="top", color=B_COL, weight="bold")
    ax.text(xc + n / 2, n + 25, "C (M × N)", ha="center", va="top", color=C_COL, weight="bold")
    ax.text(xc + bj * t + t / 2, bi * t + t / 2, "one\nblock", ha="center", va="center",
            fontsize=10)
    ax.text(xa + k0 + 12, bi * t - 8, "→ As", ha="left", va="bottom", color=A_COL, fontsize=10,
            weight="bold")
    ax.text(xb + bj * t + t + 8, k0 + 12, "→ Bs", ha="left", va="center", color=B_COL,
            fontsize=10, weight="bold")
    ax.text(xa, n + 95,
            "The block reads A's 128-row panel and B's 128-column panel (light), BK = 8 columns or rows\n"
            "at a time (dark strips, drawn 3× wide), into shared memory: As[k][m] (A transposed) and\n"
            "Bs[k][n], double-buffered. A is read N/128 times in all, B M/128 times.",
            va="top", fontsize=10.5)


def tile_frame(ax, x0=0, y0=0, t=128):
    box(ax, x0, y0, t, t, face="white", edge=C_COL, lw=2)
    for v in (0, 64, 128):
        ax.text(x0 - 3, y0 + v, str(v), ha="right", va="center", fontsize=8.5, color="#555555")
        ax.text(x0 + v, y0 - 3, str(v), ha="center", va="bottom", fontsize=8.5, color="#555555")


def warp_level(ax):
    setup(ax, (-45, 150), (-40, 185), "2 · Warp: two 8-row strips")
    tile_frame(ax)
    for w in range(8):
        for half in (0, 64):
            y = half + 8 * w
            box(ax, 0, y, 128, 8, face=tint(EIGHT[w], 0.55), edge="white", lw=0.8)
            ax.text(64 if half == 0 else 64, y + 4, f"warp {w}", ha="center", va="center",
                    fontsize=7.5)
    ax.text(-40, 140,
            "Warp w = threads 32w … 32w+31\n(ty = 2w, 2w+1; tx = 0 … 15):\n"
            "rows 8w … 8w+7 and 64+8w … 64+8w+7,\nall 128 columns.",
            va="top", fontsize=10)


def thread_level(ax):
    setup(ax, (-45, 150), (-40, 185), "3 · Thread: 8 × 8 outputs in registers")
    ty, tx = 3, 5
    # Bs[k] above the tile and As[k] to its left (one k step), as the thread reads them.
    box(ax, 0, -22, 128, 6, face=tint(B_COL, 0.15), edge=B_COL)
    box(ax, -22, 0, 6, 128, face=tint(A_COL, 0.15), edge=A_COL)
    tile_frame(ax)
    grid(ax, 0, 0, 128, 128, 4, colour="#EEEEEE", lw=0.4)
    rows = (4 * ty, 64 + 4 * ty)
    cols = (4 * tx, 64 + 4 * tx)
    for c in cols:
        box(ax, c, -22, 4, 6, face=B_COL, edge=B_COL)
        ax.plot([c + 2, c + 2], [-16, 0], color=B_COL, lw=0.8, ls=":")
    for r in rows:
        box(ax, -22, r, 6, 4, face=A_COL, edge=A_COL)
        ax.plot([-16, 0], [r + 2, r + 2], color=A_COL, lw=0.8, ls=":")
    for r in rows:  # the thread's rows and columns, as light bands: an outer product
        box(ax, 0, r, 128, 4, face=tint(VERMILION, 0.3), edge="none")
    for c in cols:
        box(ax, c, 0, 4, 128, face=tint(VERMILION, 0.3), edge="none")
    for r in rows:
        for c in cols:
            box(ax, c, r, 4, 4, face=VERMILION, edge=VERMILION, lw=1.2)
    ax.annotate("4 × 4", xy=(cols[1] + 4, rows[0] + 2), xytext=(cols[1] + 22, rows[0] + 22),
                fontsize=9, arrowprops=dict(arrowstyle="-", color="black", lw=0.8))
    ax.text(130, -19, "Bs[k][·]", va="center", fontsize=9, color=B_COL, weight="bold")
    ax.text(-19, -3, "As[k][·]", ha="right", va="bottom", fontsize=9, color=A_COL, weight="bold")
    ax.text(-40, 140,
            f"Thread (ty, tx) = ({ty}, {tx}): rows 4ty … 4ty+3 and\n"
            "64+4ty … 64+4ty+3, columns likewise with tx.\n"
            "Per k: 2 float4 of As[k] and 2 of Bs[k] from shared\n"
            "memory → 64 FMAs into acc[8][8], in registers.",
            va="top", fontsize=10)


def main():
    fig = plt.figure(figsize=(11, 9.6))
    spec = fig.add_gridspec(2, 2, height_ratios=[1.0, 1.25], hspace=0.12, wspace=0.08)
    block_level(fig.add_subplot(spec[0, :]))
    warp_level(fig.add_subplot(spec[1, 0]))
    thread_level(fig.add_subplot(spec[1, 1]))
    fig.suptitle("register_blocked (stage 02): BM = BN = 128, BK = 8, 256 threads, 8 × 8 per thread",
                 x=0.5, y=0.94, fontsize=13, weight="bold")
    save(fig, "matmul_tiling.png")


if __name__ == "__main__":
    main()
