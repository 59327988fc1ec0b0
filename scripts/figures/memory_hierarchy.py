"""The memory hierarchy of the H100 the course ran on, with the bandwidths it measured.

Numbers and where they come from (docs/results/h100/):
- HBM3 <-> L2: a device-to-device copy of 1.05 GB (io_probe, results.csv) runs at 2,848 GB/s of
  bytes read plus written; stages 03 and 04 copy 512 MiB at 2,876-2,893 GB/s. The datasheet
  figure for the H100 SXM5 80GB is 3.35 TB/s.
- L2 -> SMs: the coalesced naive matmul of chapter 01 moves 344 GB through the crossbar in 47 ms,
  7.3 TB/s (7.7 TB/s at n = 2048): a rate a kernel reached, not a peak. NVIDIA publishes no L2
  bandwidth figure.
- shared memory: not measured by the course. 32 banks of 4 bytes deliver one 128-byte wavefront
  per SM per clock: 128 B x 132 SMs x 1.98 GHz = 33 TB/s (an architecture figure).
- registers: no bandwidth of their own; every instruction reads its operands from them.
Capacities: 132 SMs, 64 K 32-bit registers and 256 KB of L1/shared memory per SM (up to 227 KB of
shared memory per block), a 50 MB L2, 80 GB of HBM3.
"""
from common import BLUE, GREEN, ORANGE, PURPLE, GREY, arrow, box, canvas, save, tint


def main():
    fig, ax = canvas(11, 7.2)
    ax.set_xlim(0, 11.5)
    ax.set_ylim(-0.2, 7.2)
    cx = 3.55  # centre of the pyramid
    levels = [  # (name, capacity line, what lives there, colour, width)
        ("Registers", "64 K × 32 bit = 256 KB per SM",
         r"FA-2: $S$, $\tilde{P}$, $O$, $m$, $l$ of a warp's rows", BLUE, 3.4),
        ("Shared memory / L1", "256 KB per SM (≤ 227 KB shared per block)",
         r"tiles: $Q_i$, $K_j$, $V_j$", GREEN, 4.6),
        ("L2 cache", "50 MB, shared by all 132 SMs", r"keeps the re-read $K_j$, $V_j$", ORANGE, 5.6),
        ("HBM3 (device memory)", "80 GB", "Q, K, V, O, L (and S, P in standard attention)",
         PURPLE, 5.95),
    ]
    h, gap = 1.05, 0.85
    tops = []
    for n, (name, cap, use, colour, w) in enumerate(levels):
        y = 6.9 - n * (h + gap) - h
        tops.append(y)
        box(ax, cx - w / 2, y, w, h, face=tint(colour, 0.25), edge=colour, lw=2)
        ax.text(cx, y + h - 0.25, name, ha="center", va="center", fontsize=13, weight="bold")
        ax.text(cx, y + h / 2 - 0.05, cap, ha="center", va="center", fontsize=10.5)
        ax.text(cx, y + 0.22, use, ha="center", va="center", fontsize=9.5, style="italic",
                color="#333333")

    # Per SM / whole GPU brackets on the left.
    def bracket(y0, y1, text):
        x = 0.3
        ax.plot([x + 0.12, x, x, x + 0.12], [y0, y0, y1, y1], color=GREY, lw=1.5)
        ax.text(x - 0.05, (y0 + y1) / 2, text, rotation=90, ha="right", va="center",
                color="#555555", fontsize=10)

    bracket(tops[1], tops[0] + h, "in each of the 132 SMs")
    bracket(tops[3], tops[2] + h, "one per GPU")

    # The links between levels: arrows at the centre, labels to the right.
    links = [
        ("registers ↔ shared memory (ld.shared, ldmatrix)",
         "128 B per clock per SM = 33 TB/s over 132 SMs at 1.98 GHz",
         "architecture figure, not measured by the course", GREY),
        ("SMs ↔ L2 (crossbar): l2_*_bytes, the papers' \"HBM accesses\"",
         "measured 7.3 TB/s: 344 GB in 47 ms (chapter 01, coalesced matmul)",
         "a rate a kernel reached; NVIDIA publishes no L2 figure", "black"),
        ("L2 ↔ HBM: the course's dram_*_bytes",
         "measured 2.85 TB/s (read + write): copy of 1 GB (io_probe)",
         "datasheet: 3.35 TB/s", "black"),
    ]
    for n, (what, number, note, colour) in enumerate(links):
        y_hi = tops[n]
        y_lo = tops[n + 1] + h
        arrow(ax, cx, y_lo + 0.03, cx, y_hi - 0.03, style="<|-|>", lw=2, scale=16)
        ym = (y_hi + y_lo) / 2
        x = 7.1
        ax.plot([cx + 0.15, x - 0.1], [ym, ym], color="#BBBBBB", lw=1, ls=":")
        ax.text(x, ym + 0.26, what, fontsize=10.5, weight="bold", va="center")
        ax.text(x, ym, number, fontsize=10.5, va="center",
                color="black" if colour == "black" else "#444444")
        ax.text(x, ym - 0.26, note, fontsize=9.5, va="center", style="italic", color="#555555")

    ax.text(0.0, 7.15, "H100 80GB HBM3: where the bytes live and how fast they move", fontsize=13,
            weight="bold", va="center")
    save(fig, "memory_hierarchy.png")


if __name__ == "__main__":
    main()
