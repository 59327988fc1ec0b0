"""Chapter 09's wide rung, its shared memory (docs/figures/fp8_wide_smem.png): the byte map of
fp8_pipeline.cuh's LayoutWide (rung 3: d = 128, query blocks of 128, key blocks of 256, two
stages, the row sums' ones, P̃ through shared memory, O staged in a P̃ tile), computed here by the
same formulas as Layout's constants, with one slot drawn apart."""
import matplotlib.pyplot as plt

from common import BLUE, GREEN, GREY, ORANGE, PURPLE, SKY, box, save, tint

D, STAGES, BR, BC = 128, 2, 128, 256
ONES = 8                                   # rows of ones after Vᵀ's D rows, a 128-key tile
VT_HALF = (D + ONES) * 128                 # one 128-key tile of Vᵀ and its ones, bytes
SLOT = BC * D + (BC // 128) * VT_HALF      # K (Bc × D bytes), then two Vᵀ tiles
Q, KV = 0, BR * D
P = KV + STAGES * SLOT                     # O staged in P̃ (kStageInP): no region of its own
BAR = P + 2 * BR * BC                      # two P̃ tiles of 64 × Bc a consumer warpgroup
BYTES = BAR + 8 * (2 + 4 * STAGES + 1) + 1024
LIMIT = 227 * 1024


def kb(x):
    return x / 1024


def main():
    fig, (top, zoom) = plt.subplots(2, 1, figsize=(13, 5.4), gridspec_kw={"height_ratios": [1, 1]})
    for ax in (top, zoom):
        ax.set_axis_off()
    parts = [(Q, KV, "Q\n(128 × 128)", BLUE)]
    for s in range(STAGES):
        parts.append((KV + s * SLOT, KV + (s + 1) * SLOT, f"slot {s}: K and Vᵀ\n(256 keys)", ORANGE if s == 0 else SKY))
    parts.append((P, BAR, "P̃: 2 tiles a warpgroup\n(O staged in one)", GREEN))
    parts.append((BAR, BYTES, "", GREY))
    for a, b, label, colour in parts:
        box(top, kb(a), 0, kb(b - a), 1, face=tint(colour, 0.55), edge="white", lw=1.5)
        top.text(kb(a + b) / 2, 0.5, label, ha="center", va="center", fontsize=9)
        top.text(kb(a), -0.12, f"{kb(a):.0f}", ha="center", va="top", fontsize=8, color=GREY)
    top.text(kb(BYTES), 1.1, f"{kb(BYTES):.1f} KB with the barriers\nand the alignment", ha="right", va="bottom",
             fontsize=8, color=GREY)
    top.plot([kb(LIMIT)] * 2, [-0.2, 1.2], color="black", linewidth=1.5, linestyle="--")
    top.text(kb(LIMIT), -0.3, "227 KB:\na block's most", ha="center", va="top", fontsize=9)
    top.set_xlim(-2, 235)
    top.set_ylim(-0.7, 1.8)
    top.set_title(f"Rung 3's shared memory ({kb(BYTES):.1f} KB a block), in KB from the 1,024-aligned base")
    # one slot, apart
    x0 = 0
    pieces = [(BC * D, "K: 256 keys × 128 bytes\n(d = 128 e4m3 values a row, the 128-byte swizzle)", ORANGE),
              (D * 128, "Vᵀ keys 0–127:\n128 rows (d) × 128 key bytes", PURPLE), (ONES * 128, "ones", GREY),
              (D * 128, "Vᵀ keys 128–255", PURPLE), (ONES * 128, "ones", GREY)]
    for size, label, colour in pieces:
        box(zoom, kb(x0), 0, kb(size), 1, face=tint(colour, 0.5), edge="white", lw=1.5)
        zoom.text(kb(x0 + size / 2), 0.5 if size > 2048 else 1.25, label, ha="center", va="center", fontsize=8.5)
        x0 += size
    zoom.text(kb(SLOT) + 0.8, 0.5, f"= {kb(SLOT):.0f} KB a slot", va="center", fontsize=9)
    zoom.text(0, -0.35, "The 8 rows of ones after each Vᵀ tile make P̃·V's accumulator carry the row sums l (rung 2): "
              "8 more columns of o instead of a sum by FADDs.", fontsize=9, va="top")
    zoom.set_xlim(-1, kb(SLOT) + 12)
    zoom.set_ylim(-0.9, 1.6)
    save(fig, "fp8_wide_smem.png")


if __name__ == "__main__":
    main()
