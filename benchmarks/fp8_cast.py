"""What vLLM's fp8 activation cast costs on each GPU, measured from the data alone, beside what
the GEMM predictor prices for it with the GPU in its fit and without.

    python benchmarks/fp8_cast.py [--data ../shared/data] [--no-folds]

aiconfigurator's fp8 rows time vLLM's fp8 Linear, which casts its bf16 input to fp8 (a static
per-tensor scale: 2 bytes read and 1 written an element) in a kernel of its own before the GEMM.
For every (M, K) the data holds at four or more N, a straight line through the four smallest N
gives the time at N -> 0: the cast and the launch, since the GEMM's part grows with N and the
cast's does not. Per GPU, over (M, K) of at least 2^24 elements, the median of that intercept
as a cast rate (elements per SM-clock, and its 3 bytes an element as a share of the datasheet
DRAM bandwidth), beside the rate the predictor prices: the slower of its fitted
``cast_elements_per_sm_clk`` and the DRAM roof. The predictor is the shipped one (every GPU in
its fit) and, unless ``--no-folds``, one refitted without the GPU's chip (seed 0, as
``benchmarks/accuracy.py``), with its median predicted / measured time on the GPU's large fp8
GEMMs and the share of that prediction that is the cast. Writes
``benchmarks/results/fp8_cast.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch_gemm_cost.devices import DeviceSpec
from torch_gemm_cost.gemms.measured import MeasuredGemms, impossible_rows, load_all_gemms
from torch_gemm_cost.predict import default_predictor
from torch_gemm_cost.predict.hybrid import HybridPredictor, variants

MIN_ELEMENTS = 2**24  # M·K of the (M, K) series whose intercept is read
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


def priced_rate(model: HybridPredictor, device: DeviceSpec) -> float:
    """Elements per SM-clock the predictor's cast runs at on ``device``: the slower of its
    fitted SM-side rate and its DRAM roof (3 bytes an element at η_DRAM of the bandwidth)."""
    c = model.physical_constants()
    sm_clk = device.sm_count * device.boost_clock_mhz * 1e6
    dram = c["eta_dram"] * device.dram_bw_bytes_per_s / 3.0 / sm_clk
    return min(float(c["cast_elements_per_sm_clk"]), dram)


def additive_rate(measured_rate: float, model: HybridPredictor, device: DeviceSpec) -> float:
    """The SM-side rate (elements per SM-clock) that ``measured_rate`` implies if the cast's
    DRAM time (3 bytes an element at the predictor's η_DRAM) and its SM time add instead of
    overlapping; NaN where the DRAM time alone exceeds the measured time."""
    sm_clk = device.sm_count * device.boost_clock_mhz * 1e6
    dram_clk = 3.0 * sm_clk / (model.physical_constants()["eta_dram"] * device.dram_bw_bytes_per_s)
    left = 1.0 / measured_rate - dram_clk
    return 1.0 / left if left > 0 else float("nan")


def held_out_view(model: HybridPredictor, rows: MeasuredGemms) -> tuple[float, float]:
    """Median predicted / measured time over ``rows`` and the median share of each prediction
    that is the cast (the time with the cast less the time without)."""
    full = model.predict_measured(rows)
    bare = model.predict_measured(replace(rows, quantized_elements=None))
    ratio = float((full / rows.latency_ms).median())
    share = float(((full - bare) / full).median())
    return ratio, share


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / ".." / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fp8_cast.md"))
    ap.add_argument("--no-folds", action="store_true",
                    help="skip the fits without each chip (about 80 s each)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    measured = load_all_gemms(args.data)
    measured = measured.select(~impossible_rows(measured))
    names = measured.gemms.dtype_names()
    fp8 = measured.mask(source="aiconfigurator") & torch.tensor([d == FP8 for d in names])
    gpus = sorted({g for g, keep in zip(measured.gpu, fp8.tolist()) if keep})
    shipped = default_predictor()
    assert isinstance(shipped, HybridPredictor)
    g = measured.gemms

    rows = []
    for gpu in gpus:
        sel = fp8 & measured.mask(gpu=gpu)
        idx = torch.nonzero(sel).flatten()
        inter = cast_intercepts_ms(g.m[idx].long().tolist(), g.n[idx].long().tolist(),
                                   g.k[idx].long().tolist(), measured.latency_ms[idx].tolist())
        device = measured.device(gpu)
        sm_clk = device.sm_count * device.boost_clock_mhz * 1e6
        rates = [mi * ki / (t * 1e-3) / sm_clk for (mi, ki), t in inter.items()]
        rate = statistics.median(rates)
        q1, _, q3 = statistics.quantiles(rates, n=4)
        dram_share = rate * sm_clk * 3.0 / device.dram_bw_bytes_per_s
        row = [gpu, device.chip, len(rates), f"{rate:.2f}", f"{q1:.2f}-{q3:.2f}",
               f"{dram_share:.2f}", f"{additive_rate(rate, shipped, device):.2f}",
               f"{priced_rate(shipped, device):.2f}"]
        if not args.no_folds:
            held = torch.tensor([measured.device(x).chip == device.chip for x in measured.gpu])
            fold = variants(seed=0)["hybrid"].fit(measured.select(~held))
            big = sel & (g.m >= 4096) & (g.n >= 4096) & (g.k >= 4096)
            ratio, share = held_out_view(fold, measured.select(big))
            row += [f"{priced_rate(fold, device):.2f}", f"{ratio:.2f}", f"{share:.2f}"]
        rows.append(row)
    wall = time.perf_counter() - t0

    headers = ["gpu", "chip", "(M, K) series", "measured: elements / SM-clock", "IQR",
               "its DRAM share at 3 B", "SM-side rate if DRAM and SM time add",
               "priced, shipped fit"]
    if not args.no_folds:
        headers += ["priced, chip held out", "held out: pred / meas, fp8 GEMMs ≥ 4096³",
                    "of it the cast"]
    cmd = "python benchmarks/fp8_cast.py" + (" --no-folds" if args.no_folds else "")
    lines = [
        "# vLLM's fp8 activation cast, measured against priced",
        "",
        (f"Command: `{cmd}` ({wall:.0f} s on one CPU thread). Data: aiconfigurator's fp8 GEMM "
         "rows (`gemm/aiconfigurator.csv.gz`, ai-dynamo/aiconfigurator, Copyright NVIDIA, "
         "Apache-2.0)."),
        "",
        ("Each (M, K) series with four or more N and M·K ≥ 2^24 elements is read at N -> 0 (a "
         "line through its four smallest N): the cast of the M × K bf16 input to fp8 plus the "
         "launch. **measured** is that intercept as elements per SM-clock (median and "
         "interquartile range over the series) and the share of the datasheet DRAM bandwidth "
         "its 3 bytes an element would take, and the SM-side rate it implies if the cast's DRAM "
         "time (at the predictor's η_DRAM) and its SM time add rather than overlap. **priced** "
         "is the predictor's rate: the slower "
         "of its fitted elements per SM-clock and its DRAM roof, for the shipped fit (every "
         "GPU in it) and for a fit without the GPU's chip (seed 0), whose median predicted / "
         "measured time on the GPU's fp8 GEMMs of 4096³ or more is beside it, with the share "
         "of that prediction that is the cast."),
        "",
        tabulate(rows, headers=headers, tablefmt="github"),
        "",
        ("One SM-side rate for every GPU cannot hold these: where the L40S's cast runs at "
         "fewer elements per SM-clock, its 3 bytes an element already take more than half of "
         "its DRAM bandwidth, while the H200's and B200's take a fifth or less. A fit without "
         "the B200 learns its rate from the H200 and the L40S and prices the B200's cast "
         "slower than it runs (the held-out B200 fp8 miss of `benchmarks/results/accuracy.md`); "
         "the L40S's DRAM roof at the GEMMs' η prices its cast faster than it runs. If the DRAM "
         "time and the SM time add (a kernel of one CTA a token that does not hide its loads), "
         "the three imply SM-side rates that differ far less than the measured ones; the "
         "predictor takes the slower of the two."),
        "",
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(tabulate(rows, headers=headers))
    print(f"wrote {args.out} in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
