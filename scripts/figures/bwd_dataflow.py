"""The backward's dataflow in one step of stage 11's rung 1 (docs/figures/bwd_dataflow.png).

From 11_flash_v3_backward/fa3_bwd_1_wgmma.cu: a thread block holds key block j (K_j, V_j) in shared
memory; a warpgroup owns 64 of its keys. Per query block i: Sᵀ = K_w·Q_iᵀ and dPᵀ = V_w·dO_iᵀ (SS),
Pᵀ = exp(scale·Sᵀ − L_i) and dSᵀ = Pᵀ ∘ (dPᵀ − D_i) in registers, dV_w += Pᵀ·dO_i and dK_w += dSᵀ·Q_i
(RS: Pᵀ, dSᵀ from registers), dSᵀ stored to shared memory, dQ_i's share = dS·K_w (SS, both
operands MN-major) added into dQacc in global memory.
"""
from common import BLUE, GREEN, GREY, ORANGE, PURPLE, VERMILION, arrow, box, canvas, save, tint

SMEM, REGS, GLOBAL = tint(BLUE, 0.25), tint(GREEN, 0.3), tint(GREY, 0.35)


def node(ax, x, y, text, face, w=2.2, h=0.62):
    box(ax, x, y, w, h, face=face, edge="black", lw=1.0)
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=10)
    return x, y, w, h


def link(ax, a, b, label, colour="black", dy=0.0, side="right"):
    (xa, ya, wa, ha), (xb, yb, wb, hb) = a, b
    x0, y0 = xa + wa / 2, ya if yb < ya else ya + ha
    x1, y1 = xb + wb / 2, yb + hb if yb < ya else yb
    arrow(ax, x0, y0, x1, y1, colour=colour, lw=1.4)
    ax.text((x0 + x1) / 2 + (0.08 if side == "right" else -0.08), (y0 + y1) / 2 + dy, label,
            ha="left" if side == "right" else "right", va="center", fontsize=8.5, color=colour)


def main():
    fig, ax = canvas(12.5, 6.6)
    ax.set_xlim(0, 12.5)
    ax.set_ylim(0, 6.6)
    # shared memory, top row
    K = node(ax, 0.2, 5.6, "K_j (Bc × d)", SMEM)  # a warpgroup's 64 rows of it: K_w
    V = node(ax, 2.6, 5.6, "V_j (Bc × d)", SMEM)
    Q = node(ax, 5.0, 5.6, "Q_i (Br × d)", SMEM)
    dO = node(ax, 7.4, 5.6, "dO_i (Br × d)", SMEM)
    LD = node(ax, 9.8, 5.6, "L_i, D_i", SMEM)
    # registers, middle rows
    St = node(ax, 1.2, 3.9, "Sᵀ = K_w·Q_iᵀ", REGS)
    dPt = node(ax, 4.2, 3.9, "dPᵀ = V_w·dO_iᵀ", REGS)
    P = node(ax, 1.2, 2.4, "Pᵀ = exp(scale·Sᵀ − L)", REGS, w=2.6)
    dS = node(ax, 4.5, 2.4, "dSᵀ = Pᵀ ∘ (dPᵀ − D)", REGS, w=2.6)
    dV = node(ax, 0.4, 0.75, "dV_w += Pᵀ·dO_i", REGS)
    dK = node(ax, 3.1, 0.75, "dK_w += dSᵀ·Q_i", REGS)
    dSs = node(ax, 7.8, 2.4, "dSᵀ (64 × Br)", SMEM)
    dQ = node(ax, 7.8, 0.75, "dQ_i share = dS·K_w", REGS)
    acc = node(ax, 10.5, 0.75, "dQacc (fp32)", GLOBAL, w=1.8)
    link(ax, K, St, "SS", BLUE)
    link(ax, Q, St, "", BLUE)
    link(ax, V, dPt, "SS", BLUE)
    link(ax, dO, dPt, "", BLUE)
    link(ax, St, P, "")
    link(ax, dPt, dS, "")
    link(ax, LD, dS, "L, D by column (query)", GREY, side="left")
    link(ax, P, dV, "RS (A = Pᵀ)", GREEN, side="left")
    link(ax, dS, dK, "RS (A = dSᵀ)", GREEN, side="left")
    arrow(ax, 7.1, 2.71, 7.8, 2.71, colour=ORANGE, lw=1.4)
    ax.text(7.45, 2.95, "store", ha="center", fontsize=8.5, color=ORANGE)
    Kw = node(ax, 10.5, 2.4, "K_w (K_j's tile)", SMEM, w=1.8)
    link(ax, dSs, dQ, "SS: A = dS, B = K_w,\nboth MN-major", PURPLE)
    arrow(ax, 11.4, 2.4, 9.4, 1.37, colour=PURPLE, lw=1.4)
    arrow(ax, 10.0, 1.06, 10.5, 1.06, colour=VERMILION, lw=1.4)
    ax.text(10.25, 1.35, "red.add", ha="center", fontsize=8.5, color=VERMILION)
    for k, (face, text) in enumerate([(SMEM, "shared memory"), (REGS, "a warpgroup's registers (its 64 keys)"),
                                      (GLOBAL, "global memory")]):
        box(ax, 0.2 + 3.6 * k, 0.05, 0.3, 0.22, face=face, edge="black", lw=0.8)
        ax.text(0.6 + 3.6 * k, 0.16, text, va="center", fontsize=9)
    ax.set_title("One step of stage 11's rung 1: key block j against query block i", fontsize=12)
    save(fig, "bwd_dataflow.png")


if __name__ == "__main__":
    main()
