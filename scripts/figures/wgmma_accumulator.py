"""Chapter 08's wgmma accumulator layout (docs/figures/wgmma_accumulator.png): which of a warpgroup's
128 threads holds which element of a 64 × N fp32 accumulator, drawn for N = 16 (two 8-column
blocks; a wider N repeats them to the right). From the PTX ISA ("Register fragments: wgmma .m64nNk16",
the accumulator D): warp w holds rows 16w .. 16w + 15, and in each 8-column block n its lane
(g = lane / 4, t = lane % 4) holds d[n][0], d[n][1] = D[16w + g][8n + 2t, + 1] and d[n][2],
d[n][3] = D[16w + g + 8][8n + 2t, + 1]: mma.sync's C fragment, once a warp, stacked four times."""
import matplotlib.pyplot as plt

from common import BLUE, GREEN, ORANGE, PURPLE, box, save, tint

WARP = [BLUE, ORANGE, GREEN, PURPLE]
N = 16
MARK = (1, 5)  # (warp, lane) drawn with a heavy outline: thread 37 of the warpgroup


def main():
    fig, ax = plt.subplots(figsize=(8.2, 11))
    ax.set_axis_off()
    for w in range(4):
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for n in range(N // 8):
                for half in range(2):
                    row, col = 16 * w + g + 8 * half, 8 * n + 2 * t
                    box(ax, col, row, 2, 1, face=tint(WARP[w], 0.35 if half else 0.6), edge="white", lw=0.7)
                    if (w, lane) == MARK:
                        box(ax, col + 0.05, row + 0.05, 1.9, 0.9, face="none", edge="black", lw=2.2)
                    ax.text(col + 1, row + 0.5, str(lane), ha="center", va="center", fontsize=7,
                            weight="bold" if (w, lane) == MARK else "normal")
        ax.text(N + 0.6, 16 * w + 8, f"warp {w}\nrows {16 * w}–{16 * w + 15}\n(threads {32 * w}–{32 * w + 31})",
                va="center", fontsize=10, color=WARP[w])
    for n in range(N // 8):
        box(ax, 8 * n, 0, 8, 64, face="none", edge="black", lw=1.4)
        ax.text(8 * n + 4, -1.0, f"column block n = {n}\n(d[{n}][0..3])", ha="center", va="bottom", fontsize=9)
    for c in range(0, N, 2):
        ax.text(c + 1, -0.2, f"{c},{c + 1}", ha="center", va="bottom", fontsize=6.5, color="#555555")
    for r in range(0, 64, 8):
        ax.text(-0.3, r + 0.5, str(r), ha="right", va="center", fontsize=7, color="#555555")
    w, lane = MARK
    g, t = lane // 4, lane % 4
    ax.text(N / 2, 66.2,
            f"Thread {32 * w + lane} (warp {w}, lane {lane}: g = {g}, t = {t}) holds, in every column block n,\n"
            f"d[n][0], d[n][1] = D[{16 * w + g}][8n + {2 * t}, 8n + {2 * t + 1}] (dark) and "
            f"d[n][2], d[n][3] = D[{16 * w + g + 8}][same] (light):\n"
            "within its warp, mma.sync's C fragment (chapter 06), so the mask and the softmax carry over.",
            ha="center", va="top", fontsize=9.5)
    ax.set_xlim(-1.5, N + 6)
    ax.set_ylim(70, -3.5)
    ax.set_title("wgmma's 64 × N accumulator over a warpgroup (N = 16 drawn; numbers: lanes)")
    save(fig, "wgmma_accumulator.png")


if __name__ == "__main__":
    main()
