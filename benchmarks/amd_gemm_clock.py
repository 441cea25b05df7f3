"""The MI300X's clock under a flat-out GEMM, one leave-one-chip-out fold: AMD's published figure
against its peak clock, on rows no fit saw.

    python benchmarks/amd_gemm_clock.py [--data ../shared/data] [--fold-weights FOLD.json]

The catalog's MI300X peaks are AMD's (1307.4 TFLOP/s dense fp16/bf16 = 304 CUs x 2048 FLOP/clk
x 2100 MHz, the peak engine clock), and it has no base clock, so the predictor prices every
GEMM at 2100 MHz: the clock it loses under load is left to the fitted AMD efficiencies. AMD's
Max-Achievable FLOPs runs (ROCm blog "Measuring Max-Achievable FLOPs - Part 2", MI300X at 750 W,
hipBLASLt at 4096x4864x32896) reach 654 (fp16), 708 (bf16) and 1273 (fp8) TFLOP/s at median
clocks of 1115-1230 MHz: the ``gemm_clock_mhz`` the predictor takes (power.py), here their
midpoint, 1170 MHz.

One fold: the shipped training (seed 0) without any MI300X row, saved to ``--fold-weights``
(fitted when the file is absent: about 40 minutes on a loaded 2-core machine). No other GPU has
a GEMM clock, so the fold's fit is the same with and without it; the MI300X's rows are then
predicted by that fold with its catalog record as it is (peak clock) and with the GEMM clock.
The shipped weights are scored beside it (they fitted the MI300X rows: in-sample). Writes
``benchmarks/results/amd_gemm_clock.md``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch_gemm_cost.hardware.catalog import DeviceSpec, get_device
from torch_gemm_cost.measured.gemm import MeasuredGemms, load_all_gemms
from torch_gemm_cost.predict import shipped_hybrid
from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor, variants
from torch_gemm_cost.predict.gemm.roofline import RooflinePredictor, impossible_rows
from torch_gemm_cost.train.gemm import chip_of

OUT = ROOT / "benchmarks" / "results" / "amd_gemm_clock.md"
GEMM_CLOCK_MHZ = 1170.0  # midpoint of AMD's 1115-1230 MHz median clocks (MAF, MI300X 750 W)


def scored(rows: MeasuredGemms, pred: torch.Tensor) -> dict[str, str]:
    meas = rows.latency_ms
    ape = (pred - meas).abs() / meas
    return {"rows": str(len(rows)), "MAPE": f"{float(ape.mean()):.1%}",
            "median pred/meas": f"{float((pred / meas).median()):.2f}"}


def predict_on(model: HybridPredictor, rows: MeasuredGemms, device: DeviceSpec) -> torch.Tensor:
    """``model``'s ms for ``rows``, every row on ``device`` (a catalog GPU's record, changed)."""
    out = torch.empty(len(rows), dtype=torch.float64)
    for timing in sorted(set(rows.timing)):
        for source in sorted(set(rows.source)):
            sel = torch.tensor([t == timing and s == source
                                for t, s in zip(rows.timing, rows.source)])
            if sel.any():
                part = rows.select(sel)
                out[sel] = model.predict(part.gemms, device, timing=timing,
                                         source=source).time_ms
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / ".." / "shared" / "data")
    ap.add_argument("--fold-weights", type=Path, default=Path("mi300x_fold.json"))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    measured = load_all_gemms(args.data)
    measured = measured.select(~impossible_rows(measured))
    held = torch.tensor([chip_of(g) == "MI300X" for g in measured.gpu])
    if args.fold_weights.exists():
        fold = HybridPredictor.load(args.fold_weights)
    else:
        torch.manual_seed(0)
        fold = variants(seed=0)["hybrid"].fit(measured.select(~held))
        fold.save(args.fold_weights)
    rows = measured.select(held)
    peak_clock = get_device("mi300x")
    gemm_clock = replace(peak_clock, gemm_clock_mhz=GEMM_CLOCK_MHZ)
    shipped = shipped_hybrid()
    preds = {
        "roofline (peak clock)": RooflinePredictor().predict(rows.gemms, peak_clock).time_ms,
        "fold, peak clock (as shipped)": predict_on(fold, rows, peak_clock),
        f"fold, GEMM clock {GEMM_CLOCK_MHZ:.0f} MHz": predict_on(fold, rows, gemm_clock),
        "shipped weights (in-sample), peak clock": predict_on(shipped, rows, peak_clock),
        f"shipped weights (in-sample), GEMM clock {GEMM_CLOCK_MHZ:.0f} MHz":
            predict_on(shipped, rows, gemm_clock),
    }
    names = rows.gemms.dtype_names()
    table = []
    for label, pred in preds.items():
        line = {"predictor": label, **scored(rows, pred)}
        for dtype in sorted(set(names)):
            sel = torch.tensor([n == dtype for n in names])
            ape = (pred - rows.latency_ms).abs() / rows.latency_ms
            line[f"{dtype} MAPE"] = f"{float(ape[sel].mean()):.1%}"
            line[f"{dtype} pred/meas"] = f"{float((pred / rows.latency_ms)[sel].median()):.2f}"
        table.append(line)
    lines = ["# The MI300X's clock under a flat-out GEMM, its chip held out", "",
             "Command: `python benchmarks/amd_gemm_clock.py --fold-weights mi300x_fold.json`",
             "",
             ("One leave-one-chip-out fold (seed 0, the shipped training without the MI300X's "
              "rows); the MI300X's xla-ptable rows it never saw, predicted with the catalog's "
              f"peak clock (2100 MHz) and with AMD's flat-out GEMM clock ({GEMM_CLOCK_MHZ:.0f} "
              "MHz). The shipped weights' rows are in-sample."), "",
             "### MI300X", "", tabulate(table, headers="keys", tablefmt="github"), "",
             ("The fold with the peak clock is the leave-one-chip-out run of "
              "benchmarks/results/accuracy.md (32.7%, median 0.69). AMD's GEMM clock moves the "
              "held-out level toward 1 in every precision; fp8 overshoots in MAPE while its "
              "median reaches 1.00. The shipped weights fitted the MI300X at its peak clock, so "
              "their AMD efficiencies hold the lost clock already (tf32 at 0.49): the GEMM clock "
              "on top of them counts it twice. The catalog's MI300X record therefore carries no "
              "gemm_clock_mhz until the shipped weights are refitted with it."), ""]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
