"""The XOR swizzle of 16-byte chunks in shared memory (06_flash_v2/ptx.cuh, ptx::swizzle).

A tile row of 64 halves is 128 bytes: 8 chunks of 16 bytes, one per group of 4 banks (shared
memory has 32 banks of 4 bytes). Stored plainly, chunk c of every row lands in bank group c, so
the 8 row addresses of one ldmatrix 8 x 8 tile (same chunk c, 8 consecutive rows) all hit one bank
group: an 8-way conflict, 8 wavefronts. Swizzled, chunk c of row r is stored at slot c ^ (r & 7):
the same 8 reads fall in 8 different bank groups, one wavefront; and each row still holds its own 8
chunks (a permutation), so 16-byte writes of a row stay conflict-free. Rows of 128 halves (d = 128)
are two such 128-byte halves, each permuted the same way.
"""
import matplotlib.pyplot as plt

from common import EIGHT, box, save, tint

READ = 2  # the logical chunk an ldmatrix tile reads (its 8 rows' addresses)


def panel(ax, swizzled):
    ax.set_xlim(-1.7, 8.3)
    ax.set_ylim(9.5, -1.35)
    ax.set_aspect("equal")
    ax.set_axis_off()
    for slot in range(8):
        ax.text(slot + 0.5, -0.15, f"{4 * slot}–{4 * slot + 3}", ha="center", va="bottom",
                fontsize=8.5, color="#444444")
    ax.text(4, -0.75, "banks (slot s = 16 bytes = banks 4s … 4s+3)", ha="center", va="bottom",
            fontsize=9.5, color="#444444")
    for r in range(8):
        ax.text(-0.2, r + 0.5, f"row {r}", ha="right", va="center", fontsize=9.5)
        for slot in range(8):
            c = slot ^ r if swizzled else slot  # the logical chunk stored in this slot
            hit = c == READ
            box(ax, slot, r, 1, 1, face=tint(EIGHT[slot], 0.8 if hit else 0.22),
                edge="white", lw=1)
            ax.text(slot + 0.5, r + 0.5, f"c{c}", ha="center", va="center", fontsize=10,
                    weight="bold" if hit else "normal")
            if hit:
                box(ax, slot + 0.05, r + 0.05, 0.9, 0.9, face="none", edge="black", lw=2)
    box(ax, 0, 0, 8, 8, face="none", edge="black", lw=1.5)
    if swizzled:
        title = "Swizzled: chunk c of row r at slot c ⊕ (r & 7)"
        verdict = (f"ldmatrix reads c{READ} of rows 0–7:\n8 bank groups → conflict-free,"
                   " 1 wavefront")
    else:
        title = "Plain: chunk c of every row at slot c"
        verdict = (f"ldmatrix reads c{READ} of rows 0–7:\none bank group → 8-way conflict,"
                   " 8 wavefronts")
    ax.set_title(title, loc="left", fontsize=12.5)
    ax.text(-1.7, 8.35, verdict, va="top", fontsize=10.5)


def main():
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.6))
    panel(axes[0], swizzled=False)
    panel(axes[1], swizzled=True)
    fig.suptitle("8 rows of a tile in shared memory, 64 halves = 8 chunks of 16 bytes each "
                 "(cN: halves 8N … 8N+7 of the row)", x=0.01, ha="left", fontsize=11.5)
    fig.text(0.01, 0.015, "ptx::swizzle<64>(r, c) = r·64 + ((c ^ (r & 7)) << 3)   (offset in "
             "halves; the map is its own inverse)", fontsize=10, family="DejaVu Sans Mono")
    fig.subplots_adjust(wspace=0.08, left=0.01, right=0.99, top=0.9, bottom=0.07)
    save(fig, "swizzle.png")


if __name__ == "__main__":
    main()
