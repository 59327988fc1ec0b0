"""Chapter 09's key order of Vᵀ (docs/figures/fp8_key_order.png). In S's accumulator, the quad of
threads t = 0..3 that holds one row has, in each group of 32 keys, keys 16h + 8a + 2t + b (h, a, b
in {0, 1}); the e4m3 A operand of P̃·V wants its register's four bytes to be four neighbouring
positions 4t .. 4t + 3 (and 16 + 4t ..). Rather than move bytes between threads, each thread packs
the keys it has, and the quantisation kernel stores key 16h + 8a + 2t + b of Vᵀ at position
16h + 4t + 2a + b (fp8.hpp's key_position): P̃ and V agree on the order, and the sum over keys does
not care what it is."""
import matplotlib.pyplot as plt

from common import BLUE, GREEN, ORANGE, PURPLE, arrow, box, save, tint

QUAD = [BLUE, ORANGE, GREEN, PURPLE]
SHOWN = 1  # the thread whose keys get arrows


def key_position(key):
    h, rest = divmod(key, 16)
    a, rest = divmod(rest, 8)
    t, b = divmod(rest, 2)
    return 16 * h + 4 * t + 2 * a + b


def thread_of(key):
    return (key % 8) // 2


def main():
    fig, ax = plt.subplots(figsize=(13, 4.6))
    ax.set_axis_off()
    y_top, y_bottom = 3.2, 0
    for key in range(32):
        t = thread_of(key)
        box(ax, key, y_top, 1, 1, face=tint(QUAD[t], 0.55), edge="white", lw=1)
        ax.text(key + 0.5, y_top + 0.5, str(key), ha="center", va="center", fontsize=9)
        pos = key_position(key)
        box(ax, pos, y_bottom, 1, 1, face=tint(QUAD[t], 0.55), edge="white", lw=1)
        ax.text(pos + 0.5, y_bottom + 0.5, str(key), ha="center", va="center", fontsize=9)
        if t == SHOWN:
            arrow(ax, key + 0.5, y_top - 0.05, pos + 0.5, y_bottom + 1.05, colour="black", lw=1.0, scale=9)
    for t in range(4):
        for h in range(2):
            box(ax, 16 * h + 4 * t, y_bottom, 4, 1, face="none", edge="black", lw=1.6)
    ax.text(-0.4, y_top + 0.5, "keys in S's accumulator\n(colour: the thread of the quad)", ha="right", va="center",
            fontsize=10)
    ax.text(-0.4, y_bottom + 0.5, "positions of Vᵀ's row\n(number: the key stored there)", ha="right", va="center",
            fontsize=10)
    for pos in range(0, 32, 4):
        ax.text(pos + 2, y_bottom - 0.15, f"t = {(pos % 16) // 4}", ha="center", va="top", fontsize=8)
    ax.text(16, y_top + 1.5, "thread t holds keys 16h + 8a + 2t + b and packs them into one register (a box of 4 below),\n"
            f"whose byte i the tensor cores multiply by Vᵀ's position 4t + i (+16): key → 16h + 4t + 2a + b (arrows: thread {SHOWN})",
            ha="center", va="bottom", fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=tint(c, 0.55)) for c in QUAD]
    ax.legend(handles, [f"thread {t}" for t in range(4)], ncol=4, loc="lower center", bbox_to_anchor=(0.55, -0.16),
              frameon=False, fontsize=9)
    ax.set_xlim(-7, 32.3)
    ax.set_ylim(-1.3, 6.0)
    ax.set_aspect("equal")
    ax.set_title("FP8's P̃·V: Vᵀ's keys stored in the order the threads already hold P̃ (one group of 32 keys)")
    save(fig, "fp8_key_order.png")


if __name__ == "__main__":
    main()
