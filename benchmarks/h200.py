"""The H200 check: GEMMs, operand alignment and whole models on a GPU this project measured.

    python benchmarks/h200.py [--data ../shared/data] [--h200 benchmarks/data/h200]
        [--cache DIR]

The shipped weights are fitted on every measured GPU, the H200 included. Beside them, every
section shows the same predictor refitted without the H200's chip (GH100), the way an unmeasured
GPU is predicted (``benchmarks/e2e.py``'s held-out fit, which ``--cache`` shares), and the pure
roofline. Sections:

1. GEMM MAPE per (source, dtype) on ``h200/gemm``, every source together, and by latency.
2. Operand alignment: median TFLOP/s of Linear and matmul GEMMs with m ≥ 2048, by the narrower
   of A's, B's and C's alignment in bytes, measured and predicted.
3. Padding: the time of an n or k one element off a multiple of 64, over the aligned time.
4. Non-GEMM ops: ``h200/vec`` against the op costs, shipped and fitted without the H200.
5. Whole models: ``h200/e2e/labels.csv`` (rebuilt as ``benchmarks/e2e.py`` rebuilds NeuSight's
   rows) against ``estimate``.

Writes ``benchmarks/results/h200.md``.
"""

from __future__ import annotations

import argparse
import csv
import logging
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from accuracy import roofline_ms
from e2e import MODE, HeldOutByChip, build

from torch_gemm_cost.api import compare
from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.measured.gemm import MeasuredGemms, load_gemms
from torch_gemm_cost.predict import shipped_hybrid
from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor
from torch_gemm_cost.predict.gemm.roofline import impossible_rows
from torch_gemm_cost.train.gemm import score_groups

GPU = "h200_sxm_141gb"
CHIP = "GH100"
SHIPPED = "H200 in the fit"
HELD = "H200 held out"
RESULTS = ROOT / "benchmarks" / "results" / "h200.md"
# fp32 runs on CUDA cores, whose kernels load the same way at any alignment (section 2), and
# fp8 refuses dims off a multiple of 16: the padding table shows the matrix dtypes that slow down
PADDED_DTYPES = ("bfloat16", "float16", "tf32")


def gemm_section(h200: MeasuredGemms, preds: dict[str, torch.Tensor]) -> str:
    scores = {name: {(s.source, s.dtype): s for s in score_groups(h200, p)}
              for name, p in preds.items()}
    rows = []
    for key, s in sorted(scores[SHIPPED].items()):
        rows.append([key[0], key[1], s.rows] + [100 * scores[n][key].mape for n in preds]
                    + [100 * s.median_ape, 100 * s.within_25])
    meas = h200.latency_ms
    total = ["all", "", len(h200)] + [
        100 * float(((p - meas).abs() / meas).mean()) for p in preds.values()] + ["", ""]
    head = ["source", "dtype", "rows"] + [f"{n} MAPE%" for n in preds] + [
        "in the fit: median APE%", "in the fit: within 25%"]
    bins = []
    for lo, hi in ((0.0, 0.02), (0.02, 0.1), (0.1, 1.0), (1.0, float("inf"))):
        sel = (meas >= lo) & (meas < hi)
        bins.append([f"{lo:g}–{hi:g} ms", int(sel.sum())] + [
            100 * float(((p[sel] - meas[sel]).abs() / meas[sel]).mean()) for p in preds.values()
        ] + [float((preds[n][sel] / meas[sel]).median()) for n in (SHIPPED, HELD)])
    bin_head = ["measured", "rows"] + [f"{n} MAPE%" for n in preds] + [
        f"{n}: median pred/meas" for n in (SHIPPED, HELD)]
    return (tabulate(rows + [total], headers=head, tablefmt="github", floatfmt=".1f")
            + "\n\nBy measured latency:\n\n"
            + tabulate(bins, headers=bin_head, tablefmt="github", floatfmt=".2f"))


def alignment_section(h200: MeasuredGemms, preds: dict[str, torch.Tensor]) -> str:
    g = h200.gemms
    groups: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    names = g.dtype_names()
    narrowest = torch.minimum(torch.minimum(g.a_align_bytes, g.b_align_bytes), g.c_align_bytes)
    for i in range(len(h200)):
        if h200.source[i] != "tgc-align" or g.m[i] < 2048 or g.bias[i]:
            continue
        op = "linear" if g.b_transposed[i] else "matmul"
        groups[(names[i], op, int(narrowest[i]))].append(i)
    rows = []
    for (dtype, op, cls), idx in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                          -kv[0][2])):
        ix = torch.tensor(idx)
        rows.append([dtype, op, cls, len(idx)] + [
            statistics.median((g.flops[ix] / t[ix] / 1e9).tolist())
            for t in (h200.latency_ms, *preds.values())])
    head = ["dtype", "op", "alignment B", "rows", "measured TFLOP/s"] + [
        f"{n} TFLOP/s" for n in preds]
    return tabulate(rows, headers=head, tablefmt="github", floatfmt=".0f")


def padding_section(h200: MeasuredGemms, preds: dict[str, torch.Tensor]) -> str:
    g = h200.gemms
    names = g.dtype_names()
    index = {}
    for i in range(len(h200)):
        if h200.source[i] == "tgc-align" and g.b_transposed[i] and not g.bias[i]:
            index[(names[i], int(g.m[i]), int(g.n[i]), int(g.k[i]))] = i
    rows = []
    for (dtype, m, n, k), i in sorted(index.items()):
        if m not in (128, 2048) or n % 64 or k % 64 or dtype not in PADDED_DTYPES:
            continue
        for dim, off in (("n", (n - 1, k)), ("k", (n, k - 1))):
            j = index.get((dtype, m, *off))
            if j is None:
                continue
            rows.append([dtype, m, n, k, f"{dim} - 1"]
                        + [float(t[j] / t[i]) for t in (h200.latency_ms, *preds.values())])
    head = ["dtype", "m", "n", "k", "off", "measured"] + list(preds)
    return tabulate(rows, headers=head, tablefmt="github", floatfmt=".2f")


def vec_section(path: Path, held_costs: Any) -> str:
    """DATA.md's vec ops on the H200 against the op costs, shipped (H200 in the fit) and fitted
    without the H200."""
    from torch_gemm_cost.predict import ops as memory
    from torch_gemm_cost.train.ops import _read_vec, _score

    rows = _read_vec(path)
    h200 = get_device(GPU)
    body = []
    for cls in sorted({r.op_class for r in rows}):
        i = memory.OP_CLASSES.index(cls)
        of_class = [r for r in rows if r.op_class == cls]
        line: list[Any] = [cls, len(of_class)]
        for costs in (memory.load_op_costs(), held_costs):
            eta = costs.eta_on(h200)[i]  # Hopper's own where a Hopper chip was in the fit
            sc = _score(of_class, eta, costs.floor_ms[i])
            line += [sc["mape_pct"], sc["mape_ge_0.1ms_pct"], eta]
        body.append(line)
    head = ["op class", "rows"]
    for name in (SHIPPED, HELD):
        head += [f"{name}: MAPE%", f"{name}: MAPE% (≥ 0.1 ms)", f"{name}: η"]
    return tabulate(body, headers=head, tablefmt="github", floatfmt=".3g")


def e2e_section(data_dir: Path, labels: Path, predictors: dict[str, tuple[Any, Any]]) -> str:
    """Whole models; ``predictors`` maps a name to (GEMM predictor, op cost model or None for
    the shipped one)."""
    from torch_gemm_cost.predict.ops import OpBatch

    with open(labels, newline="") as f:
        rows = list(csv.DictReader(f))
    body = []
    errs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        mode = MODE[r["mode"]]
        net, args, kwargs = build(data_dir, r["model"], int(r["batch"]), int(r["seq_len"]),
                                  r["mode"])
        meas = float(r["measured_total_ms"])
        line = [r["model"], r["mode"], r["batch"], r["seq_len"], meas]
        for name, (pred, costs) in predictors.items():
            rep = compare(net, args, kwargs, devices=[GPU], mode=mode, predictor=pred)[0]
            other = rep.other_ms if costs is None else sum(
                t or 0.0 for t in costs.predict(OpBatch(tuple(o.op for o in rep.others)),
                                                rep.device).times_or_none())
            total = rep.gemm_ms + other
            err = 100 * (total / meas - 1)
            errs[(name, r["mode"])].append(err)
            line += [total, err]
        body.append(line)
    head = ["model", "mode", "batch", "seq", "measured ms"]
    for name in predictors:
        head += [f"{name} ms", f"{name} err%"]
    summary = [[name, mode, len(v), statistics.fmean(abs(e) for e in v), statistics.fmean(v)]
               for (name, mode), v in sorted(errs.items())]
    return (tabulate(summary, headers=["predictor", "mode", "rows", "MAPE%",
                                       "mean signed err%"],
                     tablefmt="github", floatfmt=".1f") + "\n\n"
            + tabulate(body, headers=head, tablefmt="github", floatfmt=".1f"))


def decode_section(h200: MeasuredGemms, shipped: HybridPredictor, event_ms: torch.Tensor) -> str:
    """Decode-size GEMMs: the launch floor fitted on NeuSight's event-timing hosts against the
    kernel-time floor ``estimate()`` uses, both over the same event-timed rows."""
    g = h200.gemms
    names = g.dtype_names()
    kernel_ms = shipped.predict(g, get_device(GPU)).time_ms
    meas = h200.latency_ms
    aligned = (g.a_align_bytes >= 16) & (g.b_align_bytes >= 16)
    rows = []
    for dtype in ("bfloat16", "float16", "tf32", "float8_e4m3fn", "float32"):
        sel = torch.tensor([n == dtype and s == "tgc-align" for n, s in zip(names, h200.source)])
        sel &= aligned & (g.m < 64) & (meas > 0.02)
        if not sel.any():
            continue
        rows.append([dtype, int(sel.sum()), float(meas[sel].median()),
                     float((event_ms[sel] / meas[sel]).median()),
                     float((kernel_ms[sel] / meas[sel]).median())])
    head = ["dtype", "rows", "measured median ms", "event floor pred/meas",
            "kernel floor pred/meas"]
    return tabulate(rows, headers=head, tablefmt="github", floatfmt=".3f")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / ".." / "shared" / "data")
    ap.add_argument("--h200", type=Path, default=ROOT / "benchmarks" / "data" / "h200")
    ap.add_argument("--cache", type=Path, default=None,
                    help="folder of benchmarks/e2e.py --held-out fits, reused when present")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    start = time.perf_counter()
    h200 = load_gemms(args.h200)
    h200 = h200.select(~impossible_rows(h200))
    shipped = shipped_hybrid()
    if GPU not in shipped.metadata_.get("trained_gpus", []):
        raise SystemExit(f"the shipped weights were not fitted on {GPU}; retrain them "
                         "(torch-gemm-cost train) before this check")
    held = HeldOutByChip(args.data, cache=args.cache)
    held_gemm = held._gemm_model(CHIP)
    preds = {SHIPPED: shipped.predict_measured(h200), HELD: held_gemm.predict_measured(h200),
             "roofline": roofline_ms(h200)}
    e2e = e2e_section(args.data, args.h200 / "e2e" / "labels.csv",
                      {SHIPPED: (shipped, None), HELD: (held_gemm, held.op_costs(get_device(GPU)))})
    text = (
        "# The H200 check\n\n"
        f"Produced by `python benchmarks/h200.py` in {time.perf_counter() - start:.0f} s: "
        f"{len(h200)} GEMMs and whole-model latencies measured on one H200 "
        "(`benchmarks/data/README.md`). *H200 in the fit*: the shipped weights, fitted on every "
        "measured GPU, the H200's own rows included. *H200 held out*: the same predictor and op "
        "costs fitted without any GH100 board, the way a GPU nobody measured is predicted. "
        "*roofline*: no fitted parameter, no launch overhead. GEMM latencies are CUDA-event "
        "times; GEMMs under about 0.02 ms measure the host's dispatch as much as the GPU "
        "(`benchmarks/data/README.md`), and held out no other source's hosts tell the H200 "
        "host's dispatch time.\n\n"
        "## GEMMs\n\n" + gemm_section(h200, preds) + "\n\n"
        "## Operand alignment (Linear and matmul, m ≥ 2048)\n\n"
        + alignment_section(h200, preds) + "\n\n"
        "## Padding: an n or k one element off a multiple of 64, time over the aligned time\n\n"
        + padding_section(h200, preds) + "\n\n"
        "## Decode-size GEMMs (m < 64, A and B aligned, over 0.02 ms), median over rows\n\n"
        "Event-timed at a few hundredths of a millisecond, these rows hold the host's dispatch "
        "(5–8 µs here). `estimate()` prices GPU time with the kernel floor.\n\n"
        + decode_section(h200, shipped, preds[SHIPPED]) + "\n\n"
        "## Non-GEMM ops (float32; bytes / (η·DRAM bandwidth) with a floor, per op class)\n\n"
        + vec_section(args.h200 / "vec" / "tgc-vec.csv.gz", held.op_costs(get_device(GPU)))
        + "\n\n"
        "## Whole models (float32, eager attention; NeuSight's label rows rebuilt on the H200)"
        "\n\n" + e2e + "\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
