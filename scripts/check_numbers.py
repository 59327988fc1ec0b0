#!/usr/bin/env python3
"""Check that the numbers the course quotes from its measurements match the committed data.

    python3 scripts/check_numbers.py [--root REPO]

Every table in README.md and docs/*.md whose numbers come from docs/results/h100/results.csv (or
another committed data file there: standard_breakdown.csv, ncu_06_ladder.csv, ragged.csv,
stage06/rung4_steps_1round.csv, stage09/'s CSV and printed tables; or docs/results/h200x2/stage10/)
has a marker on a line of its own above it (blank lines may stand between them):

    <!-- numbers: readme-flash-v2 -->

The name picks a spec in SPECS below: a function that gets each row of the table (the cells by
column header) and returns, for the columns it checks, what the CSV says they should be. A few
numbers in running text are checked the same way (PROSE below: a pattern that must match once in
its file, and what each captured number should be).

A printed number passes when it equals the CSV's value rounded to the printed number of decimals
(1.09 passes for anything in [1.085, 1.095]); byte counts are read in the unit printed next to
them (MB, GB, TB; decimal units, as the course prints them). The check fails when a number does
not match, a cell holds more or fewer numbers than expected, a marker names no spec, a spec's
marker is missing, or a query does not find exactly one CSV row. It prints every failure and
exits 1, or prints a summary and exits 0. Standard library only (csv, re), so that it runs as a
CPU test (CTest: check_numbers, label cpu).

What it checks is the course's text: the README, the chapters, and the H100's result page. The lab
records' logs (docs/results/h200/chapter09_speed_log.md, docs/results/h100/chapter08_tries.md and
chapter06_rung_log.md) are history, written once beside their runs' data: this script checked
their numbers up to commit 4b0f098 (git show 4b0f098:scripts/check_numbers.py) and no longer does.
"""
import argparse
import ast
import csv
import statistics
import os
import re
import sys

# --- the data ------------------------------------------------------------------------------------

NUMERIC = ["size", "flops", "ms", "tflops", "gbps", "io_model_bytes", "io_counted_bytes",
           "dram_read_bytes", "dram_write_bytes", "l2_read_bytes", "l2_write_bytes",
           "peak_mem_bytes", "max_rel_err", "kernel_ms"]


class Row:
    """One CSV row: text fields as they are, numeric ones as floats (None when empty)."""

    def __init__(self, fields):
        self.fields = fields
        for k, v in fields.items():
            if k in NUMERIC:
                setattr(self, k, float(v) if v not in ("", None) else None)
            else:
                setattr(self, k, v)
        self.shape_items = dict(item.split("=", 1) for item in fields["shape"].split())

    # Sums the tables use.
    @property
    def l2(self):
        return self.l2_read_bytes + self.l2_write_bytes

    @property
    def dram(self):
        return self.dram_read_bytes + self.dram_write_bytes


class Data:
    def __init__(self, path):
        with open(path, newline="") as f:
            self.rows = [Row(r) for r in csv.DictReader(f)]

    def one(self, stage, variant, dtype=None, **shape):
        """The one row of this stage and variant (and dtype) whose shape has these items."""
        want = {k: str(int(v) if isinstance(v, bool) else v) for k, v in shape.items()}
        found = [r for r in self.rows
                 if r.stage == stage and r.variant == variant and (dtype is None or r.dtype == dtype)
                 and all(r.shape_items.get(k) == v for k, v in want.items())]
        if len(found) != 1:
            raise LookupError(f"{len(found)} rows for {stage} {variant} {dtype or ''} {want}")
        return found[0]


def read_simple_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --- what a cell should hold ---------------------------------------------------------------------

class Bytes:
    """A byte count, to be compared in the unit printed next to it (default: `unit`)."""

    def __init__(self, value, unit="GB"):
        self.value, self.unit = value, unit


class NoNumber:
    """The cell must hold no number (e.g. "out of memory", "–")."""


UNITS = {"B": 1, "KB": 1e3, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
NUMBER = re.compile(r"(?<![\w.⁰¹²³⁴⁵⁶⁷⁸⁹])−?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d])|(?<![\w.⁰¹²³⁴⁵⁶⁷⁸⁹])−?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
UNIT_AFTER = re.compile(r"\s*(TB|GB|MB|KB|kB|B)\b")


def numbers_in(text):
    """The numbers in a cell, each with its printed decimals and the byte unit printed after it."""
    text = text.replace("**", "")
    out = []
    matches = list(NUMBER.finditer(text))
    for n, m in enumerate(matches):
        s = m.group(0).replace("−", "-").replace(",", "")
        mant = s.split("e")[0]
        decimals = len(mant.split(".")[1]) if "." in mant else 0
        exp = int(s.split("e")[1]) if "e" in s else 0
        # The unit: the first byte unit after this number and before the next one.
        end = matches[n + 1].start() if n + 1 < len(matches) else len(text)
        unit = None
        for u in re.finditer(r"\b(TB|GB|MB|KB|kB)\b", text[m.end():end]):
            unit = u.group(1)
            break
        if unit is None:  # "6.90, 0.87 GB": the unit after the last number of the cell
            later = re.findall(r"\b(TB|GB|MB|KB|kB)\b", text[m.end():])
            unit = later[0] if later else None
        out.append((float(s), decimals - exp, unit))
    return out


def matches(printed, decimals, value):
    tol = 0.5 * 10.0 ** (-decimals)
    return abs(printed - value) <= tol * (1 + 1e-9) + 1e-12 * abs(value)


def compare_cell(text, expected):
    """'' when the cell holds what is expected, else a description of the difference."""
    found = numbers_in(text)
    if isinstance(expected, NoNumber):
        return "" if not found else f"expected no number, found {text!r}"
    want = expected if isinstance(expected, (list, tuple)) else [expected]
    if len(found) != len(want):
        return f"expected {len(want)} number(s), found {len(found)} in {text!r}"
    problems = []
    for (printed, decimals, unit), w in zip(found, want):
        if w is None:
            continue
        if isinstance(w, Bytes):
            u = unit or w.unit
            value = w.value / UNITS[u]
            shown = f"{value:.6g} {u}"
        else:
            value = float(w)
            shown = f"{value:.6g}"
        if not matches(printed, decimals, value):
            problems.append(f"{printed:g} printed, {shown} in the data")
    return "; ".join(problems)


# --- finding tables in Markdown ------------------------------------------------------------------

MARKER = re.compile(r"<!--\s*numbers:\s*([\w.-]+)\s*-->")


def split_row(line):
    cells = line.strip().strip("|").split("|")
    return [c.strip() for c in cells]


def tables_after_markers(path):
    """{marker name: (header cells, [row cells], line number of the marker)}."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = {}
    for n, line in enumerate(lines):
        m = MARKER.search(line)
        if not m:
            continue
        k = n + 1
        while k < len(lines) and not lines[k].lstrip().startswith("|"):
            k += 1
        if k + 1 >= len(lines):
            raise ValueError(f"{path}:{n + 1}: marker {m.group(1)} has no table after it")
        header = split_row(lines[k])
        rows = []
        k += 2  # the header's separator line
        while k < len(lines) and lines[k].lstrip().startswith("|"):
            rows.append(split_row(lines[k]))
            k += 1
        if m.group(1) in found:
            raise ValueError(f"{path}:{n + 1}: marker {m.group(1)} used twice")
        found[m.group(1)] = (header, rows, n + 1)
    return found


class TableRow(dict):
    """A table row: cells by header; .cells by position."""

    def __init__(self, header, cells):
        super().__init__(zip(header, cells))
        self.cells = cells

    def num(self, column):
        """The first number of a cell (a key such as N or d), as an int where it is one."""
        text = self[column].replace("**", "")
        m = re.search(r"\d+(?:\.\d+)?", text)
        if not m:
            raise ValueError(f"no number in {column!r}: {text!r}")
        x = float(m.group(0))
        return int(x) if x.is_integer() else x


# --- the specs -----------------------------------------------------------------------------------
# Each spec: (file, function(row, data, files) -> {column: expected}). Expected: a number, a Bytes,
# NoNumber(), or a list of those for a cell with several numbers ("1.10 / 1.25"); None in a list
# skips that number. Columns not returned are not checked.

SPECS = {}


def spec(name, path):
    def register(fn):
        SPECS[name] = (path, fn)
        return fn
    return register


def ratio(a, b):
    return a / b


# stage 01-02: matmul
def matmul(D, variant, n):
    stage = "01_naive_matmul" if variant in ("uncoalesced", "coalesced") else "02_tiled_matmul"
    return D.one(stage, variant, "fp32", M=n, N=n, K=n)


MATMUL_NAMES = {"uncoalesced": "uncoalesced", "coalesced": "coalesced", "smem_tiled": "smem_tiled",
                "register_blocked": "register_blocked", "cuBLAS SGEMM": "cublas", "cuBLAS": "cublas",
                "cuBLAS SGEMM (chapter 02)": "cublas"}


H100_RESULTS = "docs/results/h100/results.md"  # the result tables of the H100 (the README's before)


@spec("ch01-probe", "docs/01_naive_matmul.md")
def _(row, D, F):
    probes = [r for r in D.rows if r.stage == "io_probe"]
    size = row["bytes copied"]
    mb = float(re.search(r"[\d.]+", size).group(0)) * (1e9 if "GB" in size else 1e6)
    r = min(probes, key=lambda p: abs(p.io_model_bytes / 2 - mb))
    b = r.io_model_bytes / 2
    extra = [None] * (len(numbers_in(size)) - 1)  # "(4× L2)"
    return {"bytes copied": [Bytes(b, "MB")] + extra, "GB/s": r.gbps, "DRAM read": r.dram_read_bytes / b,
            "DRAM write": r.dram_write_bytes / b, "SM←L2": r.l2_read_bytes / b, "SM→L2": r.l2_write_bytes / b}


@spec("ch01-results", "docs/01_naive_matmul.md")
def _(row, D, F):
    n = row.num("n")
    r = matmul(D, MATMUL_NAMES[row["variant"]], n)
    out = {"ms": r.ms, "TFLOP/s": r.tflops, "DRAM r+w": Bytes(r.dram)}
    out["model = counted = measured SM↔L2"] = NoNumber() if r.variant == "cublas" else Bytes(r.l2)
    if r.variant != "cublas" and not matches(r.l2, 0, r.io_model_bytes):
        raise ValueError(f"model and measured differ for {r.variant} n = {n}")
    return out


@spec("ch02-results", "docs/02_tiled_matmul.md")
def _(row, D, F):
    n = row.num("n")
    r = matmul(D, MATMUL_NAMES[row["variant"]], n)
    cub = matmul(D, "cublas", n)
    out = {"ms": r.ms, "TFLOP/s": r.tflops, "× cuBLAS": r.tflops / cub.tflops, "DRAM r+w": Bytes(r.dram)}
    out["model = measured SM↔L2"] = Bytes(r.l2) if r.variant == "cublas" else Bytes(r.io_model_bytes)
    return out


@spec("ch02-steps", "docs/02_tiled_matmul.md")
def _(row, D, F):
    step = row["step"]
    name = "cublas" if step.startswith("cuBLAS") else step.split()[1]
    n = 4096 if name == "coalesced" else 8192
    r = matmul(D, name, n)
    cub = matmul(D, "cublas", n)
    return {"TFLOP/s at n = 8192": r.tflops, "× cuBLAS": r.tflops / cub.tflops,
            "SM↔L2 traffic": Bytes(r.l2) if name == "cublas" else Bytes(r.io_model_bytes) if name != "coalesced" else [Bytes(r.io_model_bytes), None]}


# stages 03-04: softmax
def softmax(D, stage, variant, C):
    return D.one(stage, variant, "fp32", C=C)


@spec("ch03-results", "docs/03_safe_softmax.md")
def _(row, D, F):
    C = row.num("C")
    get = lambda v: softmax(D, "03_safe_softmax", v, C)  # noqa: E731
    copy, naive, safe = get("copy"), get("naive"), get("safe")
    X = 512.0 * 2 ** 20  # the matrix, 512 MiB
    return {"copy": copy.ms, "naive": naive.ms, "safe": safe.ms,
            "naive / safe bytes": [naive.io_model_bytes / X, safe.io_model_bytes / X],
            "safe: DRAM / model": safe.dram / safe.io_model_bytes}


@spec("ch04-results", "docs/04_online_softmax.md")
def _(row, D, F):
    C = row.num("C")
    get = lambda v: softmax(D, "04_online_softmax", v, C)  # noqa: E731
    copy, safe, online, torch = get("copy"), get("safe"), get("online"), get("pytorch_softmax")
    out = {"copy": copy.ms, "safe (3+1)": safe.ms, "online (2+1)": online.ms,
           "safe / online": safe.ms / online.ms, "online: model GB/s ÷ copy's": online.gbps / copy.gbps,
           "PyTorch": torch.ms}
    out["on_chip (1+1)"] = get("on_chip").ms if C <= 4096 else NoNumber()
    return out


@spec("ch04-attention-row", "docs/04_online_softmax.md")
def _(row, D, F):
    r = D.one("04_online_softmax", "attention_row", "fp32", N=row.num("N"), d=64)
    return {"ms": r.ms, "TFLOP/s": r.tflops, "model = measured SM↔L2": Bytes(r.io_model_bytes),
            "DRAM": Bytes(r.dram), "max rel err": r.max_rel_err}


# stage 05: FlashAttention-1
def attn(D, stage, variant, dtype, B, H, N, d, causal=0, **more):
    return D.one(stage, variant, dtype, B=B, H=H, N=N, d=d, causal=causal, **more)


@spec("readme-flash-v1", H100_RESULTS)
def _(row, D, F):
    N = row.num("N")
    get = lambda v: attn(D, "05_flash_v1", v, "fp32", 8, 32, N, 64)  # noqa: E731
    std, fa1, math_, eff = get("standard"), get("flash_v1"), get("pytorch_math"), get("pytorch_efficient")
    out = {"FA-1: ms": fa1.ms, "FA-1 TFLOP/s": fa1.tflops,
           "SM↔L2 bytes, FA-1: model = measured": Bytes(fa1.io_model_bytes),
           "PyTorch mem-efficient": eff.ms}
    if std.ms is None:
        out.update({"standard: ms": NoNumber(), "standard / FA-1": NoNumber(), "PyTorch math": NoNumber(),
                    "DRAM bytes: standard, FA-1": Bytes(fa1.dram),
                    "peak memory: standard, FA-1": [None, Bytes(fa1.peak_mem_bytes)]})
    else:
        out.update({"standard: ms": std.ms, "standard / FA-1": std.ms / fa1.ms, "PyTorch math": math_.ms,
                    "DRAM bytes: standard, FA-1": [Bytes(std.dram), Bytes(fa1.dram)],
                    "peak memory: standard, FA-1": [Bytes(std.peak_mem_bytes), Bytes(fa1.peak_mem_bytes)]})
    if not matches(fa1.l2 / 1e9, 1, fa1.io_model_bytes / 1e9):
        raise ValueError(f"FA-1 model and measured differ at N = {N}")
    return out


@spec("ch05-fig2", "docs/05_flash_v1.md")
def _(row, D, F):
    get = lambda v, **m: attn(D, "05_flash_v1", v, "fp32", 64, 16, 1024, 64, **m)  # noqa: E731
    std, fa1 = get("standard"), get("flash_v1", M=65536)
    first = row.cells[0]
    if first.startswith("standard"):
        r = std
    elif first.startswith("FlashAttention-1"):
        r = fa1
    elif first == "ratio":
        return {"SM↔L2: model = measured": std.l2 / fa1.l2, "DRAM": std.dram / fa1.dram,
                "runtime": std.ms / fa1.ms, "peak memory": std.peak_mem_bytes / fa1.peak_mem_bytes}
    else:
        return {}
    return {"GFLOP": r.flops / 1e9, "SM↔L2: model = measured": Bytes(r.io_model_bytes),
            "DRAM": Bytes(r.dram), "runtime": r.ms, "peak memory": Bytes(r.peak_mem_bytes)}


@spec("ch05-across-n", "docs/05_flash_v1.md")
def _(row, D, F):
    N = row.num("N")
    get = lambda v, c=0: attn(D, "05_flash_v1", v, "fp32", 8, 32, N, 64, causal=c)  # noqa: E731
    std, fa1, stdc, fa1c = get("standard"), get("flash_v1"), get("standard", 1), get("flash_v1", 1)
    out = {"FA-1": fa1.ms, "causal: FA-1": fa1c.ms, "PyTorch mem-efficient (not causal)": get("pytorch_efficient").ms}
    if std.ms is None:
        for c in ("standard", "standard / FA-1", "causal: standard", "causal ratio", "PyTorch math (not causal)"):
            out[c] = NoNumber()
    else:
        out.update({"standard": std.ms, "standard / FA-1": std.ms / fa1.ms, "causal: standard": stdc.ms,
                    "causal ratio": stdc.ms / fa1c.ms, "PyTorch math (not causal)": get("pytorch_math").ms})
    return out


@spec("ch05-breakdown", "docs/05_flash_v1.md")
def _(row, D, F):
    # standard_breakdown.csv (Nsight Compute, kernel by kernel): N, causal, step, ms, dram_gbps
    by = {r["step"]: r for r in F["standard_breakdown"] if int(r["N"]) == row.num("N") and r["causal"] == "0"}
    ms = lambda k: float(by[k]["ms"])  # noqa: E731
    steps = ("transpose", "S = Q·Kt", "softmax", "O = P·V")
    return {"Kt = scale·Kᵀ": ms("transpose"), "S = Q·Kt": ms("S = Q·Kt"),
            "softmax, 3 passes (DRAM GB/s)": [ms("softmax"), float(by["softmax"]["dram_gbps"])],
            "O = P·V": ms("O = P·V"), "standard": sum(ms(k) for k in steps), "FA-1": ms("flash_v1")}


def loop_order_bytes(order, B, H, N, d, Br, Bc):
    """Chapter 05's three loop orders of Algorithm 1, fp32, per the model in its text."""
    Tr, Tc = -(-N // Br), -(-N // Bc)
    per_head = {1: 4 * (2 * N * d + Tc * N * d + (2 * Tc - 1) * N * (d + 2)),
                2: 4 * (N * d + 2 * Tr * N * d + (2 * Tc - 1) * N * (d + 2)),
                3: 4 * (N * d + 2 * Tr * N * d + N * d) + 4 * N}[order]
    return B * H * per_head


@spec("ch05-loop-orders", "docs/05_flash_v1.md")
def _(row, D, F):
    order = int(row.cells[0][0])
    Br, Bc = (int(x) for x in re.findall(r"\d+", row["Br, Bc"]))
    model = loop_order_bytes(order, 8, 32, 4096, 64, Br, Bc)
    source = row["where the number comes from"]
    if "measured" in source:  # the rows with a kernel: the CSV's model and measurement
        stage, variant = ("05_flash_v1", "flash_v1") if order == 1 else ("06_flash_v2", "flash_v2")
        r = attn(D, stage, variant, "fp32", 8, 32, 4096, 64)
        if r.io_model_bytes != model or not matches(r.l2 / 1e9, 2, model / 1e9):
            raise ValueError(f"order {order}: the CSV's model or measurement is not {model}")
    return {"bytes, SM↔L2": Bytes(model)}


# stage 06: FlashAttention-2
GRID = {(64, 1024): 16, (64, 4096): 4, (64, 16384): 1, (128, 1024): 16, (128, 4096): 4, (128, 16384): 1}


def grid(D, stage, variant, dtype, d, N, causal=0):
    return attn(D, stage, variant, dtype, GRID[(d, N)], 2048 // d, N, d, causal)


@spec("readme-flash-v2", H100_RESULTS)
def _(row, D, F):
    d, N = row.num("d"), row.num("N")
    g = lambda v: grid(D, "06_flash_v2", v, "fp16", d, N)  # noqa: E731
    lazy, fa2 = g("lazy_rescale"), g("pytorch_flash")
    out = {v: g(v).tflops for v in ("mma", "ldmatrix", "cp_async", "tuned", "lazy_rescale")}
    out.update({"FA-2 (SDPA flash)": fa2.tflops, "lazy_rescale / FA-2": lazy.tflops / fa2.tflops,
                "cuDNN": g("pytorch_cudnn").tflops,
                "SM↔L2, lazy_rescale: model = measured": Bytes(lazy.io_model_bytes), "DRAM": Bytes(lazy.dram)})
    if abs(lazy.l2 / lazy.io_model_bytes - 1) > 0.006:
        raise ValueError("lazy_rescale: measured differs from the model")
    return out


@spec("ch06-fp32", "docs/06_flash_v2.md")
def _(row, D, F):
    shape = row["shape (d = 64)"]
    B, H, N = (8, 32, 4096) if "N = 4096" in shape else (1, 8, 16384)
    get = lambda v: attn(D, "06_flash_v2", v, "fp32", B, H, N, 64)  # noqa: E731
    fa1, fa2 = get("flash_v1"), get("flash_v2")
    return {"FA-1 (stage 05)": [fa1.ms, fa1.tflops], "FA-2 fp32": [fa2.ms, fa2.tflops],
            "FA-2 / FA-1": fa1.ms / fa2.ms, "PyTorch mem-efficient": get("pytorch_efficient").tflops,
            "PyTorch math": get("pytorch_math").tflops}


@spec("ch06-fp32-bytes", "docs/06_flash_v2.md")
def _(row, D, F):
    v = "flash_v1" if row.cells[0].startswith("FA-1") else "flash_v2"
    r = attn(D, "06_flash_v2", v, "fp32", 8, 32, 4096, 64)
    return {"model": Bytes(r.io_model_bytes), "measured SM↔L2": Bytes(r.l2), "measured DRAM": Bytes(r.dram),
            "peak device memory": Bytes(r.peak_mem_bytes)}


@spec("ch06-last-rungs", H100_RESULTS)
def _(row, D, F):
    d, N, c = row.num("d"), row.num("N"), 1 if row["causal"] == "yes" else 0
    g = lambda v, t="fp16": grid(D, "06_flash_v2", v, t, d, N, c).tflops  # noqa: E731
    return {"tuned": g("tuned"), "lazy_rescale": g("lazy_rescale"), "FA-2": g("pytorch_flash"),
            "cuDNN": g("pytorch_cudnn"),
            "fp16: tuned / FA-2": g("tuned") / g("pytorch_flash"),
            "fp16: lazy_rescale / FA-2": g("lazy_rescale") / g("pytorch_flash"),
            "bf16: tuned / FA-2": g("tuned", "bf16") / g("pytorch_flash", "bf16"),
            "bf16: lazy_rescale / FA-2": g("lazy_rescale", "bf16") / g("pytorch_flash", "bf16"),
            "fp16: lazy_rescale / cuDNN": g("lazy_rescale") / g("pytorch_cudnn")}


@spec("ch06-triton", "docs/06_flash_v2.md")
def _(row, D, F):
    N = row.num("N")
    g = lambda v: attn(D, "06_flash_v2", v, "fp16", 4, 48, N, 64, 1).tflops  # noqa: E731
    return {"Triton (ours)": g("triton_fa2"), "FA-2 (SDPA flash)": g("pytorch_flash"),
            "stage 06 lazy_rescale": g("lazy_rescale"), "cuDNN": g("pytorch_cudnn")}


@spec("ch06-io", "docs/06_flash_v2.md")
def _(row, D, F):
    rungs = ("mma", "ldmatrix", "cp_async") if row.cells[0].startswith("rungs 1–3") else ("tuned", "lazy_rescale")
    rs = [attn(D, "06_flash_v2", v, "fp16", 4, 32, 4096, 64) for v in rungs]
    if len({r.io_model_bytes for r in rs}) != 1 or len({r.peak_mem_bytes for r in rs}) != 1:
        raise ValueError(f"{rungs} differ in their model or memory")
    # DRAM: one number that fits every rung of the row, or their range ("0.265–0.266 GB")
    dram = sorted(r.dram for r in rs)
    printed = numbers_in(row["DRAM"])
    if len(printed) == 1 and compare_cell(row["DRAM"], Bytes(dram[-1])):
        raise ValueError(f"DRAM differs between {rungs}: print the range {dram[0]:.4g}–{dram[-1]:.4g}")
    return {"model = measured SM↔L2": Bytes(rs[0].io_model_bytes),
            "DRAM": Bytes(dram[0]) if len(printed) == 1 else [Bytes(dram[0]), Bytes(dram[-1])],
            "peak device memory": Bytes(rs[0].peak_mem_bytes)}


NCU_COLUMNS = {"1 mma": "mma", "2 ldmatrix": "ldmatrix", "3 cp_async": "cp_async", "4 tuned": "tuned",
               "5 lazy_rescale": "lazy_rescale", "FA-2": "pytorch_flash (FA-2)"}
NCU_METRICS = [  # (the row's first words, ncu_06_ladder.csv's column, the unit printed)
    ("kernel time", "gpu__time_duration.sum", 1e6),  # ns -> ms
    ("tensor pipe active", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", 1),
    ("shared-load bank conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "GM"),
    ("shared-load wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "GM"),
    ("instructions executed", "smsp__inst_executed.sum", 1e9),
    ("fma-pipe instructions", "sm__inst_executed_pipe_fma.sum", 1e6),
    ("issue slots busy", "smsp__issue_active.avg.pct_of_peak_sustained_active", 1),
    ("registers / thread", "launch__registers_per_thread", 1),
]


@spec("ch06-ncu", "docs/06_flash_v2.md")
def _(row, D, F):
    # ncu_06_ladder.csv at d = 64: one row per kernel; the table has one column per kernel.
    ncu = {r["kernel"]: r for r in F["ncu_06_ladder"] if " d=64 " in r["shape"]}
    metric = row.cells[0]
    for prefix, field, unit in NCU_METRICS:
        if metric.startswith(prefix):
            break
    else:
        return {}
    out = {}
    for col, kernel in NCU_COLUMNS.items():
        text = ncu[kernel][field]
        if text == "":
            out[col] = NoNumber()
            continue
        x = float(text)
        if unit == "GM":  # counts printed in G or M
            x /= 1e9 if "G" in row[col] else 1e6
        else:
            x /= unit
        out[col] = [x, None] if "spill" in row[col] else x
    return out


# stage 06: rung 4 in steps, one round (stage06/rung4_steps_1round.csv: fp16, N = 1024 and 16384)
RUNG4_STEPS = ["cp_async", "exp2", "one_barrier", "skip_mask", "heaviest_first", "tuned"]
RUNG4_CELLS = [(d, c, N) for d in (64, 128) for c in (0, 1) for N in (1024, 16384)]


def rung4_row(F, variant, d, causal, N):
    """The one round's row of a step in one cell (B·N = 16384 tokens, H = 2048/d)."""
    want = {"B": str(16384 // N), "H": str(2048 // d), "N": str(N), "d": str(d), "causal": str(causal)}
    found = [r for r in F["rung4_steps"] if r["variant"] == variant
             and all(dict(x.split("=", 1) for x in r["shape"].split()).get(k) == v for k, v in want.items())]
    if len(found) != 1:
        raise LookupError(f"{len(found)} rows for {variant} {want} in rung4_steps_1round.csv")
    r = found[0]
    if r["dtype"] != "fp16" or r["device"] != "NVIDIA H100 80GB HBM3" or r["round"] != "1":
        raise ValueError(f"rung4_steps_1round.csv: {variant} {want}: {r['dtype']}, {r['device']}, round {r['round']}")
    return r


def rung4_ms(F, variant, d, causal, N):
    """The median time of a step's timed calls in one cell, ms."""
    return float(rung4_row(F, variant, d, causal, N)["ms"])


def rung4_gain(F, step, d, causal, N):
    """What a step bought: the step before's time over the step's own (above 1: faster)."""
    before = RUNG4_STEPS[RUNG4_STEPS.index(step) - 1]
    return rung4_ms(F, before, d, causal, N) / rung4_ms(F, step, d, causal, N)


RUNG4_COLUMNS = {"4a exp2": "exp2", "4b one_barrier": "one_barrier", "4c skip_mask": "skip_mask",
                 "4d heaviest_first": "heaviest_first", "4e tuned": "tuned"}


@spec("ch06-rung4-steps", "docs/06_flash_v2.md")
def _(row, D, F):
    d, N, c = row.num("d"), row.num("N"), 1 if row["causal"] == "yes" else 0
    out = {col: rung4_gain(F, step, d, c, N) for col, step in RUNG4_COLUMNS.items()}
    out["3 cp_async, ms"] = rung4_ms(F, "cp_async", d, c, N)
    out["4e tuned, ms"] = rung4_ms(F, "tuned", d, c, N)
    out["3 → 4e"] = rung4_ms(F, "cp_async", d, c, N) / rung4_ms(F, "tuned", d, c, N)
    return out


def rung4_range(F, step, cells):
    gains = [rung4_gain(F, step, *cell) for cell in cells]
    return [min(gains), max(gains)]


@spec("ch06-rung4-predicted", "docs/06_flash_v2.md")
def _(row, D, F):
    # The last column: each step's range over the cells, "d = 64: lo–hi×; d = 128: lo–hi×"; 4d apart.
    step = RUNG4_COLUMNS.get(row.cells[0])
    column = "measured, one round: the step before's time / this step's"
    if step is None:
        return {column: NoNumber()}
    if step == "heaviest_first":  # not causal; causal; the one causal cell that moved
        causal = rung4_range(F, step, [(d, 1, N) for d, c, N in RUNG4_CELLS if c])
        return {column: rung4_range(F, step, [(d, 0, N) for d, c, N in RUNG4_CELLS if not c]) + causal
                + [rung4_gain(F, step, 128, 1, 16384), None, None]}
    return {column: [None] + rung4_range(F, step, [x for x in RUNG4_CELLS if x[0] == 64])
            + [None] + rung4_range(F, step, [x for x in RUNG4_CELLS if x[0] == 128])}


# stage 07: the backward pass
@spec("readme-backward", H100_RESULTS)
def _(row, D, F):
    d, N = row.num("d"), row.num("N")
    g = lambda v: grid(D, "07_backward", v, "fp16", d, N)  # noqa: E731
    fast = g("wide" if d == 64 else "split")
    fa2 = g("pytorch_flash_bwd")
    return {"standard (P kept)": g("standard").tflops, "tc": g("tc").tflops, "tuned": g("tuned").tflops,
            "wide (d 64) / split (d 128)": fast.tflops, "FA-2 (SDPA flash)": fa2.tflops,
            "fastest / FA-2": fast.tflops / fa2.tflops, "cuDNN": g("pytorch_cudnn_bwd").tflops,
            "SM↔L2, fastest: model / measured": [Bytes(fast.io_model_bytes), Bytes(fast.l2)],
            "DRAM": Bytes(fast.dram)}


def ladder_cells(D, d, causal, column, dtype="fp16"):
    """One cell of chapter 07's ladder: the three N of a (d, causal) row."""
    out = []
    for N in (1024, 4096, 16384):
        g = lambda v: grid(D, "07_backward", v, dtype, d, N, causal)  # noqa: E731
        fast = "wide" if d == 64 else "split"
        if column == "ratio":
            out.append(g(fast).tflops / g("pytorch_flash_bwd").tflops)
        elif column == "det":
            out.append(g(fast + "_deterministic").tflops / g(fast).tflops)
        else:
            out.append(g(column).tflops)
    return out


@spec("ch07-ladder", "docs/07_backward.md")
def _(row, D, F):
    d, c = row.num("d"), 1 if row["causal"] == "yes" else 0
    fast = "wide" if d == 64 else "split"
    return {"tc": ladder_cells(D, d, c, "tc"), "tuned": ladder_cells(D, d, c, "tuned"),
            "wide / split": ladder_cells(D, d, c, fast), "FA-2": ladder_cells(D, d, c, "pytorch_flash_bwd"),
            "cuDNN": ladder_cells(D, d, c, "pytorch_cudnn_bwd"), "fastest / FA-2": ladder_cells(D, d, c, "ratio"),
            "deterministic / atomic": ladder_cells(D, d, c, "det")}


@spec("ch07-fig2", "docs/07_backward.md")
def _(row, D, F):
    shape = dict(B=64, H=16, N=1024, d=64, causal=0)
    std = D.one("07_backward", "standard_fwdbwd", "fp16", **shape)
    ours = D.one("07_backward", "wide_fwdbwd", "fp16", **shape)
    first = row.cells[0]
    if first.startswith("standard"):
        r = std
    elif first.startswith("FlashAttention"):
        r = ours
    elif first == "ratio":
        return {"runtime": std.ms / ours.ms, "SM↔L2": std.l2 / ours.l2, "DRAM": std.dram / ours.dram,
                "peak memory": std.peak_mem_bytes / ours.peak_mem_bytes}
    elif first.startswith("SDPA"):
        p = [D.one("07_backward", f"pytorch_{v}_fwdbwd", "fp16", **shape) for v in ("flash", "cudnn", "math")]
        return {"runtime": [x.ms for x in p], "TFLOP/s": [x.tflops for x in p]}
    else:
        return {}
    return {"runtime": r.ms, "TFLOP/s": r.tflops, "SM↔L2": Bytes(r.l2), "DRAM": Bytes(r.dram),
            "peak memory": Bytes(r.peak_mem_bytes)}


@spec("ch07-memory", "docs/07_backward.md")
def _(row, D, F):
    N = row.num("N")
    out = {}
    for col, dtype in (("fp32 standard", "fp32"), ("fp16 standard", "fp16")):
        r = D.one("07_backward", "standard", dtype, B=8, H=32, N=N, d=64, causal=0)
        out[col] = [Bytes(r.peak_mem_bytes), r.ms] if r.ms is not None else [None]
    return out


# --- numbers in running text ---------------------------------------------------------------------
# (file, pattern with one group per number, function(data, files) -> [expected]). The pattern must
# match exactly once in the file, whose runs of white space (line breaks too) are read as one space.
PROSE = []


def prose(path, pattern):
    def register(fn):
        PROSE.append((path, pattern, fn))
        return fn
    return register


CH01 = "docs/01_naive_matmul.md"


@prose(CH01, r"The naive kernel takes (\d+) ms, and the reason is the bytes")
def _(D, F):
    return [matmul(D, "coalesced", 4096).ms]


@prose(CH01, r"moves (\d+) GB through the crossbar in (\d+) ms, ([\d.]+) TB/s")
def _(D, F):
    r = matmul(D, "coalesced", 4096)
    return [Bytes(r.l2), r.ms, r.l2 / r.ms / 1e9]


@prose(CH01, r"asks for ([\d.]+) times the bytes and takes ([\d.]+) times as long")
def _(D, F):
    u, c = matmul(D, "uncoalesced", 4096), matmul(D, "coalesced", 4096)
    return [u.l2 / c.l2, u.ms / c.ms]


@prose(CH01, r"On the H100 it is ([\d.]+) / ([\d.]+) ms = ([\d.]+)×")
def _(D, F):
    u, c = matmul(D, "uncoalesced", 4096), matmul(D, "coalesced", 4096)
    return [u.ms, c.ms, u.ms / c.ms]


CH02 = "docs/02_tiled_matmul.md"


@prose(CH02, r"`register_blocked` reaches ([\d.]+) TFLOP/s at n = 8192: ([\d.]+)× cuBLAS SGEMM \(([\d.]+)\)")
def _(D, F):
    r, c = matmul(D, "register_blocked", 8192), matmul(D, "cublas", 8192)
    return [r.tflops, r.tflops / c.tflops, c.tflops]


@prose(CH02, r"moves only ([\d.]+) GB to and from DRAM for its ([\d.]+) GB of L2 traffic")
def _(D, F):
    r = matmul(D, "register_blocked", 4096)
    return [Bytes(r.dram), Bytes(r.l2)]


@prose(CH02, r"gets ([\d.]+) GB from DRAM")
def _(D, F):
    return [Bytes(matmul(D, "smem_tiled", 4096).dram)]


@prose(CH02, r"cuBLAS moves fewer bytes too: ([\d.]+) GB at n = 8192 where we move ([\d.]+)")
def _(D, F):
    return [Bytes(matmul(D, "cublas", 8192).l2), Bytes(matmul(D, "register_blocked", 8192).l2)]


@prose(CH02, r"table: ([\d.]+) against ([\d.]+) ms in results.csv")
def _(D, F):
    return [matmul(D, "smem_tiled", 512).ms, matmul(D, "register_blocked", 512).ms]


@prose(CH02, r"On the H100: ([\d.]+) TFLOP/s against ([\d.]+)\. From n = 2048 on")
def _(D, F):
    return [matmul(D, "smem_tiled", 512).tflops, matmul(D, "register_blocked", 512).tflops]


@prose(CH02, r"the better reuse wins \(([\d.]+) against ([\d.]+) TFLOP/s at n = 2048\)")
def _(D, F):
    return [matmul(D, "register_blocked", 2048).tflops, matmul(D, "smem_tiled", 2048).tflops]


@prose(CH02, r"Only n = 2048 is in results.csv: ([\d.]+) TFLOP/s, ([\d.]+)× cuBLAS measured in the same run \(([\d.]+)\)")
def _(D, F):
    r, c = matmul(D, "register_blocked", 2048), matmul(D, "cublas", 2048)
    return [r.tflops, r.tflops / c.tflops, c.tflops]


CH03 = "docs/03_safe_softmax.md"


@prose(CH03, r"H100 at C = 2²⁰: ([\d.]+) / ([\d.]+) ms = ([\d.]+)\.")
def _(D, F):
    s, n = softmax(D, "03_safe_softmax", "safe", 1048576), softmax(D, "03_safe_softmax", "naive", 1048576)
    return [s.ms, n.ms, s.ms / n.ms]


@prose(CH03, r"safe falls to ([\d.]+) TB/s")
def _(D, F):
    return [softmax(D, "03_safe_softmax", "safe", 256).gbps / 1000]


@prose(CH03, r"Safe's model bytes per second even exceed the copy's by (\d+)%")
def _(D, F):
    s, c = softmax(D, "03_safe_softmax", "safe", 1048576), softmax(D, "03_safe_softmax", "copy", 1048576)
    return [100 * (s.gbps / c.gbps - 1)]


@prose(CH03, r"grows from ([\d.]+) GB to")
def _(D, F):
    return [Bytes(softmax(D, "03_safe_softmax", "safe", 1048576).io_model_bytes)]


CH04 = "docs/04_online_softmax.md"


def sm4(D, v, C):
    return softmax(D, "04_online_softmax", v, C)


@prose(CH04, r"online's two passes take about (\d+)% longer than naive's two \(([\d.]+) against ([\d.]+) ms at C = 16384")
def _(D, F):
    o, n = sm4(D, "online", 16384), softmax(D, "03_safe_softmax", "naive", 16384)
    return [100 * (o.ms / n.ms - 1), o.ms, n.ms]


@prose(CH04, r"At C = 256, `online` takes ([\d.]+) ms, twice the copy's ([\d.]+), although it moves ([\d.]+) times")
def _(D, F):
    o, c = sm4(D, "online", 256), sm4(D, "copy", 256)
    return [o.ms, c.ms, o.io_model_bytes / c.io_model_bytes]


@prose(CH04, r"reads each row once: ([\d.]+) ms on the H100, ([\d.]+) of the copy's time")
def _(D, F):
    o, c = sm4(D, "on_chip", 256), sm4(D, "copy", 256)
    return [o.ms, o.ms / c.ms]


@prose(CH04, r"results.csv has d = 64 only: ([\d.]+) TFLOP/s at every N")
def _(D, F):
    return [[r.tflops for r in D.rows if r.variant == "attention_row"][k] for k in (0,)]


@prose(CH04, r"its ([\d.]+) GB at N = 16384 take ([\d.]+) ms")
def _(D, F):
    r = D.one("04_online_softmax", "attention_row", "fp32", N=16384, d=64)
    return [Bytes(r.io_model_bytes), r.ms]


CH05 = "docs/05_flash_v1.md"


@prose(CH05, r"results.csv holds their counts at B = 1, H = 4, N = 512: ([\d.]+) MB and ([\d.]+) MB")
def _(D, F):
    a = attn(D, "05_flash_v1", "flash_v1", "fp32", 1, 4, 512, 64)
    b = attn(D, "06_flash_v2", "flash_v2", "fp32", 1, 4, 512, 64)
    return [Bytes(a.io_counted_bytes, "MB"), Bytes(b.io_counted_bytes, "MB")]


@prose(CH05, r"stage 06's ([\d.]+) GB of SM↔L2 traffic are ([\d.]+) GB of DRAM traffic, FA-1's ([\d.]+) GB are ([\d.]+) GB")
def _(D, F):
    a = attn(D, "06_flash_v2", "flash_v2", "fp32", 8, 32, 4096, 64)
    b = attn(D, "05_flash_v1", "flash_v1", "fp32", 8, 32, 4096, 64)
    return [Bytes(a.l2), Bytes(a.dram), Bytes(b.l2), Bytes(b.dram)]


@prose(CH05, r"the exact model \(and the measurement\) is ([\d.]+) GB, two thirds of standard attention's ([\d.]+) GB rather than a tenth\. FA-1 is slower than standard attention there: ([\d.]+) against ([\d.]+) ms")
def _(D, F):
    f = attn(D, "05_flash_v1", "flash_v1", "fp32", 8, 16, 4096, 128)
    s_ = attn(D, "05_flash_v1", "standard", "fp32", 8, 16, 4096, 128)
    return [Bytes(f.io_model_bytes), Bytes(s_.io_model_bytes), f.ms, s_.ms]


@prose(CH05, r"On the H100 the bytes go ([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+) GB and the time ([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+) ms")
def _(D, F):
    rs = [attn(D, "05_flash_v1", "flash_v1", "fp32", 64, 16, 1024, 64, M=m) for m in (4096, 8192, 16384, 32768, 65536)]
    return [Bytes(r.io_model_bytes) for r in rs] + [r.ms for r in rs]


@prose(CH05, r"the causal run takes ([\d.]+) ms and ([\d.]+) GB, the non-causal ([\d.]+) ms and ([\d.]+) GB")
def _(D, F):
    c = attn(D, "05_flash_v1", "flash_v1", "fp32", 8, 32, 4096, 64, 1)
    n = attn(D, "05_flash_v1", "flash_v1", "fp32", 8, 32, 4096, 64, 0)
    return [c.ms, Bytes(c.io_model_bytes), n.ms, Bytes(n.io_model_bytes)]


@prose(CH05, r"the runtime with it — ([\d.]+), ([\d.]+), ([\d.]+) ms at Bc = 16, 32, 64 — until compute dominates: ([\d.]+) ms at 128 and ([\d.]+) at 256")
def _(D, F):
    return [attn(D, "05_flash_v1", "flash_v1", "fp32", 64, 16, 1024, 64, M=m).ms for m in (4096, 8192, 16384, 32768, 65536)]


@prose(CH05, r"At N = 4096 standard attention moves ([\d.]+) GB between the SMs and L2 \(measured = model\) and ([\d.]+) GB to and from DRAM")
def _(D, F):
    r = attn(D, "05_flash_v1", "standard", "fp32", 8, 32, 4096, 64)
    return [Bytes(r.io_model_bytes), Bytes(r.dram)]


@prose(CH05, r"all of it is DRAM traffic \(([\d.]+) GB\)")
def _(D, F):
    return [Bytes(attn(D, "05_flash_v1", "flash_v1", "fp32", 8, 32, 4096, 64).dram)]


@prose(CH05, r"FA-1's DRAM traffic is ([\d.]+) of standard's")
def _(D, F):
    g = lambda v: attn(D, "05_flash_v1", v, "fp32", 8, 32, 4096, 64)  # noqa: E731
    return [g("flash_v1").dram / g("standard").dram]


@prose(CH05, r"FA-1 is ([\d.]+)× faster than standard at N = 4096, at ([\d.]+) TFLOP/s, nearly flat across N \(([\d.]+) → ([\d.]+)\)")
def _(D, F):
    g = lambda v, n=4096: attn(D, "05_flash_v1", v, "fp32", 8, 32, n, 64)  # noqa: E731
    return [g("standard").ms / g("flash_v1").ms, g("flash_v1").tflops, g("flash_v1", 512).tflops, g("flash_v1", 16384).tflops]


@prose(CH05, r"standard attention gets more efficient as N grows \(([\d.]+) → ([\d.]+) TFLOP/s\)")
def _(D, F):
    return [attn(D, "05_flash_v1", "standard", "fp32", 8, 32, n, 64).tflops for n in (512, 4096)]


@prose(CH05, r"stage 03's safe softmax in results.csv: (\d+) GB/s at C = 1024, (\d+) at C = 4096")
def _(D, F):
    return [softmax(D, "03_safe_softmax", "safe", c).gbps for c in (1024, 4096)]


@prose(CH05, r"runs at ([\d.]+) TFLOP/s: our FA-1 reaches ([\d.]+)× of it")
def _(D, F):
    e = attn(D, "05_flash_v1", "pytorch_efficient", "fp32", 8, 32, 4096, 64)
    f = attn(D, "05_flash_v1", "flash_v1", "fp32", 8, 32, 4096, 64)
    return [e.tflops, f.tflops / e.tflops]


@prose(CH05, r"FA-1 is \*slower\* than standard here, ([\d.]+) against ([\d.]+) ms at N = 4096")
def _(D, F):
    return [attn(D, "05_flash_v1", v, "fp32", 8, 16, 4096, 128).ms for v in ("flash_v1", "standard")]


@prose(CH05, r"FA-1 moves about 12·N²·d/Bc: ([\d.]+) GB \(model = measured\), two thirds of standard's ([\d.]+) GB")
def _(D, F):
    return [Bytes(attn(D, "05_flash_v1", v, "fp32", 8, 16, 4096, 128).io_model_bytes) for v in ("flash_v1", "standard")]


@prose(CH05, r"For B = 8, H = 32, N = 4096, d = 64 that is ([\d.]+) GB")
def _(D, F):
    return [Bytes(attn(D, "05_flash_v1", "standard", "fp32", 8, 32, 4096, 64).io_model_bytes)]


@prose(CH05, r"Standard's peak grows as N²: ([\d.]+) GB at N = 1024, ([\d.]+) GB at 4096")
def _(D, F):
    return [Bytes(attn(D, "05_flash_v1", "standard", "fp32", 8, 32, n, 64).peak_mem_bytes) for n in (1024, 4096)]


@prose(CH05, r"FA-1's grows as N: ([\d.]+), ([\d.]+), ([\d.]+) GB at N = 1024, 4096, 16384")
def _(D, F):
    return [Bytes(attn(D, "05_flash_v1", "flash_v1", "fp32", 8, 32, n, 64).peak_mem_bytes) for n in (1024, 4096, 16384)]


CH06 = "docs/06_flash_v2.md"


@prose(CH06, r"Q and O: ([\d.]+) GB, measured exactly on the H100\. DRAM: only the four tensors once, 4 × (\d+) MB = ([\d.]+) GB, measured ([\d.]+) GB")
def _(D, F):
    r = attn(D, "06_flash_v2", "flash_v2", "fp32", 8, 32, 4096, 64)
    tensor = 8 * 32 * 4096 * 64 * 4
    return [Bytes(r.l2), Bytes(tensor, "MB"), Bytes(4 * tensor), Bytes(r.dram)]


@prose(H100_RESULTS, r"The rungs, as a fraction of FA-2 at N = 4096, d = 64, fp16: mma (\d+) %, ldmatrix (\d+) %, cp_async (\d+) %, tuned (\d+) %, lazy_rescale (\d+) %")
def _(D, F):
    g = lambda v: grid(D, "06_flash_v2", v, "fp16", 64, 4096).tflops  # noqa: E731
    return [100 * g(v) / g("pytorch_flash") for v in ("mma", "ldmatrix", "cp_async", "tuned", "lazy_rescale")]


def ratio_range(D, num, den, dtypes=("fp16", "bf16"), ds=(64, 128), Ns=(1024, 4096, 16384), causal=(0, 1), stage="06_flash_v2"):
    vals = [grid(D, stage, num, t, d, N, c).tflops / grid(D, stage, den, t, d, N, c).tflops
            for t in dtypes for d in ds for N in Ns for c in causal]
    return min(vals), max(vals)


@prose(H100_RESULTS, r"The last rung is ([\d.]+)–([\d.]+)× FA-2 in all 24 cells: at d = 64 (\d+)–(\d+) % faster, at d = 128 (\d+)–(\d+) %")
def _(D, F):
    lo, hi = ratio_range(D, "lazy_rescale", "pytorch_flash")
    a, b = ratio_range(D, "lazy_rescale", "pytorch_flash", ds=(64,))
    c, d = ratio_range(D, "lazy_rescale", "pytorch_flash", ds=(128,))
    return [lo, hi, 100 * (a - 1), 100 * (b - 1), 100 * (c - 1), 100 * (d - 1)]


def kernel_ratio_range(D, num, den, dtypes=("fp16", "bf16"), ds=(64, 128), Ns=(1024, 4096, 16384), causal=(0, 1),
                       stage="06_flash_v2"):
    """ratio_range by the kernel times (kernel_ms: the GPU's own time of a call's kernels)."""
    vals = [grid(D, stage, den, t, d, N, c).kernel_ms / grid(D, stage, num, t, d, N, c).kernel_ms
            for t in dtypes for d in ds for N in Ns for c in causal]
    return min(vals), max(vals)


def event_over_kernel(D, variant, stage="06_flash_v2", ds=(64, 128), extremum=max):
    """How far a variant's event time lies above its kernel time over the ladder's grid, in %."""
    return extremum(100 * (grid(D, stage, variant, t, d, N, c).ms / grid(D, stage, variant, t, d, N, c).kernel_ms - 1)
                    for t in ("fp16", "bf16") for d in ds for N in (1024, 4096, 16384) for c in (0, 1))


@prose(H100_RESULTS, r"For ours the two agree: the last rung's event times are within ([\d.]+) % of its kernel times\. The peers' do not quite: FA-2's event times are up to (\d+) % above its kernel times, cuDNN's up to (\d+) %")
def _(D, F):
    ours = max(abs(event_over_kernel(D, "lazy_rescale", extremum=f)) for f in (min, max))
    return [ours, event_over_kernel(D, "pytorch_flash"), event_over_kernel(D, "pytorch_cudnn")]


@prose(H100_RESULTS, r"By the kernel times the last rung is ([\d.]+)–([\d.]+)× FA-2 in all 24 cells \(([\d.]+)–([\d.]+)× at d = 64, ([\d.]+)–([\d.]+)× at d = 128\), a little less than the events say, and cuDNN is ([\d.]+)–([\d.]+)× faster than ours")
def _(D, F):
    lo, hi = kernel_ratio_range(D, "lazy_rescale", "pytorch_flash")
    a, b = kernel_ratio_range(D, "lazy_rescale", "pytorch_flash", ds=(64,))
    c, d = kernel_ratio_range(D, "lazy_rescale", "pytorch_flash", ds=(128,))
    e, f = kernel_ratio_range(D, "pytorch_cudnn", "lazy_rescale")
    return [lo, hi, a, b, c, d, e, f]


@prose(CH06, r"d = 128 is level: [\d.]+–[\d.]+× in results\.csv, where FA-2's event times hold up to (\d+) % of host work, and ([\d.]+)–([\d.]+)× by the kernel times beside them")
def _(D, F):
    return [event_over_kernel(D, "pytorch_flash", ds=(128,))] + list(kernel_ratio_range(D, "tuned", "pytorch_flash", ds=(128,)))


@prose(CH06, r"is still [\d.]+–[\d.]+× faster than the last rung in fp16 by the events, and ([\d.]+)–([\d.]+)× by the kernel times \(its narrowest lead, at d = 64, causal, N = 1024, is mostly its host's: its event time there is (\d+) % above its kernel time\)")
def _(D, F):
    lo, hi = kernel_ratio_range(D, "pytorch_cudnn", "lazy_rescale", dtypes=("fp16",))
    r = grid(D, "06_flash_v2", "pytorch_cudnn", "fp16", 64, 1024, 1)
    return [lo, hi, 100 * (r.ms / r.kernel_ms - 1)]


@prose(CH06, r"With FA-2's own steps \(`tuned`\), d = 64 is (\d+)–(\d+) % ahead of FA-2, but d = 128 is level: ([\d.]+)–([\d.]+)× in results.csv")
def _(D, F):
    a, b = ratio_range(D, "tuned", "pytorch_flash", ds=(64,))
    c, d = ratio_range(D, "tuned", "pytorch_flash", ds=(128,))
    return [100 * (a - 1), 100 * (b - 1), c, d]


@prose(CH06, r"in results.csv \+(\d+) to \+(\d+) % at d = 128 and −(\d+) to \+(\d+) % at d = 64")
def _(D, F):
    a, b = ratio_range(D, "lazy_rescale", "tuned", ds=(128,))
    c, d = ratio_range(D, "lazy_rescale", "tuned", ds=(64,))
    return [100 * (a - 1), 100 * (b - 1), 100 * (1 - c), 100 * (d - 1)]


@prose(CH06, r"is still ([\d.]+)–([\d.]+)× faster than the last rung")
def _(D, F):
    lo, hi = ratio_range(D, "pytorch_cudnn", "lazy_rescale", dtypes=("fp16",))
    return [lo, hi]


@prose(CH06, r"Measured worst errors over results.csv's sweep: fp16 ([\d.]+)·10⁻⁴, bf16 ([\d.]+)·10⁻³, fp32 ([\d.]+)·10⁻⁶")
def _(D, F):
    worst = lambda t: max(r.max_rel_err for r in D.rows if r.stage == "06_flash_v2" and r.dtype == t  # noqa: E731
                          and r.variant not in ("flash_v1", "triton_fa2") and not r.variant.startswith("pytorch"))
    return [worst("fp16") * 1e4, worst("bf16") * 1e3, worst("fp32") * 1e6]


@prose(CH06, r"FA-2's DRAM traffic is the four tensors once \(4 × (\d+) MB\); the ([\d.]+) GB of K and V re-reads")
def _(D, F):
    r = attn(D, "06_flash_v2", "flash_v2", "fp32", 8, 32, 4096, 64)
    tensor = 8 * 32 * 4096 * 64 * 4
    return [Bytes(tensor, "MB"), Bytes(r.l2 - 4 * tensor)]  # K and V after their first reading


CH07 = "docs/07_backward.md"


def bwd(D, v, d, N, c=0, t="fp16"):
    return grid(D, "07_backward", v, t, d, N, c)


def fastest(d):
    return "wide" if d == 64 else "split"


CELLS = [(t, d, N, c) for t in ("fp16", "bf16") for d in (64, 128) for N in (1024, 4096, 16384) for c in (0, 1)]


def bwd_range(D, f, where=lambda t, d, N, c: True):
    vals = [f(t, d, N, c) for t, d, N, c in CELLS if where(t, d, N, c)]
    return min(vals), max(vals)


def fastest07(d):
    return "wide" if d == 64 else "split"


def kernel_ratios07(D, num_of_d, den_of_d, Ns, dtypes=("fp16", "bf16"), ds=(64, 128)):
    """Stage 07's kernel-time ratios, den's kernel time over num's, over the ladder's grid."""
    return [grid(D, "07_backward", den_of_d(d), t, d, N, c).kernel_ms / grid(D, "07_backward", num_of_d(d), t, d, N, c).kernel_ms
            for t in dtypes for d in ds for N in Ns for c in (0, 1)]


@prose(CH07, r"Our times do not move: the event times of `wide` and `split` are within (\d+)% of their kernel times\. FA-2's backward does: its event times are (\d+)–(\d+)% above its kernel times at N = 1024, (\d+)–(\d+)% at N = 4096 and at most (\d+)% at N = 16384")
def _(D, F):
    def over(variant_of_d, Ns):
        return [100 * (r.ms / r.kernel_ms - 1) for r in (grid(D, "07_backward", variant_of_d(d), t, d, N, c)
                for t in ("fp16", "bf16") for d in (64, 128) for N in Ns for c in (0, 1))]
    ours = max(abs(x) for x in over(fastest07, (1024, 4096, 16384)))
    fa2 = lambda d: "pytorch_flash_bwd"  # noqa: E731
    a, b, c = over(fa2, (1024,)), over(fa2, (4096,)), over(fa2, (16384,))
    return [ours, min(a), max(a), min(b), max(b), max(c)]


@prose(CH07, r"`wide` \(d = 64\) is still ahead of FA-2: [\d.]+–[\d.]+× \([^)]*\); results\.csv ([\d.]+)–([\d.]+)×")
def _(D, F):
    r = kernel_ratios07(D, fastest07, lambda d: "pytorch_flash_bwd", (1024, 4096, 16384), ds=(64,))
    return [min(r), max(r)]


@prose(CH07, r"results\.csv ([\d.]+)–([\d.]+)× at N = 1024 and ([\d.]+)–([\d.]+)× from\s+N = 4096 on, behind in (\d+) of those (\d+) cells")
def _(D, F):
    fa2 = lambda d: "pytorch_flash_bwd"  # noqa: E731
    a = kernel_ratios07(D, fastest07, fa2, (1024,), ds=(128,))
    b = kernel_ratios07(D, fastest07, fa2, (4096, 16384), ds=(128,))
    return [min(a), max(a), min(b), max(b), sum(x < 1 for x in b), len(b)]


@prose(CH07, r"N = 1024; results\.csv ([\d.]+)–([\d.]+)× and ([\d.]+)–([\d.]+)×\.")
def _(D, F):
    ours = lambda d: "pytorch_cudnn_bwd"  # noqa: E731  (cuDNN's speed over ours: our time / cuDNN's)
    big = kernel_ratios07(D, ours, fastest07, (4096, 16384))
    small = kernel_ratios07(D, ours, fastest07, (1024,))
    return [min(big), max(big), min(small), max(small)]


@prose(CH07, r"behind it from N = 4096 \(([\d.]+) and ([\d.]+) at d = 64, not causal\)")
def _(D, F):
    return [bwd(D, "tc", 64, N).tflops / bwd(D, "pytorch_flash_bwd", 64, N).tflops for N in (4096, 16384)]


@prose(CH07, r"the fastest rung is ahead in all 24 cells, ([\d.]+)–([\d.]+)×")
def _(D, F):
    return list(bwd_range(D, lambda t, d, N, c: bwd(D, fastest(d), d, N, c, t).tflops / bwd(D, "pytorch_flash_bwd", d, N, c, t).tflops))


@prose(CH07, r"`split` is (\d+)–(\d+)% faster than `tuned` at d = 128 and `wide` (\d+)–(\d+)% faster at d = 64")
def _(D, F):
    f = lambda t, d, N, c: bwd(D, fastest(d), d, N, c, t).tflops / bwd(D, "tuned", d, N, c, t).tflops  # noqa: E731
    a, b = bwd_range(D, f, lambda t, d, N, c: d == 128)
    x, y = bwd_range(D, f, lambda t, d, N, c: d == 64)
    return [100 * (a - 1), 100 * (b - 1), 100 * (x - 1), 100 * (y - 1)]


@prose(CH07, r"cuDNN's backward is ([\d.]+)–([\d.]+)× ours at N ≥ 4096 \(ours is (\d+)–(\d+)% of it there; (\d+)–(\d+)% at N = 1024\)")
def _(D, F):
    f = lambda t, d, N, c: bwd(D, fastest(d), d, N, c, t).tflops / bwd(D, "pytorch_cudnn_bwd", d, N, c, t).tflops  # noqa: E731
    a, b = bwd_range(D, f, lambda t, d, N, c: N >= 4096)
    x, y = bwd_range(D, f, lambda t, d, N, c: N == 1024)
    return [1 / b, 1 / a, 100 * a, 100 * b, 100 * x, 100 * y]


@prose(CH07, r"The deterministic variants cost (\d+)–(\d+)% at N ≥ 4096 against `wide` and (\d+)–(\d+)% against `split`, and (\d+)–(\d+)% at N = 1024 \(([\d.]+)–([\d.]+)×\)")
def _(D, F):
    f = lambda t, d, N, c: bwd(D, fastest(d) + "_deterministic", d, N, c, t).tflops / bwd(D, fastest(d), d, N, c, t).tflops  # noqa: E731
    a, b = bwd_range(D, f, lambda t, d, N, c: N >= 4096 and d == 64)
    x, y = bwd_range(D, f, lambda t, d, N, c: N >= 4096 and d == 128)
    p, q = bwd_range(D, f, lambda t, d, N, c: N == 1024)
    return [100 * (1 - b), 100 * (1 - a), 100 * (1 - y), 100 * (1 - x), max(0, 100 * (1 - q)), 100 * (1 - p), p, min(q, 1)]


@prose(CH07, r"Standard attention \(cuBLAS, P kept\) reaches (\d+)–(\d+) TFLOP/s at d = 64 and (\d+)–(\d+) at d = 128 not causal")
def _(D, F):
    a = [bwd(D, "standard", 64, N).tflops for N in (1024, 4096, 16384)]
    b = [bwd(D, "standard", 128, N).tflops for N in (1024, 4096, 16384)]
    return [min(a), max(a), min(b), max(b)]


@prose(CH07, r"In bf16 our atomic rungs are within (\d+)% of their fp16 TFLOP/s in every cell \(fastest / FA-2, where FA-2's own bf16 time moves by up to (\d+)%: ([\d.]+) / ([\d.]+) / ([\d.]+), ([\d.]+) / ([\d.]+) / ([\d.]+), ([\d.]+) / ([\d.]+) / ([\d.]+), ([\d.]+) / ([\d.]+) / ([\d.]+) in the same order\)")
def _(D, F):
    ours = [bwd(D, v, d, N, c, "bf16").tflops / bwd(D, v, d, N, c).tflops
            for d in (64, 128) for v in ("tc", "tuned", fastest(d)) for N in (1024, 4096, 16384) for c in (0, 1)]
    fa2 = [bwd(D, "pytorch_flash_bwd", d, N, c, "bf16").tflops / bwd(D, "pytorch_flash_bwd", d, N, c).tflops
           for d in (64, 128) for N in (1024, 4096, 16384) for c in (0, 1)]
    out = [100 * max(abs(x - 1) for x in ours) + 0.49, 100 * max(abs(x - 1) for x in fa2)]  # "within 2%": at most
    for d, c in ((64, 0), (64, 1), (128, 0), (128, 1)):
        out += [bwd(D, fastest(d), d, N, c, "bf16").tflops / bwd(D, "pytorch_flash_bwd", d, N, c, "bf16").tflops
                for N in (1024, 4096, 16384)]
    return out


@prose(CH07, r"Standard attention's DRAM bytes equal its model to ([\d.]+)% \(([\d.]+) GB\)")
def _(D, F):
    r = D.one("07_backward", "standard_fwdbwd", "fp16", B=64, H=16, N=1024, d=64, causal=0)
    return [100 * abs(r.dram / r.io_model_bytes - 1) + 0.004, Bytes(r.dram)]


@prose(CH07, r"a floor of ([\d.]+) GB at the ([\d.]+) TB/s this H100 copies 1 GB at \(io_probe, \[summary\]\(results/h100/summary.md\)\): ([\d.]+) ms, and it runs at ([\d.]+) ms")
def _(D, F):
    r = D.one("07_backward", "standard_fwdbwd", "fp16", B=64, H=16, N=1024, d=64, causal=0)
    copy = max((p for p in D.rows if p.stage == "io_probe"), key=lambda p: p.io_model_bytes)
    return [Bytes(r.dram), copy.gbps / 1000, r.dram / copy.gbps / 1e6, r.ms]


@prose(CH07, r"would be only ([\d.]+)× slower than ours")
def _(D, F):
    r = D.one("07_backward", "standard_fwdbwd", "fp16", B=64, H=16, N=1024, d=64, causal=0)
    ours = D.one("07_backward", "wide_fwdbwd", "fp16", B=64, H=16, N=1024, d=64, causal=0)
    copy = max((p for p in D.rows if p.stage == "io_probe"), key=lambda p: p.io_model_bytes)
    return [r.dram / copy.gbps / 1e6 / ours.ms]


@prose(CH07, r"SDPA's math backend takes ([\d.]+) ms, ([\d.]+)× our FlashAttention")
def _(D, F):
    sh = dict(B=64, H=16, N=1024, d=64, causal=0)
    m = D.one("07_backward", "pytorch_math_fwdbwd", "fp16", **sh)
    return [m.ms, m.ms / D.one("07_backward", "wide_fwdbwd", "fp16", **sh).ms]


@prose(CH07, r"Our own FlashAttention is ([\d.]+)× faster than FA-2 forward \+ backward at this shape, and ([\d.]+)× slower than cuDNN")
def _(D, F):
    sh = dict(B=64, H=16, N=1024, d=64, causal=0)
    ours = D.one("07_backward", "wide_fwdbwd", "fp16", **sh).ms
    return [D.one("07_backward", "pytorch_flash_fwdbwd", "fp16", **sh).ms / ours,
            ours / D.one("07_backward", "pytorch_cudnn_fwdbwd", "fp16", **sh).ms]


@prose(CH07, r"fp16 d = 64 \(B·N = 16384, H = 32\): (\d+) / (\d+) / (\d+) TFLOP/s at N = 1k / 4k / 16k, and ([\d.]+) GB of device memory at 16k, where FlashAttention needs ([\d.]+) GB")
def _(D, F):
    out = [bwd(D, "standard", 64, N).tflops for N in (1024, 4096, 16384)]
    return out + [Bytes(bwd(D, "standard", 64, 16384).peak_mem_bytes), Bytes(bwd(D, "wide", 64, 16384).peak_mem_bytes)]


@prose(CH07, r"`peak_mem_bytes` in results.csv; ([\d.]+) GB deterministic\)")
def _(D, F):
    return [Bytes(bwd(D, "wide_deterministic", 64, 16384).peak_mem_bytes)]


@prose(CH07, r"fp32 at B = 4, H = 8, N = 1024, d = 64: standard ([\d.]+) ms, ([\d.]+) GB SM↔L2, ([\d.]+) GB of device memory; FlashAttention's fp32 kernel ([\d.]+) ms \(([\d.]+)× faster, ([\d.]+) TFLOP/s\), ([\d.]+) GB SM↔L2, ([\d.]+) GB")
def _(D, F):
    s_ = D.one("07_backward", "standard", "fp32", B=4, H=8, N=1024, d=64, causal=0)
    f = D.one("07_backward", "flash_bwd", "fp32", B=4, H=8, N=1024, d=64, causal=0)
    return [s_.ms, Bytes(s_.l2), Bytes(s_.peak_mem_bytes), f.ms, s_.ms / f.ms, f.tflops, Bytes(f.l2), Bytes(f.peak_mem_bytes)]


@prose(CH07, r"the exact model is ([\d.]+) GB and the H100 measured ([\d.]+) GB\. Standard attention's backward model, 7e·N² \+ 8e·N·d a head, is ([\d.]+) GB: only ([\d.]+)× more between the SMs and L2\. The large saving is in DRAM and in memory: ([\d.]+) GB of DRAM traffic against ([\d.]+) GB, and ([\d.]+) GB of device memory against ([\d.]+) GB")
def _(D, F):
    w, s_ = bwd(D, "wide", 64, 16384), bwd(D, "standard", 64, 16384)
    return [Bytes(w.io_model_bytes), Bytes(w.l2), Bytes(s_.io_model_bytes), s_.io_model_bytes / w.io_model_bytes,
            Bytes(w.dram), Bytes(s_.dram), Bytes(w.peak_mem_bytes), Bytes(s_.peak_mem_bytes)]


# stage 08: FlashAttention-3 on Hopper
@spec("readme-flash-v3", H100_RESULTS)
def _(row, D, F):
    d, N = row.num("d"), row.num("N")
    g = lambda v: grid(D, "08_flash_v3", v, "fp16", d, N)  # noqa: E731
    tuned, cudnn = g("tuned"), g("pytorch_cudnn")
    columns = {"stage 06": "06_lazy_rescale", "1 wgmma": "wgmma", "2 tma": "tma", "3 warp_specialized": "warp_specialized",
               "4 pingpong": "pingpong", "5 overlap": "overlap", "6 tuned": "tuned", "FA-2 (SDPA flash)": "pytorch_flash",
               "cuDNN": "pytorch_cudnn"}
    out = {col: g(v).tflops for col, v in columns.items()}
    # kernel times (CUPTI for ours, torch.profiler for the peers): the peer's over ours
    out["tuned / cuDNN, kernel times"] = cudnn.kernel_ms / tuned.kernel_ms
    out["SM↔L2, tuned: model / measured"] = [Bytes(tuned.io_model_bytes), Bytes(tuned.l2)]
    out["DRAM"] = Bytes(tuned.dram)
    return out


@spec("ch08-ladder", H100_RESULTS)
def _(row, D, F):
    d, N, c, t = row.num("d"), row.num("N"), 1 if row["causal"] == "yes" else 0, row["dtype"]
    g = lambda v: grid(D, "08_flash_v3", v, t, d, N, c)  # noqa: E731
    tuned, fa2, cudnn = g("tuned"), g("pytorch_flash"), g("pytorch_cudnn")
    return {"stage 06": g("06_lazy_rescale").tflops, "rung 5": g("overlap").tflops, "tuned": tuned.tflops,
            "FA-2": fa2.tflops, "cuDNN": cudnn.tflops, "tuned / cuDNN, events": tuned.tflops / cudnn.tflops,
            "tuned / cuDNN, kernels": cudnn.kernel_ms / tuned.kernel_ms, "tuned / FA-2, kernels": fa2.kernel_ms / tuned.kernel_ms}


README = H100_RESULTS  # the front page's tables and statuses moved there


@prose(README, r"In fp32, FA-2 runs at ([\d.]+) TFLOP/s at B = 8, H = 32, N = 4096, d = 64: ([\d.]+)× stage 05's FA-1 and ([\d.]+)× PyTorch's mem-efficient kernel; at B = 1, H = 8, N = 16384, where FA-1's one block per head leaves most SMs idle, ([\d.]+)× FA-1")
def _(D, F):
    g = lambda v, B=8, H=32, N=4096: attn(D, "06_flash_v2", v, "fp32", B, H, N, 64)  # noqa: E731
    return [g("flash_v2").tflops, g("flash_v1").ms / g("flash_v2").ms, g("flash_v2").tflops / g("pytorch_efficient").tflops,
            g("flash_v1", 1, 8, 16384).ms / g("flash_v2", 1, 8, 16384).ms]


@prose(README, r"standard attention ([\d.]+) ms, ([\d.]+) GB to DRAM; ours \(stage 06 `tuned` \+ stage 07 `wide`\) ([\d.]+) ms, ([\d.]+) GB \(([\d.]+)× faster, ([\d.]+)× less traffic; the paper's A100 ratios are ([\d.]+)× and ([\d.]+)×, and the chapter shows why this GPU gives less\); FA-2 ([\d.]+) ms, cuDNN ([\d.]+) ms")
def _(D, F):
    sh = dict(B=64, H=16, N=1024, d=64, causal=0)
    g = lambda v: D.one("07_backward", v, "fp16", **sh)  # noqa: E731
    s_, o = g("standard_fwdbwd"), g("wide_fwdbwd")
    return [s_.ms, Bytes(s_.dram), o.ms, Bytes(o.dram), s_.ms / o.ms, s_.dram / o.dram, 41.7 / 7.3, 40.3 / 4.4,
            g("pytorch_flash_fwdbwd").ms, g("pytorch_cudnn_fwdbwd").ms]


@prose(README, r"A device-to-device copy of 1 GB runs at ([\d,]+) GB/s")
def _(D, F):
    return [max((p for p in D.rows if p.stage == "io_probe"), key=lambda p: p.io_model_bytes).gbps]


@prose(README, r"ready \(last rung ([\d.]+)–([\d.]+)× FA-2 in all 24 cells\)")
def _(D, F):
    return list(ratio_range(D, "lazy_rescale", "pytorch_flash"))


@prose(README, r"ready \(fastest rung ([\d.]+)–([\d.]+)× FA-2's backward in all 24 cells; Fig. 2 forward \+ backward ([\d.]+)× faster than standard, ([\d.]+)× less DRAM traffic\)")
def _(D, F):
    sh = dict(B=64, H=16, N=1024, d=64, causal=0)
    s_, o = (D.one("07_backward", v, "fp16", **sh) for v in ("standard_fwdbwd", "wide_fwdbwd"))
    lo, hi = bwd_range(D, lambda t, d, N, c: bwd(D, fastest(d), d, N, c, t).tflops / bwd(D, "pytorch_flash_bwd", d, N, c, t).tflops)
    return [lo, hi, s_.ms / o.ms, s_.dram / o.dram]


@prose(CH02, r"\(that path needs 167 registers\): ([\d.]+) TFLOP/s, ([\d.]+)× cuBLAS \(\[ragged.txt\]\(results/h100/ragged.txt\)\)\. It also moves ([\d.]+) GB instead of the model's ([\d.]+)")
def _(D, F):
    rows = {(r["variant"], r["shape"]): r for r in F["ragged"]}
    rb, cb = rows[("register_blocked", "M=4095 N=4095 K=4095")], rows[("cublas", "M=4095 N=4095 K=4095")]
    return [float(rb["tflops"]), float(rb["tflops"]) / float(cb["tflops"]),
            Bytes(float(rb["l2_read_bytes"]) + float(rb["l2_write_bytes"])), Bytes(float(rb["io_model_bytes"]))]


@prose(CH02, r"At n = 4092 \(16-byte path, rows 16 bytes off the sector grid\) it is ([\d.]+) TFLOP/s with ([\d.]+) GB")
def _(D, F):
    rb = {(r["variant"], r["shape"]): r for r in F["ragged"]}[("register_blocked", "M=4092 N=4092 K=4092")]
    return [float(rb["tflops"]), Bytes(float(rb["l2_read_bytes"]) + float(rb["l2_write_bytes"]))]


@prose(CH06, r"At d = 128 the same table ends ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+) / \*\*([\d.]+)\*\* ms against FA-2's ([\d.]+) ms \(ncu, one launch each, \[ncu_06_ladder.csv\]\(results/h100/ncu_06_ladder.csv\)\), tensor pipe ([\d.]+) % / \*\*([\d.]+) %\*\* against ([\d.]+) %")
def _(D, F):
    ncu = {r["kernel"]: r for r in F["ncu_06_ladder"] if " d=128 " in r["shape"]}
    t = lambda k: float(ncu[k]["gpu__time_duration.sum"]) / 1e6  # noqa: E731
    p = lambda k: float(ncu[k]["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"])  # noqa: E731
    return [t("mma"), t("ldmatrix"), t("cp_async"), t("tuned"), t("lazy_rescale"), t("pytorch_flash (FA-2)"),
            p("tuned"), p("lazy_rescale"), p("pytorch_flash (FA-2)")]


# Chapter 06, rung 4 in steps: the sentences around the table, from the same one round.
def rung4_all(F, step, where=lambda d, c, N: True):
    return rung4_range(F, step, [x for x in RUNG4_CELLS if where(*x)])


def rung4_spread(F, where):
    """The largest (slowest − fastest timed call) / median of any step in the cells chosen, in %."""
    spreads = []
    for d, c, N in RUNG4_CELLS:
        if where(d, c, N):
            for v in RUNG4_STEPS:
                r = rung4_row(F, v, d, c, N)
                spreads.append(100 * (float(r["ms_max"]) - float(r["ms_min"])) / float(r["ms"]))
    return max(spreads)


@prose(CH06, r"the fastest and slowest timed calls of a kernel lie within ([\d.]+) % of each other in every cell but d = 64, N = 16384, where they spread by up to ([\d.]+) %")
def _(D, F):
    return [rung4_spread(F, lambda d, c, N: not (d == 64 and N == 16384)), rung4_spread(F, lambda d, c, N: d == 64 and N == 16384)]


@prose(CH06, r"\*\*4a exp2\*\* bought (\d+)–(\d+) % in every cell")
def _(D, F):
    return [100 * (g - 1) for g in rung4_all(F, "exp2")]


@prose(CH06, r"\*\*4b one_barrier\*\* is a few percent faster at d = 64 and (\d+)–(\d+) % \*slower\* at d = 128")
def _(D, F):
    lo, hi = rung4_all(F, "one_barrier", lambda d, c, N: d == 64)
    if lo <= 1:
        raise ValueError("4b is not faster in every d = 64 cell")
    lo, hi = rung4_all(F, "one_barrier", lambda d, c, N: d == 128)
    return [100 * (1 / hi - 1), 100 * (1 / lo - 1)]


@prose(CH06, r"4a → 4c, the two steps bought about the same at both d \(([\d.]+)–([\d.]+)× at d = 64, ([\d.]+)–([\d.]+)× at d = 128\)")
def _(D, F):
    out = []
    for dd in (64, 128):
        g = [rung4_ms(F, "exp2", d, c, N) / rung4_ms(F, "skip_mask", d, c, N) for d, c, N in RUNG4_CELLS if d == dd]
        out += [min(g), max(g)]
    return out


@prose(CH06, r"the fourth, d = 128, N = 16384, gained (\d+) %\. That cell has the fewest blocks in the grid \(([\d,]+), as many as d = 128, N = 1024\) and by far the longest rows \(up to (\d+) key blocks against (\d+)\)")
def _(D, F):
    others = [rung4_gain(F, "heaviest_first", d, c, N) for d, c, N in RUNG4_CELLS if c and (d, N) != (128, 16384)]
    if max(abs(g - 1) for g in others) > 0.015:
        raise ValueError(f"4d moved in another causal cell: {others}")
    blocks = lambda d, N: (16384 // N) * (2048 // d) * (N // 64)  # noqa: E731  (B·H query blocks of 64)
    if min(blocks(d, N) for d, c, N in RUNG4_CELLS) != blocks(128, 16384) or blocks(128, 1024) != blocks(128, 16384):
        raise ValueError("the grid's block counts differ from the sentence")
    return [100 * (rung4_gain(F, "heaviest_first", 128, 1, 16384) - 1), blocks(128, 16384), 16384 // 64, 1024 // 64]


@prose(CH06, r"\*\*4e tuned\*\* \(32 rows a warp\) is the largest step at d = 128 in every cell \(([\d.]+)–([\d.]+)×\)\. At d = 64 it is not: ([\d.]+)× and ([\d.]+)× at N = 1024, less than 4a's there")
def _(D, F):
    for d, c, N in RUNG4_CELLS:
        gains = {v: rung4_gain(F, v, d, c, N) for v in RUNG4_STEPS[1:]}
        if d == 128 and max(gains, key=gains.get) != "tuned":
            raise ValueError(f"4e is not the largest step at d = 128, causal {c}, N = {N}")
        if d == 64 and N == 1024 and gains["tuned"] >= gains["exp2"]:
            raise ValueError(f"4e is not below 4a at d = 64, causal {c}, N = 1024")
    return rung4_all(F, "tuned", lambda d, c, N: d == 128) + [rung4_gain(F, "tuned", 64, c, 1024) for c in (1, 0)]


@prose(CH06, r"Rung 3 to rung 4 in all: ([\d.]+)–([\d.]+)× at d = 64 \(the rung log's 1\.43× at N = 4096 came from another run\) and ([\d.]+)–([\d.]+)× at d = 128")
def _(D, F):
    out = []
    for dd in (64, 128):
        g = [rung4_ms(F, "cp_async", d, c, N) / rung4_ms(F, "tuned", d, c, N) for d, c, N in RUNG4_CELLS if d == dd]
        out += [min(g), max(g)]
    return out


@prose(CH06, r"in one round \(\[Rung 4, step by step\]\(#rung-4-step-by-step\)\) 4e was ([\d.]+)–([\d.]+)× faster at d = 64 and ([\d.]+)–([\d.]+)× at d = 128")
def _(D, F):
    return rung4_all(F, "tuned", lambda d, c, N: d == 64) + rung4_all(F, "tuned", lambda d, c, N: d == 128)

# stage 10: ring attention on two H200s (docs/results/h200x2/stage10/). The CSVs give each row's
# median time; the printed tables' notes give each rank's timeline (read by read_timelines below).
CH10 = "docs/10_ring_attention.md"
STAGE10 = "docs/results/h200x2/stage10"


def r10(F, run, variant, N, causal):
    """The one row of a stage-10 CSV (run 1: scaling_8k_32k.csv, run 2: scaling_16k_64k_peer.csv, run 3:
    flushed/scaling_flushed.csv, every GPU's L2 flushed before each repetition)."""
    rows = [r for r in F[f"stage10_run{run}"] if r["variant"] == variant
            and f" N={N} " in r["shape"] + " " and f"causal={int(causal)}" in r["shape"].split()]
    if len(rows) != 1:
        raise LookupError(f"{len(rows)} rows for stage 10 run {run} {variant} N={N} causal={int(causal)}")
    return rows[0]


def ms10(F, run, variant, N, causal):
    return float(r10(F, run, variant, N, causal)["ms"])


def scaling10(F, run, variant, N, causal, G=2):
    """single / (G x variant), in %."""
    return 100 * ms10(F, run, "single", N, causal) / (G * ms10(F, run, variant, N, causal))


def read_timelines(root):
    """{(N, causal, variant): {"ranks": [(span, transfers, GB/s, waited, hidden%)], "enqueue", "scaling"}}
    from the notes of the printed tables: '... N=65536 ... causal=1 fp16 zigzag_peer G=2 zigzag: rank 0 ...'.
    Tables printed before the peer transport existed name no variant ('fp16 G=2 ring:'): the layout."""
    out = {}
    folder = os.path.join(root, STAGE10)
    rank = re.compile(r"rank (\d+) ([\d.]+) ms \(transfers ([\d.]+) ms, (\d+) GB/s; waited ([\d.]+) ms: (\d+)% hidden\)")
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".txt"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            for line in f:
                if ": rank 0 " not in line:
                    continue
                head, rest = line.strip().split(": ", 1)
                tokens = head.split()
                items = dict(t.split("=", 1) for t in tokens if "=" in t)
                plain = [t for t in tokens if "=" not in t]  # dtype, [variant], layout
                variant = plain[1] if len(plain) == 3 else plain[-1]
                key = (int(items["N"]), int(items["causal"]), variant)
                enqueue = re.search(r"enqueue ([\d.]+) ms", rest)
                scaling = re.search(r"scaling ([\d.]+)%", rest)
                out.setdefault(key, []).append({
                    "file": name,
                    "ranks": [tuple(float(x) for x in m.groups()[1:]) for m in rank.finditer(rest)],
                    "enqueue": float(enqueue.group(1)) if enqueue else None,
                    "scaling": float(scaling.group(1)) if scaling else None})
    return out


def timeline(F, N, causal, variant):
    found = F["stage10_timelines"].get((N, int(causal), variant), [])
    if len(found) != 1:
        raise LookupError(f"{len(found)} timelines for N={N} causal={int(causal)} {variant}")
    return found[0]


CH10_VARIANTS = {"ring, NCCL": "ring", "ring, peer copies": "ring_peer", "zigzag, NCCL": "zigzag",
                 "zigzag, peer copies": "zigzag_peer"}


@spec("ch10-timelines", CH10)
def _(row, D, F):
    t = timeline(F, 65536, row["mask"] == "causal", CH10_VARIANTS[row["variant"]])
    r0, r1 = t["ranks"]
    return {"rank 0 span": r0[0], "rank 1 span": r1[0], "transfer (rank 0 / 1)": [r0[1], r1[1]],
            "GB/s each way (rank 0 / 1)": [r0[2], r1[2]], "waited": [r0[3], r1[3]], "scaling": t["scaling"]}


@spec("ch10-scaling", CH10)
def _(row, D, F):
    run, N, causal = row.num("run"), row.num("N"), row["mask"] == "causal"
    out = {"single": ms10(F, run, "single", N, causal)}
    for column, variant in (("ring", "ring"), ("zigzag", "zigzag"), ("ring, peer", "ring_peer"),
                            ("zigzag, peer", "zigzag_peer"), ("ring, nothing sent", "ring_compute"),
                            ("zigzag, nothing sent", "zigzag_compute")):
        try:
            out[column] = [ms10(F, run, variant, N, causal), scaling10(F, run, variant, N, causal)]
        except LookupError:
            out[column] = NoNumber()
    return out


def loss10(F, variant, causal, N=65536):
    """ms lost by the ring with transfers against the same ring with nothing sent (run 2)."""
    return ms10(F, 2, variant, N, causal) - ms10(F, 2, variant.split("_")[0] + "_compute", N, causal)


def bandwidths10(F, peer):
    """Every rank's GB/s in every timeline, of the peer rows or of the NCCL rows."""
    return [r[2] for (N, c, v), ts in F["stage10_timelines"].items() if v.endswith("_peer") == peer
            for t in ts for r in t["ranks"]]


@spec("ch10-transports", CH10)
def _(row, D, F):
    peer = row.cells[0].startswith("copy engines")
    suffix = "_peer" if peer else ""
    bw = bandwidths10(F, peer)
    return {"per direction, while the attention runs": [min(bw), max(bw)],
            "loss against nothing sent, N = 65536": [loss10(F, "ring" + suffix, 0), loss10(F, "zigzag" + suffix, 0),
                                                      loss10(F, "ring" + suffix, 1), loss10(F, "zigzag" + suffix, 1)]}


# The model of "What changes across nodes": F = 600 TFLOP/s, W = 50 GB/s, N = 2^20, H = 16, d = 128, fp16.
def nodes_model(nodes, F_=600e12, W=50e9, N=2 ** 20, H=16, d=128):
    G = 8 * nodes
    c = N // G
    shard = 2 * c * H * d * 2
    transfer = shard / W * 1e3
    compute = 4 * c * c * d * H / F_ * 1e3
    return G, c, shard, transfer, compute


@spec("ch10-nodes", CH10)
def _(row, D, F):
    G, c, shard, transfer, compute = nodes_model(row.num("nodes"))
    smallest = [G * 600e12 / 50e9, 2 * G * 600e12 / 50e9]  # tokens: G·c with c >= F/W, twice that causal
    return {"G": G, "c = N/G": c, "shard": Bytes(shard, "MB"), "transfer at 50 GB/s": transfer,
            "compute, not causal": compute, "ratio, not causal": compute / transfer,
            "compute, causal zigzag": compute / 2, "ratio, causal": compute / 2 / transfer,
            "smallest N that hides it: not causal / causal": [x / 1e6 if x >= 1e6 else x / 1e3 for x in smallest]}


def single_tflops10(F):
    return [float(r["tflops"]) for run in (1, 2) for r in F[f"stage10_run{run}"] if r["variant"] == "single"]


def errors10(F, single):
    return [float(r["max_rel_err"]) for run in (1, 2) for r in F[f"stage10_run{run}"]
            if (r["variant"] == "single") == single and r["max_rel_err"]]


def enqueue10(F):
    return [t["enqueue"] for ts in F["stage10_timelines"].values() for t in ts if t["enqueue"] is not None]


@prose(CH10, r"Stage 08's kernel runs at (\d+)–(\d+) TFLOP/s on one H200 in this chapter's runs\. At N = 65536 \(one sequence, 16 heads, d = 128\) it still takes ([\d.]+) ms")
def _(D, F):
    t = single_tflops10(F)
    return [min(t), max(t), ms10(F, 2, "single", 65536, 0)]


@prose(CH10, r"Not causal, the ring on two GPUs is ([\d.]+)% of twice one GPU's speed at N = 65536\. Causal, the plain ring reaches only ([\d.]+)%, because its ranks get unequal work; the \[zigzag\]\(glossary.md#zigzag\) layout evens it out and gets ([\d.]+)%")
def _(D, F):
    return [scaling10(F, 2, "ring", 65536, 0), scaling10(F, 2, "ring", 65536, 1), scaling10(F, 2, "zigzag", 65536, 1)]


@prose(CH10, r"The host takes ([\d.]+)–([\d.]+) ms to enqueue one forward pass")
def _(D, F):
    e = enqueue10(F)
    return [min(e), max(e)]


@prose(CH10, r"And the host's ([\d.]+)–([\d.]+) ms to enqueue a forward is of the order of the forward itself")
def _(D, F):
    e = enqueue10(F)
    return [min(e), max(e)]


@prose(CH10, r"At N = 65536, not causal, the NCCL ring takes ([\d.]+) ms and the same ring with nothing sent ([\d.]+) ms: ([\d.]+) ms lost, two thirds of the ([\d.]+) ms the transfer took")
def _(D, F):
    ranks = timeline(F, 65536, 0, "ring")["ranks"]
    return [ms10(F, 2, "ring", 65536, 0), ms10(F, 2, "ring_compute", 65536, 0), loss10(F, "ring", 0),
            sum(r[1] for r in ranks) / len(ranks)]


@prose(CH10, r"doing the copy instead \(below\), which need no SM, the loss is smaller but not zero: ([\d.]+) ms\.")
def _(D, F):
    return [loss10(F, "ring_peer", 0)]


@prose(CH10, r"NCCL alone moves the (\d+) MB at (\d+) GB/s \(`ring_transfers`\), beside the attention at (\d+)–(\d+) GB/s")
def _(D, F):
    r = r10(F, 2, "ring_transfers", 65536, 0)
    bw = [x[2] for x in timeline(F, 65536, 0, "ring")["ranks"]]
    return [Bytes(float(r["io_model_bytes"]), "MB"), float(r["gbps"]), min(bw), max(bw)]


@prose(CH10, r"It measures ([\d.]+)% \(([\d.]+)% with nothing sent\), with rank 0 done after ([\d.]+) ms and rank 1 after ([\d.]+) ms")
def _(D, F):
    ranks = timeline(F, 65536, 1, "ring")["ranks"]
    return [scaling10(F, 2, "ring", 65536, 1), scaling10(F, 2, "ring_compute", 65536, 1), ranks[0][0], ranks[1][0]]


@prose(CH10, r"On two GPUs the ranks finish at ([\d.]+) and ([\d.]+) ms, and the ring reaches ([\d.]+)% of ideal over NCCL, ([\d.]+)% with peer copies")
def _(D, F):
    ranks = timeline(F, 65536, 1, "zigzag")["ranks"]
    return [ranks[0][0], ranks[1][0], scaling10(F, 2, "zigzag", 65536, 1), scaling10(F, 2, "zigzag_peer", 65536, 1)]


@prose(CH10, r"At N = 16384 zigzag with nothing sent reaches ([\d.]+)% of ideal against the plain ring's ([\d.]+)%; at N = 65536 the two are level \(([\d.]+)%\)")
def _(D, F):
    a, b = scaling10(F, 2, "zigzag_compute", 65536, 0), scaling10(F, 2, "ring_compute", 65536, 0)
    if abs(a - b) > 0.05:
        raise ValueError(f"not level at N = 65536: {a:.2f} and {b:.2f}")
    return [scaling10(F, 2, "zigzag_compute", 16384, 0), scaling10(F, 2, "ring_compute", 16384, 0), a]


@prose(CH10, r"the copy engines reach (\d+)% of that \((\d+) GB/s\)")
def _(D, F):
    bw = max(bandwidths10(F, True))
    return [100 * bw / 450, bw]


def gaps10(F, N, peer):
    """(ring with transfers / nothing sent − 1) in %, run 2, over layouts and masks."""
    suffix = "_peer" if peer else ""
    return [100 * (ms10(F, 2, lay + suffix, N, c) / ms10(F, 2, lay + "_compute", N, c) - 1)
            for lay in ("ring", "zigzag") for c in (0, 1)]


@prose(CH10, r"Against nothing sent, the peer rows lose ([\d.]+)–([\d.]+)% at N = 65536, the NCCL rows ([\d.]+)–([\d.]+)%\. At N = 16384 \(run 2 below\) the peer rows are within (−[\d.]+)% to \+([\d.]+)% of nothing sent, about as far apart as the same row in two runs \(the two runs below differ by ([\d.]+)–([\d.]+)% in the not-causal ring rows\), and the NCCL rows lose ([\d.]+)–([\d.]+)%")
def _(D, F):
    p64, n64, p16, n16 = gaps10(F, 65536, True), gaps10(F, 65536, False), gaps10(F, 16384, True), gaps10(F, 16384, False)
    runs = [100 * abs(ms10(F, 2, v, 16384, 0) / ms10(F, 1, v, 16384, 0) - 1)
            for v in ("ring", "zigzag", "ring_compute", "zigzag_compute")]
    return [min(p64), max(p64), min(n64), max(n64), min(p16), max(p16), min(runs), max(runs), min(n16), max(n16)]


@prose(CH10, r"At N = 8192 two GPUs are ([\d.]+)× one \(([\d.]+)%\) without a mask\. With nothing sent it is already only ([\d.]+)%")
def _(D, F):
    return [ms10(F, 1, "single", 8192, 0) / ms10(F, 1, "ring", 8192, 0), scaling10(F, 1, "ring", 8192, 0),
            scaling10(F, 1, "ring_compute", 8192, 0)]


@prose(CH10, r"The transfer costs the rest \(([\d.]+) against ([\d.]+) ms\): it takes ([\d.]+) ms alone, a third of the compute's ([\d.]+) ms, where at N = 65536 it takes ([\d.]+) ms of ([\d.]+) ms\.")
def _(D, F):
    t8, c8 = ms10(F, 1, "ring_transfers", 8192, 0), ms10(F, 1, "ring_compute", 8192, 0)
    if abs(t8 / c8 - 1 / 3) > 0.03:
        raise ValueError(f"not a third: {t8 / c8:.3f}")
    return [ms10(F, 1, "ring", 8192, 0), c8, t8, c8, ms10(F, 2, "ring_transfers", 65536, 0),
            ms10(F, 2, "ring_compute", 65536, 0)]


@prose(CH10, r"against the ([\d.]+)–([\d.]+) GB/s measured over NVLink above")
def _(D, F):
    return [min(bandwidths10(F, False)), max(bandwidths10(F, True))]


@prose(CH10, r"Causal at N = 8192, the plain ring on two GPUs is slower than one GPU \(([\d.]+) against ([\d.]+) ms\)")
def _(D, F):
    return [ms10(F, 1, "ring", 8192, 1), ms10(F, 1, "single", 8192, 1)]


@prose(CH10, r"`single` took ([\d.]+) ms in run 1 and ([\d.]+) ms in run 2, and the plain ring's scaling reads ([\d.]+)% or ([\d.]+)% accordingly\. A ratio of two measurements carries the noise of both\. The not-causal ring rows moved by ([\d.]+)–([\d.]+)% between the runs; the causal plain ring by ([\d.]+)% \(([\d.]+) against ([\d.]+) ms\)")
def _(D, F):
    runs = [100 * abs(ms10(F, 2, v, 16384, 0) / ms10(F, 1, v, 16384, 0) - 1)
            for v in ("ring", "zigzag", "ring_compute", "zigzag_compute")]
    a, b = ms10(F, 1, "ring", 16384, 1), ms10(F, 2, "ring", 16384, 1)
    return [ms10(F, 1, "single", 16384, 0), ms10(F, 2, "single", 16384, 0), scaling10(F, 1, "ring", 16384, 0),
            scaling10(F, 2, "ring", 16384, 0), min(runs), max(runs), 100 * (a / b - 1), a, b]


@prose(CH10, r"Their worst relative errors, ([\d.]+)·10⁻⁴ to ([\d.]+)·10⁻³, are above `single`'s ([\d.]+)·10⁻⁴ to ([\d.]+)·10⁻⁴")
def _(D, F):
    ring, single = errors10(F, False), errors10(F, True)
    return [min(ring) * 1e4, max(ring) * 1e3, min(single) * 1e4, max(single) * 1e4]


@prose(CH10, r"Stage 08's kernel ran at (\d+)–(\d+) on one H200 in these runs, and the ring's pairs at about (\d+) a GPU: ([\d,]+) TFLOP/s on two with nothing sent at N = 65536")
def _(D, F):
    t = single_tflops10(F)
    r = float(r10(F, 2, "ring_compute", 65536, 0)["tflops"])
    return [min(t), max(t), r / 2, r]


@prose(CH10, r"The two-GPU ring should reach 66\.7% and measures ([\d.]+)% at N = 65536")
def _(D, F):
    return [scaling10(F, 2, "ring", 65536, 1)]


@prose(CH10, r"On two GPUs, with nothing sent, the ring measures ([\d.]+)%, almost the bound\. The pairs and merges cost little at this length\. The rest, ([\d.]+)% → ([\d.]+)%, is the NCCL transfer running under the compute \(([\d.]+) → ([\d.]+) ms\)")
def _(D, F):
    return [scaling10(F, 2, "ring_compute", 65536, 1), scaling10(F, 2, "ring_compute", 65536, 1),
            scaling10(F, 2, "ring", 65536, 1), ms10(F, 2, "ring_compute", 65536, 1), ms10(F, 2, "ring", 65536, 1)]


@prose(CH10, r"a step computes for about ([\d.]+) ms \(([\d.]+) ms for two steps with nothing sent\) against a transfer of ([\d.]+) ms over NCCL and ([\d.]+) ms with the copy engines\. Hidden, by a factor of (\d+) to (\d+)\. It still costs ([\d.]+) ms over NCCL")
def _(D, F):
    compute = ms10(F, 2, "ring_compute", 65536, 0)
    nccl = sum(r[1] for r in timeline(F, 65536, 0, "ring")["ranks"]) / 2
    peer = sum(r[1] for r in timeline(F, 65536, 0, "ring_peer")["ranks"]) / 2
    return [compute / 2, compute, nccl, peer, compute / 2 / nccl, compute / 2 / peer, loss10(F, "ring", 0)]


@prose(CH10, r"The copy engines use no SM, and the peer ring loses ([\d.]+) ms instead")
def _(D, F):
    return [loss10(F, "ring_peer", 0)]


@prose(CH10, r"`zigzag_copies`: four ranks on one GPU at N = 32768, not causal, ([\d.]+) and ([\d.]+) ms against `single`'s ([\d.]+) ms")
def _(D, F):
    g = lambda v: float(next(r for r in F["stage10_first"] if r["variant"] == v and "causal=0" in r["shape"])["ms"])  # noqa: E731
    return [g("ring_copies"), g("zigzag_copies"), g("single")]


@prose(CH10, r"take ([\d.]+)% longer than one call \(single / copies = ([\d.]+)\)\. Zigzag cuts into 64 pairs of 4096 rows, each a quarter of the work with the same start and tail: ([\d.]+)% longer \(([\d.]+)\)")
def _(D, F):
    g = lambda v: float(next(r for r in F["stage10_first"] if r["variant"] == v and "causal=0" in r["shape"])["ms"])  # noqa: E731
    s, r, z = g("single"), g("ring_copies"), g("zigzag_copies")
    return [100 * (r / s - 1), s / r, 100 * (z / s - 1), s / z]


@prose(CH10, r"lie ([\d.]+)% of the median apart in the middle row of run 2 and up to ([\d.]+)% \(`single`\s+at N = 65536: ([\d.]+)–([\d.]+) ms\)")
def _(D, F):
    rows = [r for r in F["stage10_run2"] if r["ms"]]
    spread = sorted((float(r["ms_max"]) - float(r["ms_min"])) / float(r["ms"]) for r in rows)
    single = r10(F, 2, "single", 65536, 0)
    return [100 * spread[len(spread) // 2], 100 * max(spread), float(single["ms_min"]), float(single["ms_max"])]


@prose(CH10, r"repetition of a row lie ([\d.]+)% of the median apart in the middle\s+row and up to ([\d.]+)%, `ring_fb` at N = 32768 without a mask")
def _(D, F):
    rows = [r for r in F["stage10_fb"] if r["ms"]]
    spread = {r["variant"] + r["shape"]: (float(r["ms_max"]) - float(r["ms_min"])) / float(r["ms"]) for r in rows}
    ordered = sorted(spread.values())
    widest = max(spread, key=spread.get)
    if not (widest.startswith("ring_fb") and "N=32768" in widest and "causal=0" in widest):
        raise LookupError("the widest forward + backward spread is " + widest)
    return [100 * ordered[len(ordered) // 2], 100 * ordered[-1]]


def fb10(F, variant, N, causal):
    """ms of a forward + backward row of stage 10 (forward_backward.csv)."""
    rows = [r for r in F["stage10_fb"] if r["variant"] == variant and f" N={N} " in r["shape"] + " "
            and f"causal={int(causal)}" in r["shape"].split()]
    if len(rows) != 1:
        raise LookupError(f"{len(rows)} forward + backward rows for {variant} N={N} causal={int(causal)}")
    return float(rows[0]["ms"])


def fb_scaling10(F, variant, N, causal, G=2):
    return 100 * fb10(F, "single_fb", N, causal) / (G * fb10(F, variant, N, causal))


@spec("ch10-backward", CH10)
def _(row, D, F):
    N, causal = row.num("N"), row["mask"] == "causal"
    return {"single_fb ms": fb10(F, "single_fb", N, causal), "ring_fb ms": fb10(F, "ring_fb", N, causal),
            "zigzag_fb ms": fb10(F, "zigzag_fb", N, causal), "ring scaling": fb_scaling10(F, "ring_fb", N, causal),
            "zigzag scaling": fb_scaling10(F, "zigzag_fb", N, causal)}


@prose(CH10, r"forward and backward together reach ([\d.]+)% at N = 32768\s+without a mask, ([\d.]+)% causal with zigzag")
def _(D, F):
    return [fb_scaling10(F, "ring_fb", 32768, 0), fb_scaling10(F, "zigzag_fb", 32768, 1)]


@prose(CH10, r"The published figure to hold this against is ring-flash-attention's\s+zigzag, about 90% of ideal for forward \+ backward on 8 H800s; ours is ([\d.]+)% on two H200s")
def _(D, F):
    return [fb_scaling10(F, "zigzag_fb", 32768, 1)]


@prose(README, r"in progress \(on two H200s, forward: ([\d.]+)% of ideal not causal and zigzag ([\d.]+)% causal at N = 65536; forward \+ backward: ([\d.]+)% not causal, zigzag ([\d.]+)% causal at N = 32768\)")
def _(D, F):
    return [scaling10(F, 2, "ring", 65536, 0), scaling10(F, 2, "zigzag", 65536, 1),
            fb_scaling10(F, "ring_fb", 32768, 0), fb_scaling10(F, "zigzag_fb", 32768, 1)]

# stage 09: FP8 attention on the H100 (docs/results/h100/stage09/). first_speed.csv has the course's
# schema (stage 08's last rung, the quantisation and the FP8 kernel, same run, same inputs); the
# accuracy table and the failing run before the fresh accumulator are the program's printed text.
CH09 = "docs/09_flash_v3_fp8.md"
CH09_LOG = "docs/results/h200/chapter09_speed_log.md"  # the chapter's speed log, moved whole to the lab record
STAGE09 = "docs/results/h100/stage09"
STAGE09_H200 = "docs/results/h200/stage09"  # the runs on an H200 (its own lab record)


def read_lin_default_p96(path):
    """lin_default_p96.txt: the SASS counts ({tag: {opcode: n}}), Nsight Compute's two columns ({row: (default, lin)}),
    and each kernel's stall samples by opcode ({"default"|"lin": {opcode: % of samples}})."""
    out = {"sass": {}, "ncu": {}, "stalls": {}}
    which = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"(d64|d64_lin|d128|d128_lin) (\{.*\})$", line.strip())
            if m:
                out["sass"][m.group(1)] = ast.literal_eval(m.group(2))
                continue
            m = re.match(r"(\S.*?)\s{2,}([\d.]+)\s+(\S.*?)\s*$", line)
            if m:  # the second column may be words ("(not among the top pipes)")
                second = m.group(3)
                out["ncu"][m.group(1)] = (float(m.group(2)), float(second) if re.fullmatch(r"[\d.]+", second) else None)
            m = re.match(r"== src_(fp8_per_tensor(?:_lin)?)\.csv\.gz", line)
            if m:
                which = "lin" if m.group(1).endswith("_lin") else "default"
                out["stalls"][which] = {}
                continue
            m = re.match(r"\s+([A-Z][A-Z0-9_]+)\s+([\d.]+)% of samples", line)
            if m and which:
                out["stalls"][which][m.group(1)] = float(m.group(2))
    return out


def read_ceiling09(path):
    """The e4m3 matrix product's TFLOP/s from stage09.sh's ceiling line ('... scaled_mm median ... ms (...), 1415 TFLOP/s')."""
    with open(path, encoding="utf-8") as f:
        found = re.findall(r"scaled_mm median .*?, (\d+) TFLOP/s", f.read())
    assert len(found) == 1, found
    return float(found[0])


def read_accuracy09(path):
    """{(inputs, variant): (rmse gpu, max gpu, rmse plain, max plain)} from the --accuracy table:
    'outliers fp8_per_block 1.980e-02 2.803e+00 1.975e-02 2.871e+00' (a variant may hold spaces)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            tokens = line.split()
            if not tokens or tokens[0] not in ("normal", "outliers"):
                continue
            out[(tokens[0], " ".join(tokens[1:-4]))] = tuple(float(x) for x in tokens[-4:])
    return out


def read_runs09(paths):
    """Several runs' CSVs as one: each row's process prefixed by its run's number (1a, 1b, ..., 2a, ...)."""
    rows = []
    for i, path in enumerate(paths):
        for r in read_simple_csv(path):
            r["process"] = f"{i + 1}{r['process']}"
            rows.append(r)
    return rows


def read_sass_counts09(path):
    """[{kernel tag: {opcode: count}}, ...] from the SASS count lines ("stsm {'all': 5728, ...}"), one dict a run."""
    runs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                runs.append({})
            m = re.match(r"(\w+) (\{.*\})$", line.strip())
            if m and runs:
                runs[-1][m.group(1)] = ast.literal_eval(m.group(2))
    return runs


def read_mufu_bench09(path):
    """{name: [(instructions a clock an SM, values a clock an SM), ...]} from mufu_ex2_bench.txt, one entry a pass."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"(\S.*?)\s+instructions/clk/SM ([\d.]+)\s+values/clk/SM ([\d.]+)", line)
            if m:
                out.setdefault(m.group(1).strip(), []).append((float(m.group(2)), float(m.group(3))))
    return out


def read_bias09(path):
    """The failing check before the fresh accumulator: its summary, first mismatch and table rows."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"max rel err ([\d.e+-]+) \(tol ([\d.e+-]+), (\d+) checked, (\d+) bad\)", text)
    first = re.search(r"\[0,43\] = ([\d.]+), expected ([\d.]+)", text)
    ms = {}
    for line in text.split("\n"):
        tokens = line.split()
        if tokens and tokens[0] in ("08_tuned", "quant_per_block", "fp8_per_block"):
            bc = next(i for i, t in enumerate(tokens) if t.startswith("Bc="))
            ms[tokens[0]] = float(tokens[bc + 1])
    return {"max_rel_err": float(m.group(1)), "tol": float(m.group(2)), "checked": int(m.group(3)),
            "bad": int(m.group(4)), "O": float(first.group(1)), "expected": float(first.group(2)), "ms": ms}


def r09(F, variant, d, N, causal=0, key="stage09_speed"):
    """A row of the first version's run (first_speed.csv, with the counters) or, key="stage09_now", of
    the current kernel's (the main job's rows in results.csv)."""
    return F[key].one("09_flash_v3_fp8", variant, "fp16", d=d, N=N, causal=int(causal))


def now09(F, variant, d, N, causal=0):
    return r09(F, variant, d, N, causal, key="stage09_now")


# The cells of the speed run and the schemes run in each.
CELLS09 = [(128, 4096, 0), (128, 16384, 0), (128, 4096, 1), (128, 16384, 1), (64, 4096, 0), (64, 16384, 0),
           (64, 4096, 1), (64, 16384, 1)]


def schemes09(d):
    return ["per_tensor", "per_block_hadamard"]


def speedup09(F, scheme, d, N, causal):
    """Stage 08's time over the FP8 kernel's (same run, same inputs)."""
    return now09(F, "08_tuned", d, N, causal).ms / now09(F, "fp8_" + scheme, d, N, causal).ms


def ratios09(F, d):
    return [speedup09(F, s, dd, N, c) for dd, N, c in CELLS09 if dd == d for s in schemes09(d)]


ACCURACY09_COLUMNS = {"fp16 (stage 08 `tuned`)": "16-bit (08 tuned)", "FP8 per tensor": "fp8_per_tensor",
                      "per block": "fp8_per_block", "per tensor + Hadamard": "fp8_per_tensor_hadamard",
                      "per block + Hadamard": "fp8_per_block_hadamard"}


@spec("ch09-accuracy", CH09)
def _(row, D, F):
    if "paper" in row["error of O"]:
        return {}  # the FA-3 paper's published numbers: not ours to check
    inputs = {"N(0, 1)": "normal", "FA-3's outliers": "outliers"}[row["inputs"]]
    which = {"RMSE": 0, "largest": 1}[row["error of O"]]
    return {col: F["stage09_accuracy"][(inputs, variant)][which] for col, variant in ACCURACY09_COLUMNS.items()}


SCHEME09_NAMES = {"per tensor": "per_tensor", "per block + Hadamard": "per_block_hadamard", "per block": "per_block"}


@prose(CH09, r"The kernel's RMSE is within ([\d.]+)% of plain FP8's in every FP8 cell \(stage 08's within ([\d.]+)% of plain fp16's\)")
def _(D, F):
    acc = F["stage09_accuracy"]
    dev = lambda v: max(abs(acc[(i, v)][0] - acc[(i, v)][2]) / acc[(i, v)][2] * 100 for i in ("normal", "outliers"))  # noqa: E731
    return [max(dev(v) for v in ACCURACY09_COLUMNS.values() if v.startswith("fp8_")), dev("16-bit (08 tuned)")]


@prose(CH09, r"With outliers the Hadamard transform is what helps\*\*: ([\d.]+e-\d) → ([\d.]+e-\d) for both remedies together, ([\d.]+)× less error; per-block scales alone are (\d+)% better than one scale")
def _(D, F):
    acc = F["stage09_accuracy"]
    t, b, h = (acc[("outliers", v)][0] for v in ("fp8_per_tensor", "fp8_per_block", "fp8_per_block_hadamard"))
    return [t, h, t / h, 100 * (1 - b / t)]


@prose(CH09, r"the transform cuts it from ([\d.]+) to ([\d.]+) and from ([\d.]+) to ([\d.]+)\.")
def _(D, F):
    acc = F["stage09_accuracy"]
    m = lambda v: acc[("outliers", v)][1]  # noqa: E731
    return [m("fp8_per_tensor"), m("fp8_per_tensor_hadamard"), m("fp8_per_block"), m("fp8_per_block_hadamard")]


@prose(CH09, r"\(([\d.]+e-\d) against its 2\.4e-2 with one scale, ([\d.]+e-\d) against 9\.1e-3 with both remedies\)")
def _(D, F):
    acc = F["stage09_accuracy"]
    return [acc[("outliers", "fp8_per_tensor")][0], acc[("outliers", "fp8_per_block_hadamard")][0]]


@prose(CH09, r"Our fp16 row is (\d+)× below the paper's 1\.9e-4")
def _(D, F):
    return [1.9e-4 / F["stage09_accuracy"][("outliers", "16-bit (08 tuned)")][0]]


@prose(CH09, r"largest relative error ([\d.]+e-\d) against a tolerance of ([\d.]+e-\d), with (\d+) of (\d+) checked values out of bounds")
def _(D, F):
    b = F["stage09_bias"]
    return [b["max_rel_err"], b["tol"], b["bad"], b["checked"]]


@prose(CH09, r"O = ([\d.]+) where float64 says ([\d.]+)")
def _(D, F):
    return [F["stage09_bias"]["O"], F["stage09_bias"]["expected"]]


@prose(CH09, r"\(O ([\d.]+) where float64 says ([\d.]+) at N = 4096, 12% low at 16384\)")
def _(D, F):
    return [F["stage09_bias"]["O"], F["stage09_bias"]["expected"]]


@prose(CH09, r"every check passes; d = 64, N = 16384 gives ([\d.]+e-\d)")
def _(D, F):
    return [r09(F, "fp8_per_block", 64, 16384).max_rel_err]


@prose(CH09, r"the failing run took ([\d.]+) ms at d = 64, N = 4096, the fixed kernel ([\d.]+) ms in a later run \(in which stage 08 also moved, ([\d.]+) → ([\d.]+) ms\)")
def _(D, F):
    ms = F["stage09_bias"]["ms"]
    return [ms["fp8_per_block"], r09(F, "fp8_per_block", 64, 4096).ms, ms["08_tuned"], r09(F, "08_tuned", 64, 4096).ms]


@prose(CH09, r"the FP8 kernel's largest relative error against float64 ranges from ([\d.]+e-\d) to ([\d.]+e-\d)")
def _(D, F):
    errs = [r.max_rel_err for r in F["stage09_speed"].rows if r.variant.startswith("fp8_")]
    return [min(errs), max(errs)]


def read_ncu_stg09(path):
    """ncu_wide_stg.txt: for each '### variant' section, its metrics (name -> number) and the bytes of a
    global store's sector used ('On average, only X of the 32 bytes')."""
    out, cur = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"### (\S+)", line)
            if m:
                cur = out.setdefault(m.group(1), {})
                continue
            if cur is None:
                continue
            m = re.match(r"\s+(l1tex__\S+|smsp__\S+)\s+(?:\w+\s+)?([\d,]+)\s*$", line)
            if m:
                cur[m.group(1)] = float(m.group(2).replace(",", ""))
            m = re.match(r"\s+Duration\s+us\s+([\d.]+)", line)
            if m:
                cur["duration_us"] = float(m.group(1))
            m = re.search(r"global stores to L1TEX.*only ([\d.]+) of the 32", line)
            if m:
                cur["bytes_used"] = float(m.group(1))
    return out


def read_ncu09(path):
    """ncu_p_smem.txt: for each '== name' section, the SM clock (Hz), the duration (ns), the launch's
    stall samples, the loop's instructions a key block, its stall reasons (%), the samples on the
    P̃·V wait (WARPGROUP.DEPBAR.LE gsb0, 0x0) and the fence's share (% of all samples)."""
    out, cur = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"== (.+)", line)
            if m:
                cur = out.setdefault(m.group(1).strip(), {})
                continue
            if cur is None:
                continue
            num = lambda t: float(t.replace(",", ""))  # noqa: E731
            hz = re.match(r"\s*SM Frequency\s+hz\s+([\d,.]+)", line)
            ns = re.match(r"\s*Duration\s+ns\s+([\d,.]+)", line)
            count = re.match(r"samples (\d+); loop body count \d+ executions, (\d+) instructions", line)
            loop = re.match(r"loop span samples (\d+)", line)
            wait0 = re.match(r"\s*\d+\*?\s+\d+\s+(\d+)\s+WARPGROUP\.DEPBAR\.LE gsb0, 0x0\b", line)
            fence = re.match(r"\s+FENCE\s+\d+\s+([\d.]+)", line)
            if hz:
                cur["hz"] = num(hz.group(1))
            elif ns:
                cur["ns"] = num(ns.group(1))
            elif count:
                cur["samples"], cur["insts"] = int(count.group(1)), int(count.group(2))
            elif loop:
                cur["loop_samples"] = int(loop.group(1))
            elif line.startswith("loop stall reasons:"):
                cur["stalls"] = {k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+)%", line)}
            elif wait0:
                cur["wait0"] = int(wait0.group(1))
            elif fence:
                cur["fence_pct"] = float(fence.group(1))
    return out


def rounds_by_process09(F, key, variant, N, causal, process=None):
    """wide_mask.csv, v_fold_cost_split.csv: the rounds' ms of `variant` in one cell, in the processes
    whose label (less its last two characters, `_a`, `_b`) is `process` (None: all)."""
    return [float(r["ms"]) for r in F[key] if r["variant"] == variant and f" N={N} " in r["shape"]
            and f"causal={int(causal)}" in r["shape"] and (process is None or r["process"][:-2] == process)]


def by_process09(F, key, variant, N, causal, process=None):
    """The median of rounds_by_process09."""
    return statistics.median(rounds_by_process09(F, key, variant, N, causal, process))


def best08_over09(F, key, variant, N, causal):
    """The faster stage 08 kernel (tuned, tuned_lpt) over `variant` in one cell of a run (medians of all its processes)."""
    m = lambda v: by_process09(F, key, v, N, causal)  # noqa: E731
    return min(m("08_tuned"), m("08_tuned_lpt")) / m(variant)


def best08_over_mask09(F):
    """wide_desc.csv: the faster stage 08 kernel over _wide_mask in the four d = 128 cells."""
    return {(N, c): best08_over09(F, "stage09_wide_desc", "fp8_per_tensor_wide_mask", N, c)
            for N in (4096, 16384) for c in (False, True)}


# The four runs with _wide_pfq and stage 08 at causal N = 4096, each on a freshly started H100.
PFQ_RUNS09 = ("stage09_wide_pfq", "stage09_wide_lane_pfq2", "stage09_wide_lane", "stage09_head_group")


# The four runs with _wide_stsm and stage 08 at causal N = 4096, each on a freshly started H100.
STSM_RUNS09 = ("stage09_wide_stsm_first", "stage09_wide_lg2_probe", "stage09_wide_ahead", "stage09_wide_lg2_stsm")


def stsm_runs09(F):
    """Stage 08's faster kernel over _wide_stsm at causal N = 4096, in each of the four runs."""
    return [best08_over09(F, k, "fp8_per_tensor_wide_stsm", 4096, True) for k in STSM_RUNS09]


@prose(H100_RESULTS, r"three of four cells against stage 08 at its best \(([\d.]+)–([\d.]+)× non-causal, ([\d.]+)× causal N = 16384; causal N = 4096 ([\d.]+)× with `_wide_stsm`, against stage 08 with the same LPT tile order, ([\d.]+)–([\d.]+)× in four runs, on the line, and ([\d.]+)–([\d.]+)× in fifteen runs on an H200; each cell's figure from its fastest experiment\)")
def _(D, F):
    r = best08_over_mask09(F)
    runs = stsm_runs09(F)
    # fifteen runs on an H200: the thirteen of the section on the tile's end, and the main job's two (four processes each)
    h200 = [best08_over_stsm_h200(F, k) for k in STSM_RUNS09_H200] + \
        [x for key in ("h200_09_lpt_first", "h200_09_lpt") for x, _ in lpt_09(F, key)]
    return [r[4096, False], r[16384, False], r[16384, True], statistics.median(runs), min(runs), max(runs), min(h200), max(h200)]


# --- chapter 09's runs on an H200 (docs/results/h200/) ---

# The thirteen H200 runs with _wide_stsm and stage 08 at causal N = 4096, in order (p69, p70, p72, p73, p74, p76,
# p77, p78, p79, p80, p81, p84, p85).
STSM_RUNS09_H200 = ("h200_09_sched", "h200_09_probe_dead_pv", "h200_09_probe", "h200_09_split", "h200_09_q2",
                    "h200_09_math_probe", "h200_09_pepi", "h200_09_pepi_e", "h200_09_pepi_parts", "h200_09_math_probe_rebuilt",
                    "h200_09_stg", "h200_09_def_first", "h200_09_def_serialised")


def best08_over_stsm_h200(F, key):
    """Stage 08's faster kernel over _wide_stsm at causal N = 4096 in one H200 run (p73 timed tuned_lpt alone)."""
    m = lambda v: rounds_by_process09(F, key, v, 4096, True)  # noqa: E731
    return min(statistics.median(m(v)) for v in ("08_tuned", "08_tuned_lpt") if m(v)) / \
        statistics.median(m("fp8_per_tensor_wide_stsm"))


def last_rungs_h200_09(F):
    """main_job_p113.csv: the wide rung's and `_wide_lin`'s range over stage 08 at d = 128 (and `_wide_lin`'s over
    stage 08's fastest call), `_wide_lin`'s TFLOP/s at N = 16384 and its % of the ceiling, its extra RMSE (%), `_lin`'s
    range at d = 64."""
    cells = [(N, c) for N in (4096, 16384) for c in (False, True)]
    ratio = lambda v, d, N, c: main_tflops09(F, v, d, N, c) / main_tflops09(F, "08_tuned", d, N, c)  # noqa: E731
    stsm = [ratio("fp8_per_tensor_wide_stsm", 128, N, c) for N, c in cells]
    lin = [ratio("fp8_per_tensor_wide_lin", 128, N, c) for N, c in cells]
    d64 = [ratio("fp8_per_tensor_lin", 64, N, c) for N, c in cells]
    assert min(y for _, y in lpt_09(F)) > 1.5
    main = F["h200_09_main"]
    fastest = [float(cell_rows09(main, "08_tuned", 128, N, c)[0]["ms_min"]) /
               float(cell_rows09(main, "fp8_per_tensor_wide_lin", 128, N, c)[0]["ms"]) for N, c in cells]
    top = main_tflops09(F, "fp8_per_tensor_wide_lin", 128, 16384, False)
    a = F["h200_09_lin_accuracy"]
    return [min(stsm), max(stsm), min(lin), max(lin), min(fastest), max(fastest), top, 100 * top / F["h200_09_ceiling"],
            100 * (a[("normal", "fp8_per_tensor_wide_lin")][0] / a[("normal", "fp8_per_tensor_wide_stsm")][0] - 1),
            min(d64), max(d64)]


def cell_rows09(rows, variant, d, N, causal, process=None):
    """A variant's rows in one (d, N, causal) cell of a CSV with both d (optionally one process's)."""
    return [r for r in rows if r["variant"] == variant and f" d={d} " in r["shape"] and f" N={N} " in r["shape"]
            and f"causal={int(causal)}" in r["shape"] and (process is None or r["process"] == process)]


def main_tflops09(F, variant, d, N, causal):
    """main_job_p113.csv: a variant's TFLOP/s in one cell (one round), or None where it did not run."""
    r = cell_rows09(F["h200_09_main"], variant, d, N, causal)
    return float(r[0]["tflops"]) if r else None


QUANT09_SCHEMES = {"per tensor": "per_tensor", "per block": "per_block", "per tensor + Hadamard": "per_tensor_hadamard",
                   "per block + Hadamard": "per_block_hadamard"}


@prose(CH09, r"its two-byte loads, took ([\d.]+)× as long without the transform \(([\d.]+) against ([\d.]+) ms at d = 128\)")
def _(D, F):
    first = float(cell_rows09(F["h200_09_first"], "quant_per_block", 128, 4096, False)[0]["ms"])
    this = float(cell_rows09(F["h200_09_quant"], "quant_per_block", 128, 4096, False)[0]["ms"])
    return [first / this, first, this]


@prose(H100_RESULTS, r"On an H200, in the main job: `_wide_stsm` \(the wide rung with the exponential unit\) is ([\d.]+)–([\d.]+)× stage 08's last rung in all four d = 128 cells; `_wide_lin`, P̃'s e4m3 bytes from fp16's bit pattern instead of the exponential unit, ([\d.]+)–([\d.]+)× \(([\d.]+)–([\d.]+)× against stage 08's fastest call; ([\d,]+) TFLOP/s at N = 16384, (\d+)% of an e4m3 matrix product on that card\) and over 1\.5× against either of stage 08's kernels, for (\d+)% more RMSE; the same trick, `_lin`, ([\d.]+)–([\d.]+)× at d = 64; in a run of its own on that card, the rewritten quantisation at ([\d.]+)–([\d.]+) TB/s; the last rungs not yet run on an H100\)")
def _(D, F):
    gb = [float(r["gbps"]) / 1000 for r in F["h200_09_occ"] if r["variant"].startswith("quant_") and r["ms"]]
    return last_rungs_h200_09(F) + [min(gb), max(gb)]


def lpt_09(F, key="h200_09_lpt"):
    """lpt_p113.csv (or lpt_p103.csv, key h200_09_lpt_first; stage09.sh's four processes at causal N = 4096, d = 128):
    per process, the faster of stage 08's tuned and tuned_lpt (medians of the process's rounds) over _wide_stsm's and
    over _wide_lin's."""
    rows = F[key]
    med = lambda v, p: statistics.median(float(r["ms"]) for r in rows if r["variant"] == v and r["process"] == p)  # noqa: E731
    out = []
    for p in sorted({r["process"] for r in rows}):
        best08 = min(med("08_tuned", p), med("08_tuned_lpt", p))
        out.append((best08 / med("fp8_per_tensor_wide_stsm", p), best08 / med("fp8_per_tensor_wide_lin", p)))
    return out


def read_ncu_summary09(path):
    """An Nsight Compute summary (ncu_stalls_stsm.txt, ncu_wide_lin.txt), in the file's order of its two launches
    (causal, then not): the highest pipe's share of the elapsed cycles, the issue slots busy, the FMA pipe's
    pct_of_peak where listed, and each launch's stall samples by opcode (% of samples)."""
    out = {"pipe": [], "issue": [], "fma": [], "stalls": []}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.search(r"is the highest-utilized pipeline \(([\d.]+)%\) based on elapsed cycles", line)
            if m:
                out["pipe"].append(float(m.group(1)))
            m = re.match(r"\s+Issue Slots Busy\s+%\s+([\d.]+)", line)
            if m:
                out["issue"].append(float(m.group(1)))
            m = re.match(r"\s+sm__pipe_fma_cycles_active\.avg\.pct_of_peak_sustained_active ([\d.]+)", line)
            if m:
                out["fma"].append(float(m.group(1)))
            if re.match(r"== \S*src_", line):
                out["stalls"].append({})
            m = re.match(r"\s+([A-Z][A-Z0-9_]+)\s+([\d.]+)% of samples", line)
            if m and out["stalls"]:
                out["stalls"][-1][m.group(1)] = float(m.group(2))
    return out


def read_ncu_details09(path):
    """An Nsight Compute details page (ncu_quant_p109_*.txt): each '    Name   Unit   Value' row as name -> value
    (the percentage rows of a name that also has another unit as 'Name %': Memory Throughput)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s{4}(\S(?:.*?\S)?)\s{2,}(\S+)\s+([\d,]+(?:\.\d+)?)\s*$", line)
            if m:
                name, unit, value = m.group(1), m.group(2), float(m.group(3).replace(",", ""))
                out[name + " %" if unit == "%" and name in ("Memory Throughput",) else name] = value
                out.setdefault(name, value)
    return out


def ncu_executed09(path):
    """The executed instructions of one launch: 'Executed Instructions  inst  494,855,497' (details page) or
    'smsp__inst_executed.sum 512699217' (raw metric)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s+Executed Instructions\s+inst\s+([\d,]+)", line) or re.match(r"\s+smsp__inst_executed\.sum ([\d.]+)", line)
            if m:
                return float(m.group(1).replace(",", ""))
    raise ValueError(f"{path}: no executed instructions")


def all_opcodes09(path, reason, section=None):
    """A stall reason's share of all samples ('all opcodes: ... long_sb 13.0%'), in the section whose header names
    `section` (or the first)."""
    on = section is None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if section and line.startswith("== ") and section in line:
                on = True
            m = re.search(rf"\b{reason} ([\d.]+)%", line)
            if on and "all opcodes:" in line and m:
                return float(m.group(1))
    raise ValueError(f"{path}: no {reason}")


def read_psmem_profile09(folder):
    """p101 against p96 (d = 64, N = 4096): the executed instructions of _lin_psmem and _lin, the long-scoreboard
    share of all samples of each, and _lin's executed LDL (the spill's reloads)."""
    p96 = os.path.join(folder, "lin_default_p96.txt")
    with open(p96, encoding="utf-8") as f:
        m = re.search(r"== src_fp8_per_tensor_lin\.csv\.gz.*?\n\s+LDL\s+[\d.]+% of samples \(([\d.e+]+) executed\)", f.read(), re.S)
    psmem = os.path.join(folder, "ncu_d64_lin_psmem.txt")
    return {"exec_psmem": ncu_executed09(psmem), "exec_lin": ncu_executed09(os.path.join(folder, "ncu_d64_lin_details.txt")),
            "long_sb_psmem": all_opcodes09(psmem, "long_sb"), "long_sb_lin": all_opcodes09(p96, "long_sb", "src_fp8_per_tensor_lin"),
            "ldl_lin": float(m.group(1))}


def read_ptxas_spills(path):
    """{template arguments: spill store bytes} from ptxas -v lines (lin_default_ptxas.txt)."""
    out, cur = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.search(r"flash_v3_fp8<([^>]*)>", line)
            if m:
                cur = m.group(1)
            m = re.search(r"(\d+) bytes spill stores", line)
            if m and cur:
                out[cur] = int(m.group(1))
    return out


# pepi_probe_e.csv and pepi_parts.csv: which processes ran which binary (the pepi variant renamed after the run).
PEPI_PARTS09 = {"all of the above": [("h200_09_pepi_e", "fp8_per_tensor_wide_pepi"), ("h200_09_pepi_parts", "fp8_per_tensor_wide_pepi")],
                "v̄ loaded once": [("h200_09_pepi_parts", "wide_pepi_vbar_once")],
                "without the TMA store": [("h200_09_pepi_parts", "probe_pepi_vbar_once_no_store")],
                "gives each staging back": [("h200_09_pepi_e", "probe_pepi_empty_epilogue_warp")]}


@prose(README, r"ready \(on the H100: FA-3's FP8 accuracy reproduced, the Hadamard transform ([\d.]+)× less error on outlier inputs; speed ([\d.]+)–([\d.]+)× stage 08 at d = 128 and ([\d.]+)–([\d.]+)× at d = 64, against a goal of 1\.5×")
def _(D, F):
    acc = F["stage09_accuracy"]
    return [acc[("outliers", "fp8_per_tensor")][0] / acc[("outliers", "fp8_per_block_hadamard")][0],
            min(ratios09(F, 128)), max(ratios09(F, 128)), min(ratios09(F, 64)), max(ratios09(F, 64))]

# --- running the checks --------------------------------------------------------------------------

def run(root):
    data = Data(os.path.join(root, "docs/results/h100/results.csv"))
    files = {
        "standard_breakdown": read_simple_csv(os.path.join(root, "docs/results/h100/standard_breakdown.csv")),
        "ncu_06_ladder": read_simple_csv(os.path.join(root, "docs/results/h100/ncu_06_ladder.csv")),
        "ragged": read_simple_csv(os.path.join(root, "docs/results/h100/ragged.csv")),
        "rung4_steps": read_simple_csv(os.path.join(root, "docs/results/h100/stage06/rung4_steps_1round.csv")),
        "stage10_run1": read_simple_csv(os.path.join(root, STAGE10, "scaling_8k_32k.csv")),
        "stage10_run2": read_simple_csv(os.path.join(root, STAGE10, "scaling_16k_64k_peer.csv")),
        "stage10_run3": read_simple_csv(os.path.join(root, STAGE10, "flushed", "scaling_flushed.csv")),
        "stage10_first": read_simple_csv(os.path.join(root, STAGE10, "first_run_32k.csv")),
        "stage10_fb": read_simple_csv(os.path.join(root, STAGE10, "forward_backward.csv")),
        "stage10_timelines": read_timelines(root),
        "stage09_speed": Data(os.path.join(root, STAGE09, "first_speed.csv")),
        "stage09_now": Data(os.path.join(root, "docs/results/h100/results.csv")),  # the main job's stage 09 rows
        "stage09_prev": Data(os.path.join(root, STAGE09, "main_job_row_sum.csv")),  # the main job before it
        "stage09_psmem": read_simple_csv(os.path.join(root, STAGE09, "p_smem.csv")),
        "stage09_otc": read_simple_csv(os.path.join(root, STAGE09, "o_on_tensor_cores.csv")),
        "stage09_otc_centred": read_simple_csv(os.path.join(root, STAGE09, "o_on_tensor_cores_centred.csv")),
        "stage09_wide": read_simple_csv(os.path.join(root, STAGE09, "wide_rung.csv")),
        "stage09_wide_opt": read_simple_csv(os.path.join(root, STAGE09, "wide_opt.csv")),
        "stage09_wide_opt_poly": read_simple_csv(os.path.join(root, STAGE09, "wide_opt_poly.csv")),
        "stage09_wide_turns": read_simple_csv(os.path.join(root, STAGE09, "wide_turns.csv")),
        "stage09_wide_ovl": read_simple_csv(os.path.join(root, STAGE09, "wide_ovl.csv")),
        "stage09_wide_epi_ovl_first": read_simple_csv(os.path.join(root, STAGE09, "wide_epi_ovl_first.csv")),
        "stage09_wide_ovl_lpt": read_simple_csv(os.path.join(root, STAGE09, "wide_ovl_lpt.csv")),
        "stage09_half": read_simple_csv(os.path.join(root, STAGE09, "half_diagonal.csv")),
        "stage09_half_branchy": read_simple_csv(os.path.join(root, STAGE09, "half_diagonal_branchy.csv")),
        "stage09_wide_mask": read_simple_csv(os.path.join(root, STAGE09, "wide_mask.csv")),
        "stage09_v_fold": read_simple_csv(os.path.join(root, STAGE09, "v_fold_cost_split.csv")),
        "stage09_wide_desc": read_simple_csv(os.path.join(root, STAGE09, "wide_desc.csv")),
        "stage09_lpt08": read_simple_csv(os.path.join(root, STAGE09, "lpt_stage08.csv")),
        "stage09_wide_pf": read_simple_csv(os.path.join(root, STAGE09, "wide_pf.csv")),
        "stage09_wide_dec": read_simple_csv(os.path.join(root, STAGE09, "wide_dec.csv")),
        "stage09_wide_pfq": read_simple_csv(os.path.join(root, STAGE09, "wide_pfq.csv")),
        "stage09_wide_lane_pfq2": read_simple_csv(os.path.join(root, STAGE09, "wide_lane_pfq2.csv")),
        "stage09_wide_lane": read_simple_csv(os.path.join(root, STAGE09, "wide_lane.csv")),
        "stage09_head_group": read_simple_csv(os.path.join(root, STAGE09, "head_group.csv")),
        "stage09_narrow_probe": read_simple_csv(os.path.join(root, STAGE09, "narrow_probe.csv")),
        "stage09_wide_stsm_first": read_simple_csv(os.path.join(root, STAGE09, "wide_stsm_first.csv")),
        "stage09_wide_lg2_probe": read_simple_csv(os.path.join(root, STAGE09, "wide_lg2_probe.csv")),
        "stage09_wide_ahead": read_simple_csv(os.path.join(root, STAGE09, "wide_ahead.csv")),
        "stage09_wide_lg2_stsm": read_simple_csv(os.path.join(root, STAGE09, "wide_lg2_stsm.csv")),
        "h200_09_sched": read_simple_csv(os.path.join(root, STAGE09_H200, "wide_sched.csv")),
        "h200_09_probe_dead_pv": read_simple_csv(os.path.join(root, STAGE09_H200, "no_epilogue_probe_dead_pv.csv")),
        "h200_09_probe": read_simple_csv(os.path.join(root, STAGE09_H200, "no_epilogue_probe.csv")),
        "h200_09_split": read_simple_csv(os.path.join(root, STAGE09_H200, "epilogue_split_probe.csv")),
        "h200_09_q2": read_simple_csv(os.path.join(root, STAGE09_H200, "wide_q2.csv")),
        "h200_09_math_probe": read_simple_csv(os.path.join(root, STAGE09_H200, "epilogue_math_probe.csv")),
        "h200_09_math_probe_rebuilt": read_simple_csv(os.path.join(root, STAGE09_H200, "epilogue_math_probe_rebuilt.csv")),
        "h200_09_pepi": read_simple_csv(os.path.join(root, STAGE09_H200, "wide_pepi.csv")),
        "h200_09_stg": read_simple_csv(os.path.join(root, STAGE09_H200, "wide_stg.csv")),
        "h200_09_def_first": read_simple_csv(os.path.join(root, STAGE09_H200, "wide_def_first.csv")),
        "h200_09_def_serialised": read_simple_csv(os.path.join(root, STAGE09_H200, "wide_def_serialised.csv")),
        "h200_09_def": read_simple_csv(os.path.join(root, STAGE09_H200, "wide_def.csv")),
        "h200_09_def2": read_simple_csv(os.path.join(root, STAGE09_H200, "wide_def2.csv")),
        "h200_09_lin": read_runs09([os.path.join(root, STAGE09_H200, f) for f in ("wide_lin.csv", "wide_lin_2.csv")]),
        "h200_09_lin_accuracy": read_accuracy09(os.path.join(root, STAGE09_H200, "accuracy_lin.txt")),
        "h200_09_lin_accuracy_2": read_accuracy09(os.path.join(root, STAGE09_H200, "accuracy_lin_2.txt")),
        "h200_09_lin_sass": read_sass_counts09(os.path.join(root, STAGE09_H200, "wide_lin_sass.txt")),
        "h200_09_lin_default": read_simple_csv(os.path.join(root, STAGE09_H200, "lin_default.csv")),
        "h200_09_first": read_simple_csv(os.path.join(root, STAGE09_H200, "main_job_p103.csv")),
        "h200_09_main": read_simple_csv(os.path.join(root, STAGE09_H200, "main_job_p113.csv")),
        "h200_09_quant": read_simple_csv(os.path.join(root, STAGE09_H200, "quant_p105.csv")),
        "h200_09_quads": read_simple_csv(os.path.join(root, STAGE09_H200, "quant_p108.csv")),
        "h200_09_quads_ncu": {k: read_ncu_details09(os.path.join(root, STAGE09_H200, f"ncu_quant_p109_{k}.txt"))
                              for k in ("d128_quant_per_block", "d128_quant_per_block_hadamard",
                                        "d64_quant_per_block_hadamard")},
        "h200_09_occ": read_simple_csv(os.path.join(root, STAGE09_H200, "quant_p112.csv")),
        "h200_09_occ_ncu": read_ncu_details09(os.path.join(root, STAGE09_H200, "ncu_quant_p112_d128_quant_per_block_hadamard.txt")),
        "h200_09_lpt_first": read_simple_csv(os.path.join(root, STAGE09_H200, "lpt_p103.csv")),
        "h200_09_lpt": read_simple_csv(os.path.join(root, STAGE09_H200, "lpt_p113.csv")),
        "h200_09_ceiling": read_ceiling09(os.path.join(root, STAGE09_H200, "stage09sh_p111_p116.txt")),
        "h200_09_ceiling_first": read_ceiling09(os.path.join(root, STAGE09_H200, "stage09sh_p102_p104.txt")),
        "h200_09_lin_psmem": read_simple_csv(os.path.join(root, STAGE09_H200, "lin_psmem.csv")),
        "h200_09_lin_p96": read_lin_default_p96(os.path.join(root, STAGE09_H200, "lin_default_p96.txt")),
        "h200_09_psmem_profile": read_psmem_profile09(os.path.join(root, STAGE09_H200)),
        "h200_09_exec_default": ncu_executed09(os.path.join(root, STAGE09_H200, "ncu_d64_default_details.txt")),
        "h200_09_ncu_psmem": read_ncu_summary09(os.path.join(root, STAGE09_H200, "ncu_d64_lin_psmem.txt")),
        "h200_09_ncu_lin": read_ncu_summary09(os.path.join(root, STAGE09_H200, "ncu_wide_lin.txt")),
        "h200_09_ncu_stsm": read_ncu_summary09(os.path.join(root, STAGE09_H200, "ncu_stalls_stsm.txt")),
        "h200_09_lin_ptxas": read_ptxas_spills(os.path.join(root, STAGE09_H200, "lin_default_ptxas.txt")),
        "h200_09_ptxas_p111": read_ptxas_spills(os.path.join(root, STAGE09_H200, "lin_default_ptxas_p111.txt")),
        "h200_09_lin_def_acc128": read_accuracy09(os.path.join(root, STAGE09_H200, "lin_default_accuracy_d128.txt")),
        "h200_09_lin_def_acc64": read_accuracy09(os.path.join(root, STAGE09_H200, "lin_default_accuracy_d64.txt")),
        "h200_09_mufu": read_mufu_bench09(os.path.join(root, STAGE09_H200, "mufu_ex2_bench.txt")),
        "h200_09_stg_ncu": read_ncu_stg09(os.path.join(root, STAGE09_H200, "ncu_wide_stg.txt")),
        "h200_09_pepi_e": read_simple_csv(os.path.join(root, STAGE09_H200, "pepi_probe_e.csv")),
        "h200_09_pepi_parts": read_simple_csv(os.path.join(root, STAGE09_H200, "pepi_parts.csv")),
        "stage09_micro": read_simple_csv(os.path.join(root, STAGE09, "micro_and_barrier_order.csv")),
        "stage09_ncu": read_ncu09(os.path.join(root, STAGE09, "ncu_p_smem.txt")),
        "stage09_poly": read_simple_csv(os.path.join(root, STAGE09, "exp2_poly_6runs.csv")),
        "stage09_accuracy": read_accuracy09(os.path.join(root, STAGE09, "accuracy_n4096_d128.txt")),
        "stage09_bias": read_bias09(os.path.join(root, STAGE09, "bias_before_promote_d64.txt")),
    }
    failures, cells = [], 0
    by_file = {}
    for name, (path, _) in SPECS.items():
        by_file.setdefault(path, []).append(name)
    docs = sorted({p for p, _ in SPECS.values()} | {"README.md"} |
                  {os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md")})
    seen = set()
    for path in docs:
        full = os.path.join(root, path)
        if not os.path.exists(full):
            failures.append(f"{path}: missing")
            continue
        try:
            tables = tables_after_markers(full)
        except ValueError as e:
            failures.append(str(e))
            continue
        for name, (header, rows, line) in tables.items():
            seen.add(name)
            if name not in SPECS:
                failures.append(f"{path}:{line}: marker {name!r} names no spec in check_numbers.py")
                continue
            spec_path, fn = SPECS[name]
            if spec_path != path:
                failures.append(f"{path}:{line}: marker {name!r} belongs to {spec_path}")
                continue
            for cells_ in rows:
                row = TableRow(header, cells_)
                try:
                    expected = fn(row, data, files)
                except (LookupError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
                    failures.append(f"{path}:{line} [{name}] row {cells_[:3]}: {type(e).__name__}: {e}")
                    continue
                for column, want in expected.items():
                    if column not in row:
                        failures.append(f"{path}:{line} [{name}]: no column {column!r} (header: {header})")
                        continue
                    cells += 1
                    problem = compare_cell(row[column], want)
                    if problem:
                        failures.append(f"{path}:{line} [{name}] row {' | '.join(cells_[:3])} / {column}: {problem}")
    for name, (path, _) in SPECS.items():
        if name not in seen:
            failures.append(f"{path}: no table marked <!-- numbers: {name} -->")
    for path, pattern, fn in PROSE:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = re.sub(r"\s+", " ", f.read())  # a sentence may be wrapped anywhere
        found = list(re.finditer(pattern, text))
        if len(found) != 1:
            failures.append(f"{path}: pattern {pattern!r} matched {len(found)} times (expected once)")
            continue
        try:
            want = fn(data, files)
        except (LookupError, ValueError, KeyError) as e:
            failures.append(f"{path}: {pattern!r}: {type(e).__name__}: {e}")
            continue
        for k, w in enumerate(want):
            cells += 1
            problem = compare_cell(found[0].group(k + 1), w)
            if problem:
                failures.append(f"{path}: {pattern!r}, number {k + 1}: {problem}")
    return failures, cells, len(seen), len(PROSE)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = p.parse_args()
    failures, cells, tables, texts = run(args.root)
    for f in failures:
        print("MISMATCH " + f)
    if failures:
        print(f"check_numbers: {len(failures)} problem(s)")
        return 1
    print(f"check_numbers: {cells} numbers in {tables} tables and {texts} sentences match the data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
