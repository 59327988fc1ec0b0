#!/usr/bin/env python3
"""Stage 12's tables, from its program's CSV (and the SDPA peer's, scripts/peers/torch_decode.py).

    python3 scripts/decode_table.py ladder stage12.csv [--peers peers.csv]
    python3 scripts/decode_table.py splits splits.csv

ladder: a row a problem (B, H_q, context, dtype, rows), each rung's GB/s (the model's bytes over the
median time) and the copy's (the rungs the CSV has), the last of them against the copy; with
--peers, the fastest SDPA backend and layout on a dense cache of the same B, H_q and context, by
GB/s (its own cache's bytes over its time: for B > 1 its sequences are all `context` long, ours
too when the program ran with --equal, else shorter down to a half and only the rates compare),
and the last rung's rate against it. splits: time and GB/s against the split count.
A markdown table on stdout."""
import argparse
import csv
import re
import sys

RUNGS = ["per_head", "split_kv", "gqa", "persistent"]


def fields(shape):
    return {k: v for k, v in re.findall(r"(\w+)=(\S+)", shape)}


def cell_key(r):
    f = fields(r["shape"])
    return (int(f["B"]), int(f["Hq"]), int(f["len"].split("..")[-1]), r["dtype"], int(f.get("rows", "1")))


def ladder(rows, peers):
    cells, order = {}, []
    for r in rows:
        if not r["ms"]:
            continue
        k = cell_key(r)
        if k not in cells:
            cells[k] = {}
            order.append(k)
        cells[k][r["variant"]] = r
    best = {}
    for r in peers:
        if not r["gbps"]:
            continue
        k = cell_key(r)
        if k not in best or float(r["gbps"]) > float(best[k]["gbps"]):
            best[k] = r
    present = {r["variant"] for r in rows if r["ms"]}
    rungs = [v for v in RUNGS if v in present]  # the rungs in the data, in the ladder's order
    top = rungs[-1] if rungs else "gqa"
    head = "| B | H_q / H_kv | context | dtype | " + " | ".join(f"`{v}` GB/s" for v in rungs) + f" | copy GB/s | `{top}` / copy |"
    if peers:
        head += f" SDPA (fastest) GB/s | `{top}` / SDPA |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for k in order:
        c = cells[k]
        B, Hq, N, dt, R = k
        Hkv = int(fields(next(iter(c.values()))["shape"])["Hkv"])
        def gbps(v):
            return float(c[v]["gbps"]) if v in c else None
        def splits(v):
            m = re.search(r"splits=(\S+)", c[v]["shape"]) if v in c else None
            return f" ({m.group(1).replace('(auto)', ' auto')})" if m and v != "per_head" else ""
        out = [str(B), f"{Hq} / {Hkv}", f"{N // 1024}k" if N % 1024 == 0 else str(N), dt + (f" R={R}" if R > 1 else "")]
        for v in rungs:
            out.append(f"{gbps(v):,.0f}{splits(v)}" if gbps(v) else "n/a")
        out.append(f"{gbps('copy'):,.0f}" if gbps("copy") else "n/a")
        out.append(f"{gbps(top) / gbps('copy'):.2f}" if gbps(top) and gbps("copy") else "n/a")
        if peers:
            p = best.get(k)
            if p:
                name = p["variant"].replace("sdpa_", "")
                out.append(f"{float(p['gbps']):,.0f} ({name})")
                out.append(f"{gbps(top) / float(p['gbps']):.2f}" if gbps(top) else "n/a")
            else:
                out += ["n/a", "n/a"]
        print("| " + " | ".join(out) + " |")


def splits_table(rows):
    print("| variant | problem | splits | ms (min–max) | GB/s |")
    print("|---|---|---|---|---|")
    for r in rows:
        if not r["ms"] or r["variant"] not in RUNGS:
            continue
        m = re.search(r"splits=(\S+)", r["shape"])
        B, Hq, N, dt, R = cell_key(r)
        print(f"| `{r['variant']}` | B={B} H_q={Hq} {N // 1024}k {dt} | {m.group(1).replace('(auto)', ' (auto)')} | {float(r['ms']):.4f} "
              f"({float(r['ms_min']):.4f}–{float(r['ms_max']):.4f}) | {float(r['gbps']):,.0f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["ladder", "splits"])
    p.add_argument("csv")
    p.add_argument("--peers", default=None)
    a = p.parse_args()
    try:
        rows = list(csv.DictReader(open(a.csv, newline="")))
        peers = list(csv.DictReader(open(a.peers, newline=""))) if a.peers else []
    except OSError as e:
        sys.exit(f"decode_table.py: {e}")
    if not rows:
        sys.exit(f"decode_table.py: {a.csv} has no rows")
    ladder(rows, peers) if a.mode == "ladder" else splits_table(rows)


if __name__ == "__main__":
    main()
