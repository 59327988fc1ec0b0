"""Chapter 09's rung 7 (docs/figures/exp_from_bits.png): P̃ = 2^x without the exponential unit. An
fp16 value's bit pattern, read as an integer, is about 1024·(log₂ v + 15), so writing the integer
1024·(x + 15) − δ as a pattern gives 2^⌊x⌋·(1 + frac x) shifted by δ: a straight line in each binade,
within about ±3% of 2^x. Rounded to e4m3 (three mantissa bits, steps of 12.5% of a binade), as
every P̃ of the FP8 kernels is, the line's error is smaller than the rounding's. The arithmetic is
fp8.cpp's lin_fp16 (its constants from fp8.hpp: R = 0x7BFF, the magic 1.5·2²³, δ = 44) in float32."""
import math
import struct

import numpy as np

from common import BLUE, GREY, ORANGE, VERMILION, plt, save

R, MAGIC, DELTA = np.float32(31743.0), np.float32(12582912.0), 44.0


def lin_fp16(x):
    """2^x for x <= 0 by two FFMAs (the first saturating) and an fp16 pattern (base = 0, c = 1)."""
    a = np.float32(1024.0 / 31743.0)
    b = np.float32((1024.0 * 15.0 - DELTA) / 31743.0)
    t = min(max(np.float32(np.float32(x) * a + b), np.float32(0)), np.float32(1))
    y = np.float32(t * R + MAGIC)
    h = struct.unpack("<I", struct.pack("<f", float(y)))[0] & 0xFFFF
    e, m = h >> 10, h & 0x3FF
    return math.ldexp(m, -24) if e == 0 else math.ldexp(1 + m / 1024, e - 15)


def to_e4m3(v):
    """v > 0 to the nearest e4m3 value (normal range; ties away, enough for a figure)."""
    e = math.floor(math.log2(v))
    if e < -6:
        return round(v / 2 ** -9) * 2 ** -9
    return round(v / 2 ** e * 8) / 8 * 2 ** e


def main():
    xs = np.linspace(-4, 0, 1601)
    exact = 2.0 ** xs
    lin = np.array([lin_fp16(x) for x in xs])
    lin8 = np.array([to_e4m3(v) for v in lin])
    exact8 = np.array([to_e4m3(v) for v in exact])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7.4), sharex=True, gridspec_kw={"height_ratios": [1.3, 1]})
    top.plot(xs, exact, color="black", linewidth=1.6, label="2^x")
    top.plot(xs, lin, color=BLUE, linewidth=1.4, label="fp16 pattern 1024·(x + 15) − δ (rung 7's two FFMAs)")
    top.step(xs, lin8, color=ORANGE, linewidth=1.2, where="mid", label="that, rounded to e4m3 (the P̃ byte)")
    top.set_ylabel("P̃")
    top.legend(fontsize=9, frameon=False, loc="upper left")
    top.set_title("2^x from fp16's bit pattern, then e4m3: what rung 7 gives the tensor cores")
    bottom.plot(xs, 100 * (lin / exact - 1), color=BLUE, linewidth=1.3, label="fp16 pattern against 2^x")
    bottom.plot(xs, 100 * (exact8 / exact - 1), color=GREY, linewidth=1.0,
                label="e4m3 rounding of the exact 2^x (what plain FP8 keeps)")
    bottom.plot(xs, 100 * (lin8 / exact - 1), color=VERMILION, linewidth=1.0, alpha=0.8,
                label="rung 7's byte against 2^x")
    bottom.axhline(0, color="black", linewidth=0.6)
    bottom.set_ylabel("relative error, %")
    bottom.set_xlabel("x = S·c − m·c (the exponent of P̃; 0 at the row's max)")
    bottom.set_ylim(-15, 9)
    bottom.legend(fontsize=9, frameon=False, loc="lower left", ncol=2)
    for k in range(-4, 1):
        for ax in (top, bottom):
            ax.axvline(k, color=GREY, linewidth=0.4, linestyle=":")
    fig.tight_layout()
    save(fig, "exp_from_bits.png")


if __name__ == "__main__":
    main()
