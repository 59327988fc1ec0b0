"""The producer/consumer pipeline of one thread block of stage 08 (rungs 3-5, FlashAttention-3).

From 08_flash_v3/fa3_3_warp_specialized.cu and fa3_common.cuh (Smem, Pipeline):
- 384 threads, three warpgroups. Warpgroup 0 is the producer: setmaxnreg.dec gives its registers
  away (24 a thread) and one of its threads issues every TMA copy (Pipeline::produce). Warpgroups 1
  and 2 are the consumers (setmaxnreg.inc: 240 a thread; 128·24 + 256·240 = 64,512 of the SM's
  65,536): consumer c owns query rows 64c … 64c + 63 of the block's Br = 128 and runs both
  products on the tensor cores (wgmma): S = Q·K_jᵀ with both operands in shared memory, O += P̃·V_j
  with P̃ from registers.
- Shared memory: Q (128 rows × d), then a ring of kStages = 2 slots, each a K tile and a V tile of
  Bc = 128 keys × d (32 KB each at d = 128, fp16/bf16: 160 KB in all), then the mbarriers. Load
  number `it` uses slot it % 2 in phase (it / 2) & 1.
- Each K tile and each V tile has two mbarriers. full_k, full_v (count 1): the producer's
  arrive.expect_tx announces the tile's bytes, the copy engine's bytes complete the phase, the
  consumers wait on it (try_wait.parity). empty_k, empty_v (count 8): lane 0 of each consumer warp
  arrives when the warp is done with the tile (K_j right after S = Q·K_jᵀ, V_j after P̃·V_j); the
  producer waits on it before it refills the slot (the first round passes at once: it asks for the
  parity of the phase before the first). Q has a full barrier of its own (q_full; q_empty is
  rung 6's).
"""
from common import (BLUE, GREEN, GREY, LIGHT, PURPLE, SKY, VERMILION, YELLOW, arrow, box, canvas,
                    save, tint)

PRODUCER, COPY = VERMILION, PURPLE
CONSUMER = [BLUE, SKY]
FULL_FACE, EMPTY_FACE = tint(YELLOW, 0.55), LIGHT


def chip(ax, x, y, kind, w=0.58, h=0.26, fontsize=8):
    box(ax, x, y, w, h, face=FULL_FACE if kind == "full" else EMPTY_FACE, edge="black", lw=0.9)
    ax.text(x + w / 2, y + h / 2, kind, ha="center", va="center", fontsize=fontsize)


def tile(ax, x, y, w, h, text, face):
    box(ax, x, y, w, h, face=face, edge="black", lw=1.0)
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9.5)


TOP, BOTTOM = 7.25, 3.05  # the main diagram


def main_diagram(ax):
    h = TOP - BOTTOM
    # HBM (through L2): Q, K and V of head h, with the tiles being copied.
    box(ax, 0.0, BOTTOM, 1.2, h, face=tint(PURPLE, 0.12), edge=PURPLE, lw=1.8)
    ax.text(0.6, TOP - 0.25, "HBM / L2", ha="center", va="center", fontsize=11, weight="bold")
    ax.text(0.6, TOP - 0.52, "head h", ha="center", va="center", fontsize=8.5, color="#444444")
    y0, y1 = BOTTOM + 0.3, TOP - 1.05
    for n, (name, x) in enumerate((("Q", 0.12), ("K", 0.47), ("V", 0.82))):
        box(ax, x, y0, 0.26, y1 - y0, face="white", edge="#555555", lw=0.8)
        step = (y1 - y0) / 8
        for k in range(1, 8):
            ax.plot([x, x + 0.26], [y0 + k * step] * 2, color="#BBBBBB", lw=0.6)
        lit = 5 if n == 0 else 2  # the query block of this thread block; the key block in flight
        box(ax, x, y0 + lit * step, 0.26, step, face=tint(PURPLE, 0.55), edge="#555555", lw=0.8)
        ax.text(x + 0.13, y1 + 0.17, name, ha="center", va="center", fontsize=10)
    ax.text(0.6, BOTTOM + 0.15, "N rows × d each", ha="center", va="center", fontsize=7.5,
            color="#444444")

    # The producer warpgroup and the copy engine.
    px, pw = 1.45, 1.85
    box(ax, px, TOP - 1.6, pw, 1.6, face=tint(PRODUCER, 0.15), edge=PRODUCER, lw=1.8)
    ax.text(px + pw / 2, TOP - 0.27, "warpgroup 0", ha="center", va="center", fontsize=10.5,
            weight="bold")
    ax.text(px + pw / 2, TOP - 0.55, "producer", ha="center", va="center", fontsize=10,
            weight="bold", color=PRODUCER)
    ax.text(px + pw / 2, TOP - 1.1, "setmaxnreg.dec: 24 regs\none thread issues\nevery copy",
            ha="center", va="center", fontsize=8.5, linespacing=1.15)
    ty = 3.75  # the copy engine's bottom
    box(ax, px + 0.1, ty, pw - 0.2, 1.0, face=tint(COPY, 0.25), edge=COPY, lw=1.8)
    ax.text(px + pw / 2, ty + 0.75, "TMA", ha="center", va="center", fontsize=10.5,
            weight="bold")
    ax.text(px + pw / 2, ty + 0.35, "copy engine: boxes of\n128 rows × 64 columns", ha="center",
            va="center", fontsize=8, linespacing=1.1)
    arrow(ax, px + pw / 2, TOP - 1.62, px + pw / 2, ty + 1.02, colour=PRODUCER, lw=1.6)
    ax.text(px + pw / 2 + 0.06, (TOP - 1.6 + ty + 1.0) / 2, "issues", ha="left", va="center",
            fontsize=8, color=PRODUCER)
    arrow(ax, 1.22, ty + 0.5, px + 0.08, ty + 0.5, colour=COPY, lw=3, scale=14)

    # Shared memory: Q, then two slots of K and V, each tile with its barriers.
    sx, sw = 3.55, 3.0
    box(ax, sx, BOTTOM, sw, h, face=tint(GREEN, 0.12), edge=GREEN, lw=1.8)
    ax.text(sx + 0.1, TOP - 0.22, "shared memory", ha="left", va="center", fontsize=11,
            weight="bold")
    ax.text(sx + sw / 2, BOTTOM + 0.14, "a tile: 128 rows × d; 160 KB at d = 128",
            ha="center", va="center", fontsize=7.5, color="#444444")
    tx, tw, cw_ = sx + 0.12, 1.55, 0.56  # tiles; chips
    fx, ex = tx + tw + 0.08, tx + tw + 0.08 + cw_ + 0.05  # full and empty chips
    # Q: rows 0-63 for consumer 0, 64-127 for consumer 1.
    qy = TOP - 1.08
    for c in (0, 1):
        box(ax, tx + c * tw / 2, qy, tw / 2, 0.58, face=tint(CONSUMER[c], 0.35), edge="black",
            lw=1.0)
        ax.text(tx + c * tw / 2 + tw / 4, qy + 0.29, f"Q rows\n{64 * c}–{64 * c + 63}",
                ha="center", va="center", fontsize=8, linespacing=1.05)
    ax.text(tx + tw / 2, qy - 0.13, "Q: loaded once", ha="center", va="center",
            fontsize=7.5, color="#444444")
    chip(ax, fx, qy + 0.16, "full", w=cw_)
    # The ring.
    slots = [("slot 0", "$K_j$", "$V_j$", "in use"),
             ("slot 1", "$K_{j+1}$", "$V_{j+1}$", "being filled")]
    for s, (name, k, v, state) in enumerate(slots):
        top = qy - 0.32 - s * 1.33  # top of the slot's frame
        box(ax, sx + 0.06, top - 1.2, sw - 0.12, 1.2, face="none", edge=GREEN, lw=1.0, ls="--")
        ax.text(sx + 0.12, top - 0.14, f"{name}: {state}", ha="left", va="center", fontsize=8,
                style="italic", color="#333333")
        ax.text(fx + cw_ / 2, top - 0.14, "full", ha="center", va="center", fontsize=7,
                color="#666666")
        ax.text(ex + cw_ / 2, top - 0.14, "empty", ha="center", va="center", fontsize=7,
                color="#666666")
        for r, (name_t, what) in enumerate(((k, "keys"), (v, "values"))):
            y = top - 0.66 - r * 0.47  # bottom of the tile
            tile(ax, tx, y, tw, 0.4, f"{name_t}   ({what})", "white")
            box(ax, fx, y + 0.07, cw_, 0.26, face=FULL_FACE, edge="black", lw=0.9)
            box(ax, ex, y + 0.07, cw_, 0.26, face=EMPTY_FACE, edge="black", lw=0.9)
        if s == 1:  # the copy engine fills the slot
            arrow(ax, px + pw - 0.08, ty + 0.3, sx + 0.04, top - 0.65, colour=COPY, lw=3,
                  scale=14)

    # The consumers.
    cx, cw = 7.65, 2.35
    ch = (h - 0.12) / 2
    for c in (0, 1):
        y = TOP - ch - c * (ch + 0.12)  # bottom
        box(ax, cx, y, cw, ch, face=tint(CONSUMER[c], 0.12), edge=CONSUMER[c], lw=1.8)
        ax.text(cx + cw / 2, y + ch - 0.25, f"warpgroup {c + 1}", ha="center", va="center",
                fontsize=10.5, weight="bold")
        ax.text(cx + cw / 2, y + ch - 0.52, f"consumer {c}", ha="center", va="center",
                fontsize=10, weight="bold", color=BLUE)
        ax.text(cx + cw / 2, y + ch - 0.92,
                f"setmaxnreg.inc: 240 regs\nquery rows {64 * c}–{64 * c + 63}",
                ha="center", va="center", fontsize=8.5, linespacing=1.15)
        box(ax, cx + 0.1, y + 0.1, cw - 0.2, 0.75, face="white", edge="black", lw=0.9)
        ax.text(cx + cw / 2, y + 0.475,
                "tensor cores (wgmma):\n$S = Q K_j^T$,  $O$ += $\\tilde P V_j$\n"
                "registers: $S$, $\\tilde P$, $O$, $m$, $l$",
                ha="center", va="center", fontsize=8.5, linespacing=1.2)
        ya = y + ch / 2 + 0.1
        arrow(ax, sx + sw + 0.03, ya, cx - 0.03, ya, colour=GREY, lw=3, scale=14)
        ax.text((sx + sw + cx) / 2, ya + 0.1, f"Q rows {64 * c}–{64 * c + 63}\n$K_j$, $V_j$",
                ha="center", va="bottom", fontsize=7.5, color="#444444", linespacing=1.1)
        ax.text((sx + sw + cx) / 2, ya - 0.1, "operands", ha="center", va="top", fontsize=7.5,
                color="#444444", style="italic")


def handshake(ax):
    """One tile's two barriers: who arrives, who waits."""
    y0, h = 0.0, 2.8
    box(ax, 0.0, y0, 10.0, h, face="white", edge="#888888", lw=1.0)
    ax.text(0.12, y0 + h - 0.2, "The two mbarriers of one tile, e.g. $K_j$ in slot 0 "
            "(every K and V tile has its pair; Q has a full one only)", ha="left", va="center",
            fontsize=10, weight="bold")
    # The producer.
    box(ax, 0.2, 0.3, 2.1, 1.85, face=tint(PRODUCER, 0.15), edge=PRODUCER, lw=1.6)
    ax.text(1.25, 1.88, "producer", ha="center", va="center", fontsize=10, weight="bold",
            color=PRODUCER)
    ax.text(1.25, 1.15, "one thread\nload it: slot it mod 2,\nphase (it div 2) mod 2",
            ha="center", va="center", fontsize=8.5, linespacing=1.15)
    # The copy engine.
    box(ax, 2.85, 1.98, 1.3, 0.4, face=tint(COPY, 0.25), edge=COPY, lw=1.4)
    ax.text(3.5, 2.18, "TMA copy", ha="center", va="center", fontsize=9)
    arrow(ax, 2.32, 2.0, 2.83, 2.12, colour=PRODUCER, lw=1.4, scale=10)
    # The barriers.
    bx, bw = 4.7, 1.15
    box(ax, bx, 1.45, bw, 0.42, face=FULL_FACE, edge="black", lw=1.2)
    ax.text(bx + bw / 2, 1.66, "full", ha="center", va="center", fontsize=10, weight="bold")
    ax.text(bx + bw / 2, 1.33, "count 1 + the bytes", ha="center", va="center", fontsize=7.5,
            color="#444444")
    box(ax, bx, 0.3, bw, 0.42, face=EMPTY_FACE, edge="black", lw=1.2)
    ax.text(bx + bw / 2, 0.51, "empty", ha="center", va="center", fontsize=10, weight="bold")
    ax.text(bx + bw / 2, 0.18, "count 8", ha="center", va="center", fontsize=7.5,
            color="#444444")
    # The consumers.
    box(ax, 7.7, 0.3, 2.1, 1.85, face=tint(BLUE, 0.12), edge=BLUE, lw=1.6)
    ax.text(8.75, 1.88, "consumers", ha="center", va="center", fontsize=10, weight="bold",
            color=BLUE)
    ax.text(8.75, 1.05, "8 warps (both\nwarpgroups); give\n$K_j$ back after $S = Q K_j^T$,\n"
            "$V_j$ after $O$ += $\\tilde P V_j$", ha="center", va="center", fontsize=8.5,
            linespacing=1.2)
    # Arrows: solid = arrive on the barrier, dashed = wait on it (the barrier lets the waiter go).
    mid_l, mid_r = (2.3 + bx) / 2, (bx + bw + 7.7) / 2
    arrow(ax, 2.32, 0.51, bx - 0.02, 0.51, colour=PRODUCER, lw=1.6, style="<|-", ls="--")
    ax.text(mid_l, 0.62, "① try_wait.parity:\nis the slot free?", ha="center", va="bottom",
            fontsize=8.5, color=PRODUCER, linespacing=1.1)
    ax.text(mid_l, 0.4, "(the first round\npasses at once)", ha="center", va="top", fontsize=8,
            color="#333333", linespacing=1.1)
    arrow(ax, 2.32, 1.66, bx - 0.02, 1.66, colour=PRODUCER, lw=1.6)
    ax.text(mid_l, 1.58, "② arrive.expect_tx:\n32 KB to come", ha="center", va="top",
            fontsize=8.5, color=PRODUCER, linespacing=1.1)
    arrow(ax, 4.17, 2.1, bx + 0.35, 1.89, colour=COPY, lw=1.6)
    ax.text(bx + 0.05, 2.2, "③ the bytes land", ha="left", va="center", fontsize=8.5,
            color=COPY)
    arrow(ax, bx + bw + 0.02, 1.66, 7.68, 1.66, colour=BLUE, lw=1.6, ls="--")
    ax.text(mid_r, 1.58, "④ try_wait.parity:\nthe tile is there", ha="center", va="top",
            fontsize=8.5, color=BLUE, linespacing=1.1)
    arrow(ax, 7.68, 0.51, bx + bw + 0.02, 0.51, colour=BLUE, lw=1.6)
    ax.text(mid_r, 0.62, "⑤ arrive (lane 0 of\neach warp) when done", ha="center",
            va="bottom", fontsize=8.5, color=BLUE, linespacing=1.1)
    # Legend.
    ax.plot([6.05, 6.45], [0.16, 0.16], color="black", lw=1.4)
    ax.text(6.5, 0.16, "arrives", ha="left", va="center", fontsize=8)
    ax.plot([7.05, 7.45], [0.16, 0.16], color="black", lw=1.4, ls="--")
    ax.text(7.5, 0.16, "waits on the barrier's phase", ha="left", va="center", fontsize=8)


def main():
    fig, ax = canvas(10.1, 8.1)
    ax.set_xlim(-0.05, 10.05)
    ax.set_ylim(-0.05, 8.05)
    ax.text(0.0, 7.88, "One thread block of rungs 3–5: a producer warpgroup feeds two consumer "
            "warpgroups", fontsize=12, weight="bold", va="center")
    ax.text(0.0, 7.56, "384 threads; Br = Bc = 128, d = 128, kStages = 2; registers 128 × 24 + "
            "256 × 240 = 64,512 of the SM's 65,536", fontsize=9.5, va="center", color="#333333")
    main_diagram(ax)
    handshake(ax)
    save(fig, "fa3_pipeline.png")


if __name__ == "__main__":
    main()
