"""How the two consumer warpgroups of stage 08 share the tensor cores: rungs 3, 4 and 5.

A timeline of one thread block's two consumer warpgroups (consumer c = warpgroup c + 1 of the block,
64 query rows each) and of the tensor cores they share, from a small simulation of the loops of
08_flash_v3/fa3_3_warp_specialized.cu, fa3_4_pingpong.cu and fa3_5_overlap.cu:
- rung 3: per key block j, issue S_j = Q·K_jᵀ, wait, softmax, issue P̃_j·V_j, wait. Both consumers
  leave the barrier of Q and K_0 together, and nothing sets them apart: their products share the
  tensor cores (each at half rate) and their softmaxes leave the tensor cores idle.
- rung 4: a step issues S_j and P̃_{j−1}·V_{j−1} (one commit group), waits for both, then does block j's
  softmax. Before issuing, consumer c waits on its named barrier (bar.sync kSched + c, "my turn");
  once issued, it arrives on the other's (bar.arrive kSched + 1 − c, "your turn"); consumer 1 arrives
  once at the start, so consumer 0 goes first. The other's products are issued after these, and run
  after them: the tensor cores alternate, one consumer's softmax under the other's products.
- rung 5: the same turns; S_j and P̃_{j−1}·V_{j−1} are two commit groups. wgmma_wait<1> returns when S_j
  is done, the scores' half of the softmax (new max, P̃ in place, l) runs while P̃_{j−1}·V_{j−1} is
  still on the tensor cores, then wgmma_wait<0>, then O's rescale and P̃'s packing.
Model (illustrative proportions, d = 128): a consumer's S = Q·K_jᵀ takes 1.0 of the tensor cores'
time, P̃·V_j 1.0, the softmax 1.3 (rung 5: 1.1 on the scores + 0.2 for O's rescale and the packing),
issuing 0.1. The tensor cores run products in the order they were issued; products issued at the
same moment share them equally. Loads are assumed to be ready (the producer runs ahead).
"""
import matplotlib.pyplot as plt
from matplotlib.patches import Patch, Rectangle
from matplotlib.lines import Line2D

from common import BLUE, GREEN, ORANGE, PURPLE, VERMILION, GREY, arrow, save, tint

TICK = 100  # ticks a unit of time
S_T, PV_T, SOFTMAX_T, SCORES_T, FINISH_T, ISSUE_T = 100, 100, 130, 110, 20, 10
WINDOW = 13.0  # units of time drawn
BLOCKS = 6

KIND_COLOUR = {"S": BLUE, "PV": GREEN, "softmax": ORANGE, "scores": ORANGE, "finish": VERMILION}


def program(rung, c, n=BLOCKS):
    """Consumer c's operations, as in the rung's loop."""
    S = lambda j: ("S", j, S_T)  # noqa: E731
    PV = lambda j: ("PV", j, PV_T)  # noqa: E731
    ops = []
    if rung == 3:
        for j in range(n):
            ops += [("issue", [[S(j)]]), ("wait", 0), ("work", "softmax", j, SOFTMAX_T),
                    ("issue", [[PV(j)]]), ("wait", 0)]
        return ops
    if c == 1:
        ops.append(("arrive",))  # consumer 0 goes first
    ops += [("sync",), ("issue", [[S(0)]]), ("arrive",), ("wait", 0),
            ("work", "softmax", 0, SOFTMAX_T)]
    for j in range(1, n):
        if rung == 4:  # one commit group, one wait, then the whole softmax
            ops += [("sync",), ("issue", [[S(j), PV(j - 1)]]), ("arrive",), ("wait", 0),
                    ("work", "softmax", j, SOFTMAX_T)]
        else:  # two groups: the scores' softmax under P̃_{j−1}·V_{j−1}
            ops += [("sync",), ("issue", [[S(j)], [PV(j - 1)]]), ("arrive",), ("wait", 1),
                    ("work", "scores", j, SCORES_T), ("wait", 0), ("work", "finish", j, FINISH_T)]
    ops += [("sync",), ("issue", [[PV(n - 1)]])] + ([("arrive",)] if c == 0 else []) + [("wait", 0)]
    return ops


def simulate(rung):
    """Returns per consumer: work bars, waits and events; and the tensor cores' products."""
    progs = [program(rung, c) for c in (0, 1)]
    pc = [0, 0]
    busy_until = [None, None]
    arrivals = [0, 0]  # arrivals on consumer c's turn barrier (kSched + c)
    syncs = [0, 0]
    groups = [[], []]  # per consumer: list of groups, each a list of product records
    products = []  # dicts: consumer, kind, j, issued, left, served ticks
    log = [{"work": [], "wait": [], "sync": [], "arrive": []} for _ in (0, 1)]
    t = 0
    end = int(WINDOW * TICK) + 400
    while t < end:
        changed = True
        while changed:  # the operations that take no time
            changed = False
            for c in (0, 1):
                if busy_until[c] is not None or pc[c] >= len(progs[c]):
                    continue
                op = progs[c][pc[c]]
                if op[0] == "arrive":
                    arrivals[1 - c] += 1
                    log[c]["arrive"].append(t)
                elif op[0] == "sync":
                    if arrivals[c] <= syncs[c]:
                        continue
                    syncs[c] += 1
                    log[c]["sync"].append(t)
                elif op[0] == "wait":
                    if sum(1 for g in groups[c] if any(p["left"] > 1e-9 for p in g)) > op[1]:
                        continue
                elif op[0] == "issue":
                    for group in op[1]:
                        recs = [dict(consumer=c, kind=k, j=j, issued=t, left=float(d), served=[])
                                for k, j, d in group]
                        products.extend(recs)
                        groups[c].append(recs)
                    busy_until[c] = t + ISSUE_T
                    log[c]["work"].append(("issue", None, t, t + ISSUE_T))
                elif op[0] == "work":
                    busy_until[c] = t + op[3]
                    log[c]["work"].append((op[1], op[2], t, t + op[3]))
                pc[c] += 1
                changed = True
        for c in (0, 1):  # blocked on a barrier or on its products
            if busy_until[c] is None and pc[c] < len(progs[c]):
                log[c]["wait"].append((progs[c][pc[c]][0], t))
        # The tensor cores: each consumer's products in its order; of the two consumers' next ones,
        # the earlier issued runs, and two issued at the same moment share the tensor cores.
        fronts = [next((p for p in products if p["consumer"] == c and p["left"] > 1e-9), None)
                  for c in (0, 1)]
        fronts = [p for p in fronts if p is not None]
        if fronts:
            first = min(p["issued"] for p in fronts)
            now = [p for p in fronts if p["issued"] == first]
            for p in now:
                p["left"] -= 1.0 / len(now)
                p["served"].append((t, len(now)))
        t += 1
        for c in (0, 1):
            if busy_until[c] == t:
                busy_until[c] = None
    return log, products


def runs(ticks):
    """[(kind, start, end)] from [(kind, tick)]: consecutive ticks of one kind merged."""
    out = []
    for kind, t in ticks:
        if out and out[-1][0] == kind and out[-1][2] == t:
            out[-1][2] = t + 1
        else:
            out.append([kind, t, t + 1])
    return out


def label_of(kind, j):
    if kind == "S":
        return f"$S_{j}$"
    if kind == "PV":
        return f"$\\tilde P_{j} V_{j}$"
    if kind == "softmax":
        return f"softmax$_{j}$"
    if kind == "scores":
        return f"softmax$_{j}$"
    return ""


def bar(ax, x0, x1, y, h, kind, text=None, hatch=None, alpha=0.75):
    clipped = x1 / TICK > WINDOW
    x0, x1 = x0 / TICK, min(x1 / TICK, WINDOW)
    if x0 >= WINDOW:
        return
    face = tint(KIND_COLOUR[kind], 0.35 if hatch else alpha) if kind in KIND_COLOUR else "#444444"
    ax.add_patch(Rectangle((x0, y), x1 - x0, h, facecolor=face, edgecolor="black", linewidth=0.8,
                           hatch=hatch))
    if text and x1 - x0 > 0.45 and not clipped:
        ax.text((x0 + x1) / 2, y + h / 2, text, ha="center", va="center", fontsize=9,
                bbox=dict(facecolor="white", edgecolor="none", pad=0.5, alpha=0.8) if hatch else None)


ROW_H = 0.62
Y_C = {0: 0.0, 1: 0.95}  # the consumers' rows (top of each, y grows downwards)
Y_TC = 2.05  # the tensor cores: two lanes, consumer 0's products above consumer 1's
LANE_H = 0.42


def panel(ax, rung, title, note):
    log, products = simulate(rung)
    ax.set_xlim(-2.05, WINDOW + 0.15)
    ax.set_ylim(Y_TC + 2 * LANE_H + 0.75, -0.75)
    ax.text(0, Y_TC + 2 * LANE_H + 0.12, note, va="top", fontsize=9.5, style="italic",
            color="#333333")
    ax.set_axis_off()
    ax.text(-2.05, -0.55, title, fontsize=12, weight="bold", va="center")
    names = {0: "consumer 0\n(warpgroup 1)", 1: "consumer 1\n(warpgroup 2)"}
    for c in (0, 1):
        y = Y_C[c]
        ax.text(-0.15, y + ROW_H / 2, names[c], ha="right", va="center", fontsize=9.5)
        ax.plot([0, WINDOW], [y + ROW_H / 2] * 2, color="#DDDDDD", lw=0.8, zorder=0)
        for kind, j, t0, t1 in log[c]["work"]:
            if kind == "issue":
                bar(ax, t0, t1, y, ROW_H, "issue")
            else:
                bar(ax, t0, t1, y, ROW_H, kind, label_of(kind, j))
        for reason, t0, t1 in runs(log[c]["wait"]):
            x0, x1 = t0 / TICK, min(t1 / TICK, WINDOW)
            if x0 >= WINDOW:
                continue
            if reason == "wait":  # wgmma_wait: its products are running or queued
                ax.plot([x0, x1], [y + ROW_H / 2] * 2, color=GREY, lw=2.2, solid_capstyle="butt")
            else:  # bar.sync: waiting for its turn
                ax.plot([x0, x1], [y + ROW_H / 2] * 2, color=PURPLE, lw=2.2, ls=(0, (2, 1.5)))
        for t in log[c]["sync"]:
            if t / TICK < WINDOW:
                ax.plot(t / TICK, y - 0.07, marker="v", color=PURPLE, markersize=7, zorder=5,
                        clip_on=False)
        for t in log[c]["arrive"]:
            x = t / TICK
            if x >= WINDOW:
                continue
            if c == 0:
                arrow(ax, x, y + ROW_H + 0.02, x, Y_C[1] - 0.02, colour=PURPLE, lw=1.3, scale=9)
            else:
                arrow(ax, x, y - 0.02, x, Y_C[0] + ROW_H + 0.02, colour=PURPLE, lw=1.3, scale=9)
    # The tensor cores.
    ax.text(-0.1, Y_TC - 0.17, "tensor cores", ha="right", va="center", fontsize=9.5,
            weight="bold")
    for c in (0, 1):
        ax.text(-0.1, Y_TC + c * LANE_H + LANE_H / 2, f"consumer {c}'s", ha="right",
                va="center", fontsize=7.5, color="#444444")
    busy = set()
    for p in products:
        if not p["served"]:
            continue
        t0, t1 = p["served"][0][0], p["served"][-1][0] + 1
        shared = any(k > 1 for _, k in p["served"])
        busy.update(t for t, _ in p["served"])
        bar(ax, t0, t1, Y_TC + p["consumer"] * LANE_H, LANE_H, p["kind"],
            label_of(p["kind"], p["j"]), hatch="////" if shared else None)
    ax.add_patch(Rectangle((0, Y_TC), WINDOW, 2 * LANE_H, facecolor="none", edgecolor="black",
                           linewidth=1.0))
    # Idle stretches of the tensor cores.
    limit = int(WINDOW * TICK)
    idle = runs([("idle", t) for t in range(limit) if t not in busy])
    for _, t0, t1 in idle:
        ax.add_patch(Rectangle((t0 / TICK, Y_TC), (t1 - t0) / TICK, 2 * LANE_H,
                               facecolor=tint(VERMILION, 0.15), edgecolor=VERMILION,
                               linewidth=0.8, hatch="xx"))
    if rung == 5:  # the two waits of consumer 1's step 1, under its row
        step = [w for w in log[1]["work"] if w[1] == 1]
        t_scores = next(t0 for k, _, t0, _ in step if k == "scores") / TICK
        t_finish = next(t0 for k, _, t0, _ in step if k == "finish") / TICK
        y = Y_C[1] + ROW_H + 0.05
        for x, text, ha in ((t_scores, "wgmma_wait<1>: $S_1$ done ", "right"),
                            (t_finish, " wgmma_wait<0>: $\\tilde P_0 V_0$ done", "left")):
            ax.plot([x, x], [Y_C[1] + ROW_H, y + 0.2], color="black", lw=1)
            ax.text(x, y + 0.12, text, ha=ha, va="center", fontsize=8.5)
    share = sum(1 for t in range(limit) if t in busy) / limit
    ax.text(WINDOW, -0.55, f"tensor cores busy {100 * share:.0f} % of the time shown",
            ha="right", va="center", fontsize=10, color="#333333")
    return share


def legend(fig):
    handles = [
        Patch(facecolor=tint(BLUE, 0.75), edgecolor="black", label="$S_j = Q K_j^T$ (wgmma)"),
        Patch(facecolor=tint(GREEN, 0.75), edgecolor="black", label="$O$ += $\\tilde P_j V_j$ (wgmma)"),
        Patch(facecolor=tint(ORANGE, 0.75), edgecolor="black",
              label="softmax of block j (rung 5: on $S_j$ only)"),
        Patch(facecolor=tint(VERMILION, 0.75), edgecolor="black",
              label="rung 5: rescale $O$, pack $\\tilde P_j$"),
        Patch(facecolor="#444444", edgecolor="black", label="issuing wgmma's"),
        Patch(facecolor=tint(BLUE, 0.35), edgecolor="black", hatch="////",
              label="two products share the tensor cores"),
        Patch(facecolor=tint(VERMILION, 0.15), edgecolor=VERMILION, hatch="xx",
              label="tensor cores idle"),
        Line2D([], [], color=GREY, lw=2.2, label="wgmma_wait: its products queued or running"),
        Line2D([], [], color=PURPLE, lw=2.2, ls=(0, (2, 1.5)), label="bar.sync: waiting for its turn"),
        Line2D([], [], color=PURPLE, marker="v", lw=0, markersize=7,
               label="bar.sync 3 + c (kSched + c) returns: my turn"),
        Line2D([], [], color=PURPLE, marker=r"$\downarrow$", lw=0, markersize=10,
               label="bar.arrive 3 + (1 − c): your turn"),
    ]
    fig.legend(handles=handles, loc="lower left", ncol=2, fontsize=9, frameon=False,
               bbox_to_anchor=(0.01, 0.0), handlelength=2.2, columnspacing=1.5)


def main():
    fig, axes = plt.subplots(3, 1, figsize=(9.4, 11.4))
    panel(axes[0], 3, "(a) rung 3, warp_specialized: no coordination",
          "Both leave the barriers of Q and $K_0$ together. In step, their products share the tensor "
          "cores (each at half rate)\nand their softmaxes leave them idle; once they drift apart, "
          "a softmax meets the other's products only by chance.")
    panel(axes[1], 4, "(b) rung 4, pingpong: named barriers take turns",
          "A step issues $S_j$ and $\\tilde P_{j-1} V_{j-1}$, waits for both, then does softmax$_j$ "
          "under the other's products.\nA softmax up to 2.0 long would stay hidden.")
    panel(axes[2], 5, "(c) rung 5, overlap: the softmax under its own $\\tilde P V$",
          "softmax$_j$ starts once $S_j$ is done, while the consumer's own $\\tilde P_{j-1} V_{j-1}$ "
          "still runs; O's rescale waits\nfor it. Each is ready for its next turn 1.0 sooner: "
          "a softmax up to 3.0 long would stay hidden.")
    fig.suptitle("One thread block's two consumer warpgroups and the tensor cores they share. "
                 "Illustrative durations at d = 128:\n"
                 "a consumer's $S_j$ 1.0, its $\\tilde P_j V_j$ 1.0, its softmax 1.3, "
                 "issuing 0.1; the loads are ready", x=0.01, ha="left", fontsize=10.5)
    legend(fig)
    fig.subplots_adjust(left=0.01, right=0.99, top=0.935, bottom=0.13, hspace=0.04)
    save(fig, "fa3_pingpong.png")


if __name__ == "__main__":
    main()
