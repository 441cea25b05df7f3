"""What vLLM's fp8 activation cast costs on each GPU, measured from the data alone, beside what
the GEMM predictor prices for it with the GPU in its fit and without.

    python benchmarks/fp8_cast.py [--data ../shared/data] [--held-out LOCO.pt]

aiconfigurator's fp8 rows time vLLM's fp8 Linear, which casts its bf16 input to fp8 (a static
per-tensor scale: 2 bytes read and 1 written an element) in a kernel of its own before the GEMM.
For every (M, K) the data holds at four or more N, a straight line through the four smallest N
gives the time at N -> 0: the cast and the launches, since the GEMM's part grows with N and the
cast's does not. The same line through the predictor's times of the same rows gives the cast
as priced, so measured and priced are read the same way.

The cast kernel (``static_scaled_fp8_quant``, vLLM csrc/quantization/fp8/common.cu) runs one CTA
of 256 threads per token row, each thread converting one 16-byte vector per pass: a row of K
elements takes ⌈K / 2048⌉ passes. The first table divides each intercept by the rows one SM
works through (⌈M / SMs⌉, series of M ≥ 4096) and groups the series by their passes: the time
per CTA and per pass, in microseconds. The second scores the priced intercepts against the
measured ones over every series of 2^24 elements or more, with the shipped weights (every GPU
in the fit) and, given ``--held-out`` (``benchmarks/accuracy.py --save-predictions``: the rows
of ``load_all_gemms`` after ``impossible_rows``, each predicted by a fit without its chip), held
out, beside the held-out predicted / measured time of the GPU's fp8 GEMMs of 4096³ or more.
Writes ``benchmarks/results/fp8_cast.md``.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results"

from accuracy import held_out_main

from torch_gemm_cost.predict import default_predictor
from torch_gemm_cost.predict.gemm import cast
from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor

MIN_ELEMENTS = 2**24  # M·K of the (M, K) series scored
DEEP_ROWS = 4096  # M of the series whose time per row an SM works through is tabulated
PASSES = (1, 2, 3, 4, 8)
FP8 = "float8_e4m3fn"


def cast_intercepts_ms(m: Sequence[int], n: Sequence[int], k: Sequence[int],
                       ms: Sequence[float], min_elements: int = MIN_ELEMENTS
                       ) -> dict[tuple[int, int], float]:
    """The time at N -> 0 of every (M, K) series with at least four distinct N and M·K of
    ``min_elements`` or more: the least-squares line through its four smallest N (one time
    per N, the median where N repeats), read at N = 0. Series whose intercept is not positive
    are left out."""
    series: dict[tuple[int, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for mi, ni, ki, t in zip(m, n, k, ms):
        if mi * ki >= min_elements:
            series[(mi, ki)][ni].append(t)
    out = {}
    for key, by_n in series.items():
        if len(by_n) < 4:
            continue
        xs = sorted(by_n)[:4]
        ys = [statistics.median(by_n[x]) for x in xs]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
                 / sum((x - mx) ** 2 for x in xs))
        intercept = my - slope * mx
        if intercept > 0:
            out[key] = intercept
    return out


def us_per_row(intercepts: dict[tuple[int, int], float], sm_count: int,
               min_rows: int = DEEP_ROWS) -> dict[int, list[float]]:
    """Microseconds per row an SM works through (intercept / ⌈M / SMs⌉) of the series with
    M ≥ ``min_rows``, grouped by the cast's passes over a row, ⌈K / 2048⌉."""
    out: dict[int, list[float]] = defaultdict(list)
    for (m, k), ms in intercepts.items():
        if m >= min_rows:
            out[math.ceil(k / cast.ELEMENTS_PER_PASS)].append(
                ms * 1e3 / math.ceil(m / sm_count))
    return out


def median_ratio(priced: dict[tuple[int, int], float], measured: dict[tuple[int, int], float]
                 ) -> tuple[float, float, float, int]:
    """Median and interquartile range of priced / measured intercepts over the series both
    have, and how many."""
    ratios = sorted(priced[s] / measured[s] for s in measured if s in priced)
    if len(ratios) < 4:
        return math.nan, math.nan, math.nan, len(ratios)
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    return q2, q1, q3, len(ratios)


def _fmt(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    args, measured, held = held_out_main(__doc__ or "", RESULTS / "fp8_cast.md", argv)
    names = measured.gemms.dtype_names()
    fp8 = measured.mask(source="aiconfigurator") & torch.tensor([d == FP8 for d in names])
    gpus = sorted({g for g, keep in zip(measured.gpu, fp8.tolist()) if keep})
    shipped = default_predictor()
    assert isinstance(shipped, HybridPredictor)
    g = measured.gemms

    structure, scores = [], []
    steps: list[str] = []
    for gpu in gpus:
        sel = fp8 & measured.mask(gpu=gpu)
        idx = torch.nonzero(sel).flatten()
        sub = measured.select(sel)
        dims = (g.m[idx].long().tolist(), g.n[idx].long().tolist(), g.k[idx].long().tolist())
        times = {"measured": measured.latency_ms[idx],
                 "in the fit": shipped.predict_measured(sub).to(torch.float64)}
        if held is not None:
            times["held out"] = held[idx]
        every = {name: cast_intercepts_ms(*dims, t.tolist(), min_elements=1)
                 for name, t in times.items()}
        inter = {name: {s: v for s, v in i.items() if s[0] * s[1] >= MIN_ELEMENTS}
                 for name, i in every.items()}
        device = measured.device(gpu)
        per_row = {name: us_per_row(i, device.sm_count) for name, i in every.items()}
        for p in PASSES:
            structure.append([gpu, p, len(per_row["measured"].get(p, []))]
                             + [_fmt(per_row[name].get(p, [])) for name in times])
        one, eight = per_row["measured"].get(1, []), per_row["measured"].get(8, [])
        if one and eight:
            first, last = statistics.median(one), statistics.median(eight)
            steps.append(f"{gpu} {first:.2f} µs at one pass, {(last - first) / 7:.2f} more "
                         "per further pass")
        ratios = {name: median_ratio(inter[name], inter["measured"])
                  for name in times if name != "measured"}
        row: list[object] = [gpu, device.chip, ratios["in the fit"][3]]
        row += [f"{q2:.2f} ({q1:.2f}-{q3:.2f})" for q2, q1, q3, _ in ratios.values()]
        if held is not None:
            big = (g.m[idx] >= 4096) & (g.n[idx] >= 4096) & (g.k[idx] >= 4096)
            ratio = (held[idx][big] / measured.latency_ms[idx][big]).median()
            row.append(f"{float(ratio):.2f}")
        scores.append(row)
    wall = time.perf_counter() - t0

    cols = ["measured", "priced, in the fit"] + (["priced, chip held out"] if held is not None
                                                 else [])
    structure_headers = ["gpu", "passes ⌈K / 2048⌉", "(M, K) series"] + [
        f"{c}: µs per row an SM works through" for c in cols]
    score_headers = ["gpu", "chip", "(M, K) series", "priced / measured, in the fit (IQR)"]
    if held is not None:
        score_headers += ["priced / measured, chip held out (IQR)",
                          "held out: pred / meas, fp8 GEMMs ≥ 4096³"]
    cmd = "python benchmarks/fp8_cast.py" + (
        f" --held-out {args.held_out.name}" if args.held_out else "")
    held_note = (f" **chip held out**: the predictions of `{args.held_out.name}`, each row "
                 "predicted by a fit without any board of its chip." if held is not None else "")
    lines = [
        "# vLLM's fp8 activation cast, measured against priced",
        "",
        (f"Command: `{cmd}` ({wall:.0f} s on one CPU thread). Data: aiconfigurator's fp8 GEMM "
         "rows (`gemm/aiconfigurator.csv.gz`, ai-dynamo/aiconfigurator, Copyright NVIDIA, "
         "Apache-2.0)."),
        "",
        ("Each (M, K) series with four or more N is read at N -> 0 (a line through its four "
         "smallest N): the cast of the M × K bf16 input to fp8 plus the launches. The priced "
         "figures read the predictor's times of the same rows the same way: **in the fit**, the "
         "shipped weights (every GPU in the fit)." + held_note),
        "",
        ("vLLM's cast (`static_scaled_fp8_quant`, csrc/quantization/fp8/common.cu) runs one CTA "
         "of 256 threads per token row, a 16-byte vector a thread per pass, so ⌈K / 2048⌉ "
         "passes a row. Per row an SM works through (the intercept over ⌈M / SMs⌉, series of "
         f"M ≥ {DEEP_ROWS}), medians:"),
        "",
        tabulate(structure, headers=structure_headers, tablefmt="github"),
        "",
        ("Measured, from one to eight passes: " + "; ".join(steps) + ". The predictor "
         "prices the cast from these measurements, nothing fitted "
         "(`torch_gemm_cost/predict/gemm/cast.py`): one row at a time per SM, "
         f"{cast.CTA_US:.2f} µs a row and {cast.PASS_US:.2f} µs a further pass (the H200's "
         "and B200's medians less their bytes term), plus the 3 bytes an element at the "
         "sustained DRAM bandwidth of the GEMM fit."),
        "",
        "Priced against measured intercepts, series of M·K ≥ 2^24:",
        "",
        tabulate(scores, headers=score_headers, tablefmt="github"),
        "",
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.out} in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
