"""Shared helpers for the concept figures in docs/figures/.

Each figure has its own script in this folder (python3 scripts/figures/<name>.py); each writes one
PNG (or two) into docs/figures/. They need matplotlib only (Debian: python3-matplotlib) and draw
with plain rectangles and text, so that what they show is spelled out in the script.
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "docs", "figures")

# One palette for the whole course (colour-blind safe: Okabe and Ito's eight colours).
BLUE, ORANGE, GREEN, PURPLE = "#0072B2", "#E69F00", "#009E73", "#CC79A7"
SKY, VERMILION, YELLOW, GREY = "#56B4E9", "#D55E00", "#F0E442", "#999999"
EIGHT = [BLUE, ORANGE, GREEN, PURPLE, SKY, VERMILION, YELLOW, "#7F7F7F"]
LIGHT = "#EEEEEE"

plt.rcParams.update({
    "font.family": "DejaVu Sans",
    "font.size": 11,
    "axes.titlesize": 13,
    "axes.titleweight": "bold",
    "savefig.dpi": 150,
})


def tint(colour, amount):
    """colour mixed with white: amount 0 is white, 1 the colour itself."""
    r, g, b = matplotlib.colors.to_rgb(colour)
    return (1 - amount * (1 - r), 1 - amount * (1 - g), 1 - amount * (1 - b))


def canvas(width, height, **kw):
    """A figure with one axis in data units = inches-free drawing units, no ticks or frame."""
    fig, ax = plt.subplots(figsize=(width, height), **kw)
    ax.set_axis_off()
    return fig, ax


def box(ax, x, y, w, h, face="white", edge="black", lw=1.0, **kw):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor=edge, linewidth=lw, **kw))


def arrow(ax, x0, y0, x1, y1, colour="black", lw=1.5, style="-|>", scale=14, **kw):
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle=style, mutation_scale=scale,
                                 color=colour, linewidth=lw, **kw))


def save(fig, name):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    fig.savefig(path, bbox_inches="tight", pad_inches=0.1, facecolor="white")
    plt.close(fig)
    print(os.path.relpath(path, ROOT))
