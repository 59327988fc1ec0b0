"""Chapter 06's causal block skipping (docs/figures/causal_blocks.png): for N = 600 with query blocks
of Br = 128 and key blocks of Bc = 64 (rung 4e's tiles), which (query block, key block) pairs a
kernel skips, runs without the mask, or runs masked (the diagonal, and the keys past N), with each
query block's start order under heaviest-first. The rules are tiles.hpp's: query block i visits key
blocks 0 .. (last row of i) / Bc."""
from common import BLUE, GREY, LIGHT, ORANGE, box, canvas, plt, save

N, BR, BC = 600, 128, 64


def main():
    tr, tc = (N + BR - 1) // BR, (N + BC - 1) // BC
    scale = 0.011  # drawing units a row or key
    fig, ax = canvas(8.5, 6.8)
    counts = {"skipped": 0, "full": 0, "masked": 0}
    for i in range(tr):
        row0, rows = i * BR, min(BR, N - i * BR)
        last_row = row0 + rows - 1
        for j in range(tc):
            key0, keys = j * BC, min(BC, N - j * BC)
            if key0 > last_row:
                kind, face = "skipped", LIGHT
            elif key0 + keys - 1 > row0 or keys < BC:
                kind, face = "masked", ORANGE
            else:
                kind, face = "full", BLUE
            counts[kind] += 1
            y = -(row0 + rows) * scale
            box(ax, key0 * scale, y, keys * scale, rows * scale, face=face, edge="white", lw=1.5)
        visited = last_row // BC + 1
        ax.text(-0.15, -(row0 + rows / 2) * scale, f"query block {i}\n{visited} key blocks", ha="right",
                va="center", fontsize=9)
        start = sorted(range(tr), key=lambda q: -((min(q * BR + BR, N) - 1) // BC))
        ax.text(N * scale + 0.15, -(row0 + rows / 2) * scale, f"starts {start.index(i) + 1}.", ha="left",
                va="center", fontsize=9)
    ax.plot([0, N * scale], [0, -N * scale], color="black", linewidth=1, linestyle="--")
    ax.text(N * scale / 2 + 0.2, -N * scale / 2 + 0.1, "the diagonal: key = query", fontsize=9, rotation=-33)
    for j in range(tc):
        ax.text((j * BC + min(BC, N - j * BC) / 2) * scale, 0.12, f"{j}", ha="center", fontsize=8, color=GREY)
    ax.text(N * scale + 0.15, 0.12, "heaviest first:", ha="left", fontsize=9)
    ax.text(N * scale / 2, 0.35, f"key blocks of Bc = {BC} (the last holds {N - (tc - 1) * BC} keys: N = {N})",
            ha="center", fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (BLUE, ORANGE, LIGHT)]
    ax.legend(handles, [f"runs without the mask ({counts['full']})", f"runs masked: the diagonal, keys past N ({counts['masked']})",
                        f"skipped: every key after every row ({counts['skipped']})"],
              loc="upper left", bbox_to_anchor=(0.02, 0.12), ncol=1, fontsize=9, frameon=False)
    ax.set_xlim(-1.6, N * scale + 1.0)
    ax.set_ylim(-N * scale - 1.3, 0.6)
    ax.set_aspect("equal")
    ax.set_title(f"Causal attention by blocks: Br = {BR} query rows, Bc = {BC} keys, N = {N}")
    save(fig, "causal_blocks.png")


if __name__ == "__main__":
    main()
