"""Chapter 08's TMA box and its swizzle (docs/figures/tma_box.png). Left: one head of Q in global
memory (N rows of d = 128 16-bit values) and the two boxes of 64 columns × Br rows that one query
block takes: a TMA copy each (tma_load_3d at coordinates (64·b, row0, head)). Right: where box b
lands in shared memory: column block b of the tile, Br rows of 128 bytes, and in every row r the
16-byte chunk c stored at chunk c XOR (r mod 8), what CU_TENSOR_MAP_SWIZZLE_128B writes and what the
wgmma descriptors (and hopper::swizzle128) read. Rows past N arrive as zeros."""
import matplotlib.pyplot as plt

from common import BLUE, EIGHT, GREY, LIGHT, ORANGE, box, save, tint

ROWS = 8  # rows drawn of the box (one swizzle period: 8 rows, 1,024 bytes)


def main():
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.6), gridspec_kw={"width_ratios": [1, 1.25]})
    for ax in (left, right):
        ax.set_axis_off()
    # global memory: N rows × 128 columns, drawn as 16 chunks of 8 values a row
    n_rows, row0, br = 20, 6, 8
    for r in range(n_rows):
        for c in range(16):
            inside = row0 <= r < row0 + br
            face = tint(BLUE if c < 8 else ORANGE, 0.55) if inside else LIGHT
            box(left, c, r, 1, 1, face=face, edge="white", lw=0.6)
    box(left, 0, row0, 8, br, face="none", edge=BLUE, lw=2.4)
    box(left, 8, row0, 8, br, face="none", edge=ORANGE, lw=2.4)
    left.text(4, row0 - 0.4, "box 0: columns 0–63", ha="center", va="bottom", fontsize=10, color=BLUE)
    left.text(12, row0 - 0.4, "box 1: columns 64–127", ha="center", va="bottom", fontsize=10, color=ORANGE)
    left.text(-0.3, row0 + br / 2, "query block i:\nBr rows from row0", ha="right", va="center", fontsize=10)
    left.text(8, -1.4, "Q of one head in global memory: N rows of d = 128 values\n(a square: 8 values, 16 bytes)",
              ha="center", va="bottom", fontsize=10)
    left.set_xlim(-5, 16.5)
    left.set_ylim(n_rows + 0.5, -3)
    left.set_aspect("equal")
    # shared memory: box b = column block b, ROWS rows of 8 chunks, chunk c at slot c ^ (r & 7)
    for b, colour in enumerate((BLUE, ORANGE)):
        x0 = b * 9.5
        for r in range(ROWS):
            for slot in range(8):
                c = slot ^ (r & 7)
                box(right, x0 + slot, r, 1, 1, face=tint(EIGHT[c], 0.55), edge="white", lw=0.8)
                right.text(x0 + slot + 0.5, r + 0.5, str(c), ha="center", va="center", fontsize=9)
        box(right, x0, 0, 8, ROWS, face="none", edge=colour, lw=2.4)
        right.text(x0 + 4, -0.5, f"column block {b} (box {b})", ha="center", va="bottom", fontsize=10, color=colour)
        for slot in range(8):
            right.text(x0 + slot + 0.5, ROWS + 0.15, f"{16 * slot}", ha="center", va="top", fontsize=7, color=GREY)
        right.text(x0 + 4, ROWS + 0.9, "byte of the 128-byte row", ha="center", va="top", fontsize=8, color=GREY)
    for r in range(ROWS):
        right.text(-0.3, r + 0.5, f"row {r}", ha="right", va="center", fontsize=8)
    right.text(8.75, ROWS + 2.2,
               "In shared memory (numbers: the chunk c of the row held there). Row r keeps its own 8 chunks,\n"
               "chunk c at c XOR (r mod 8); the pattern repeats every 8 rows (1,024 bytes), so a tile must\n"
               "start on 1,024 bytes. Column block b starts Br × 128 bytes after block b − 1.",
               ha="center", va="top", fontsize=9.5)
    right.set_xlim(-2, 18)
    right.set_ylim(ROWS + 5.2, -1.6)
    right.set_aspect("equal")
    fig.suptitle("A TMA box and the 128-byte swizzle it writes (stage 08's tiles)", fontweight="bold")
    fig.tight_layout()
    save(fig, "tma_box.png")


if __name__ == "__main__":
    main()
