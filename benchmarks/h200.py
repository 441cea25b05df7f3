"""The H200 check: GEMMs, operand alignment and whole models on a GPU this project measured.

    python benchmarks/h200.py [--data ../shared/data] [--h200 benchmarks/data/h200]

The shipped hybrid never saw an H200 latency: its weights are fitted on ``../shared/data``
alone, and only the misaligned-load cost is fitted afterwards, to the H200's ratios of
misaligned over aligned time (``train --alignment-data``). So the H200's level is predicted as a
new GPU's would be. Beside it: the same weights with that cost at its prior (no H200 data at
all) and the pure roofline. Sections:

1. GEMM MAPE per (source, dtype) on ``h200/gemm``.
2. Operand alignment: median TFLOP/s of Linear and matmul GEMMs with m ≥ 2048, by the narrower
   of A's, B's and C's alignment in bytes, measured and predicted.
3. Padding: the time of an n or k one element off a multiple of 64, over the aligned time.
4. Non-GEMM ops: ``h200/vec`` against the shipped op costs.
5. Whole models: ``h200/e2e/labels.csv`` (rebuilt as ``benchmarks/e2e.py`` rebuilds NeuSight's
   rows) against ``estimate``.

Writes ``benchmarks/results/h200.md``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
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
from e2e import MODE, build

from torch_gemm_cost.api import compare
from torch_gemm_cost.devices import get_device
from torch_gemm_cost.gemms.measured import MeasuredGemms, impossible_rows, load_gemms
from torch_gemm_cost.predict import default_predictor
from torch_gemm_cost.predict.hybrid import HybridPredictor
from torch_gemm_cost.train.gemm import score_groups

GPU = "h200_sxm_141gb"
RESULTS = ROOT / "benchmarks" / "results" / "h200.md"
# fp32 runs on CUDA cores, whose kernels load the same way at any alignment (section 2), and
# fp8 refuses dims off a multiple of 16: the padding table shows the matrix dtypes that slow down
PADDED_DTYPES = ("bfloat16", "float16", "tf32")


def gemm_section(h200: MeasuredGemms, preds: dict[str, torch.Tensor]) -> str:
    scores = {name: {(s.source, s.dtype): s for s in score_groups(h200, p)}
              for name, p in preds.items()}
    rows = []
    for key, s in sorted(scores["shipped"].items()):
        rows.append([key[0], key[1], s.rows] + [100 * scores[n][key].mape for n in preds]
                    + [100 * s.median_ape, 100 * s.within_25])
    meas = h200.latency_ms
    total = ["all", "", len(h200)] + [
        100 * float(((p - meas).abs() / meas).mean()) for p in preds.values()] + ["", ""]
    head = ["source", "dtype", "rows"] + [f"{n} MAPE%" for n in preds] + [
        "shipped median APE%", "shipped within 25%"]
    bins = []
    for lo, hi in ((0.0, 0.02), (0.02, 0.1), (0.1, 1.0), (1.0, float("inf"))):
        sel = (meas >= lo) & (meas < hi)
        bins.append([f"{lo:g}–{hi:g} ms", int(sel.sum())] + [
            100 * float(((p[sel] - meas[sel]).abs() / meas[sel]).mean()) for p in preds.values()
        ] + [float((preds["shipped"][sel] / meas[sel]).median())])
    bin_head = ["measured", "rows"] + [f"{n} MAPE%" for n in preds] + ["shipped median pred/meas"]
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


def vec_section(path: Path) -> str:
    """DATA.md's vec ops on the H200 against the shipped op costs (fitted on NeuSight's GPUs)."""
    from torch_gemm_cost.devices import get_device
    from torch_gemm_cost.predict import ops as memory
    from torch_gemm_cost.train.ops import VEC_OPS, VecRow, _score

    bw = get_device(GPU).dram_bw_bytes_per_s
    with gzip.open(path, "rt", newline="") as f:
        rows = [VecRow(GPU, r["source"], r["op"], VEC_OPS[r["op"]][0], int(r["rows"]),
                       int(r["cols"]), float(VEC_OPS[r["op"]][1] * int(r["rows"]) * int(r["cols"])
                                         * 4), bw, float(r["latency_ms"]))
                for r in csv.DictReader(f)]
    costs = memory.load_op_costs()
    body = []
    for cls in sorted({r.op_class for r in rows}):
        i = memory.OP_CLASSES.index(cls)
        eta, floor = costs.eta[i], costs.floor_ms[i]
        sc = _score([r for r in rows if r.op_class == cls], eta, floor)
        body.append([cls, sc["n"], sc["mape_pct"], sc["median_ape_pct"],
                     sc["mape_ge_0.1ms_pct"], eta, floor])
    return tabulate(body, headers=["op class", "rows", "MAPE%", "median APE%",
                                   "MAPE% (≥ 0.1 ms)", "η (shipped)", "floor ms (shipped)"],
                    tablefmt="github", floatfmt=".3g")


def e2e_section(data_dir: Path, labels: Path, predictors: dict[str, Any]) -> str:
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
        for name, pred in predictors.items():
            rep = compare(net, args, kwargs, devices=[GPU], mode=mode, predictor=pred)[0]
            err = 100 * (rep.total_ms / meas - 1)
            errs[(name, r["mode"])].append(abs(err))
            line += [rep.total_ms, err]
        body.append(line)
    head = ["model", "mode", "batch", "seq", "measured ms"]
    for name in predictors:
        head += [f"{name} ms", f"{name} err%"]
    summary = [[name, mode, len(v), statistics.fmean(v)] for (name, mode), v in
               sorted(errs.items())]
    return (tabulate(summary, headers=["GEMM predictor", "mode", "rows", "MAPE%"],
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
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    start = time.perf_counter()
    h200 = load_gemms(args.h200)
    h200 = h200.select(~impossible_rows(h200))
    shipped = default_predictor()
    fitted = shipped.metadata_.get("alignment_fit", {})
    if GPU in shipped.metadata_.get("trained_gpus", [GPU]):
        raise SystemExit(f"the shipped weights were fitted on {GPU}'s latencies; this check "
                         "needs weights that never saw them")
    prior = HybridPredictor.from_dict(shipped.to_dict())
    prior.params_["misaligned_load_cycles"] = prior._init_params()["misaligned_load_cycles"]
    preds = {"shipped": shipped.predict_measured(h200),
             "prior load cost": prior.predict_measured(h200),
             "roofline": roofline_ms(h200)}
    e2e = e2e_section(args.data, args.h200 / "e2e" / "labels.csv", {"shipped": shipped})
    text = (
        "# The H200 check\n\n"
        f"Produced by `python benchmarks/h200.py` in {time.perf_counter() - start:.0f} s: "
        f"{len(h200)} GEMMs and whole-model latencies measured on one H200 "
        "(`benchmarks/data/README.md`). *shipped*: the packaged weights, fitted on "
        "`../shared/data` alone (no H200 latency), then their misaligned-load cost on the H200's "
        f"misaligned/aligned ratios ({fitted.get('pairs', 0)} pairs, "
        f"{fitted.get('cycles_per_warp_load', float('nan')):.1f} cycles a warp load). "
        "*prior load cost*: the same weights with that cost at its prior, 4 cycles (no H200 "
        "data at all). *roofline*: no fitted parameter, no launch overhead. GEMM latencies are "
        "CUDA-event times; GEMMs under about 0.02 ms measure the host's dispatch as much as the "
        "GPU (`benchmarks/data/README.md`).\n\n"
        "## GEMMs\n\n" + gemm_section(h200, preds) + "\n\n"
        "## Operand alignment (Linear and matmul, m ≥ 2048)\n\n"
        + alignment_section(h200, preds) + "\n\n"
        "## Padding: an n or k one element off a multiple of 64, time over the aligned time\n\n"
        + padding_section(h200, preds) + "\n\n"
        "## Decode-size GEMMs (m < 64, A and B aligned, over 0.02 ms), median over rows\n\n"
        "Event-timed at a few hundredths of a millisecond, these rows hold the host's dispatch "
        "(5–8 µs here). The shipped event floor is fitted on NeuSight's hosts (20–30 µs); "
        "`estimate()` prices GPU time with the kernel floor.\n\n"
        + decode_section(h200, shipped, preds["shipped"]) + "\n\n"
        "## Non-GEMM ops (float32; bytes / (η·DRAM bandwidth) with a floor, per op class)\n\n"
        "The shipped op costs are fitted on NeuSight's P4, P100, V100, T4 and A100-40GB kernels; "
        "the H200's event floor is its host's (`benchmarks/data/README.md`).\n\n"
        + vec_section(args.h200 / "vec" / "tgc-vec.csv.gz") + "\n\n"
        "## Whole models (float32, eager attention; NeuSight's label rows rebuilt on the H200)"
        "\n\nfloat32 GEMMs run on CUDA cores, aligned or not, so the misaligned-load cost does "
        "not enter these rows.\n\n" + e2e + "\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
