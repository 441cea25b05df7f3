"""Calibrated intervals on chips held out: coverage and median width (hi/lo) per GPU at 50%,
80% and 95%, for GEMMs and whole models. Writes benchmarks/results/intervals.md and a
reliability diagram (intervals.png, needs the ``plot`` extra).

    python benchmarks/intervals.py [--data ../shared/data] [--gemm-predictions LOCO.pt]
        [--board-predictions LOBO.pt] [--whole-models ROWS.json | --cache DIR]
        [--save-whole-models ROWS.json] [--save-board-predictions LOBO.pt] [--gemm-only]

Nested, so no figure is in-sample: a chip's GEMMs are predicted by hybrids fitted without any
board of its chip, and their intervals come from a calibration fitted without that chip's
residuals (its GEMMs' and its whole models'); its whole models likewise, with the GEMM and
op-cost fits and the calibration all leaving the chip out. ``chip_seen`` intervals are scored on
each board of a multi-board chip predicted with only that board left out.

Without prediction files the held-out predictions are computed here
(``train.gemm.leave_one_chip_out``: hours on two cores); without ``--whole-models`` the whole
models are priced by ``benchmarks/e2e.py``'s held-out predictor (``--cache`` keeps its fits).
``--gemm-only`` checks the chip-held-out GEMMs alone (no board predictions, no whole models;
writes intervals_gemm.md): a GEMM interval does not depend on them.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from torch_gemm_cost.predict.intervals import (
    ENGINE_CLASSES,
    NOVELTY,
    REGIMES,
    IntervalCalibration,
    bounds,
    gemm_cases,
    novelty_of,
    propagate,
)
from torch_gemm_cost.records.types import GemmBatch
from torch_gemm_cost.train.gemm import chip_of
from torch_gemm_cost.train.intervals import (
    Residuals,
    WholeModelRow,
    fit_interval_calibration,
    group_weights,
    held_out_residuals,
    load_whole_models,
)

log = logging.getLogger("intervals")

LEVELS = (0.5, 0.8, 0.95)
DIAGRAM_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)
TARGETS = ("GEMMs, 80%, chip held out: coverage 75-85% overall, at least 65% on every GPU, "
           "median hi/lo under 1.8. Whole models, 80%, chip held out: coverage at least 75%, "
           "median hi/lo under 1.6.")


def whole_model_rows(data: Path, measured_gpus: Sequence[str], cache: Path | None
                     ) -> list[WholeModelRow]:
    """Every e2e label priced with its chip held out (``e2e.HeldOutByChip``), with each GEMM's
    time and cases."""
    import e2e

    held = e2e.HeldOutByChip(data, cache=cache)
    results, _ = e2e.run(data, held, held.op_costs, keep_estimates=True)
    rows = []
    for r in results:
        device = r["device"]
        chip = chip_of(device.id)
        trained = [g for g in measured_gpus if chip_of(g) != chip]
        gemms = r["gemms"]
        cases = gemm_cases(GemmBatch.from_sites([g.site for g in gemms]), device)
        rows.append(WholeModelRow(
            gpu=r["gpu"], chip=chip, novelty=novelty_of(device, trained),
            label=f"{r['model']} {r['mode']} b{r['batch']} s{r['seq']}",
            measured_ms=r["measured_ms"], other_ms=r["other_ms"],
            gemm_ms=torch.tensor([g.time_ms for g in gemms], dtype=torch.float64), cases=cases))
    return rows


def weighted_median(values: torch.Tensor, weights: torch.Tensor) -> float:
    order = torch.argsort(values)
    cum = torch.cumsum(weights[order], 0)
    return float(values[order][int(torch.searchsorted(cum, cum[-1] / 2))])


def gemm_bounds(cal: IntervalCalibration, res: Residuals, level: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) of each residual row's prediction under ``cal``, by its novelty."""
    lo = torch.empty(len(res), dtype=torch.float64)
    hi = torch.empty_like(lo)
    for nov in torch.unique(res.novelty).tolist():
        rows = res.novelty == nov
        sub = res.select(rows)
        q = cal.gemm_log_quantiles(sub.cases, NOVELTY[nov])
        lo[rows], hi[rows] = bounds(sub.predicted_ms, q, level, sub.cases.floor_ms)
    return lo, hi


def score_gemms(res: Residuals, lo: torch.Tensor, hi: torch.Tensor) -> dict[str, Any]:
    """Coverage and median hi/lo per GPU, and over GPUs (each weighing the same)."""
    meas = res.predicted_ms * torch.exp(res.log_ratio)
    inside = ((meas >= lo) & (meas <= hi)).double()
    width = hi / lo
    per: dict[str, tuple[float, float, int]] = {}
    for g in sorted(set(res.gpu)):
        s = torch.tensor([x == g for x in res.gpu])
        per[g] = (float(inside[s].mean()), float(torch.median(width[s])), int(s.sum()))
    gi = torch.tensor([sorted(per).index(g) for g in res.gpu])
    w = group_weights(gi)
    return {"per_gpu": per, "coverage": sum(v[0] for v in per.values()) / len(per),
            "coverage_rows": float(inside.mean()), "min_coverage": min(v[0] for v in per.values()),
            "median_width": weighted_median(width, w),
            "median_width_rows": float(torch.median(width))}


def score_runs(runs: Sequence[WholeModelRow], bounds_of: dict[int, tuple[float, float]]
               ) -> dict[str, Any]:
    per: dict[str, list[tuple[bool, float]]] = defaultdict(list)
    for i, r in enumerate(runs):
        lo, hi = bounds_of[i]
        per[r.gpu].append((lo <= r.measured_ms <= hi, hi / lo))
    gpus = sorted(per)
    cov = {g: sum(c for c, _ in per[g]) / len(per[g]) for g in gpus}
    wid = {g: float(torch.median(torch.tensor([w for _, w in per[g]]))) for g in gpus}
    widths = torch.tensor([w for g in gpus for _, w in per[g]])
    weights = group_weights(torch.tensor([i for i, g in enumerate(gpus) for _ in per[g]]))
    inside = [c for g in gpus for c, _ in per[g]]
    return {"per_gpu": {g: (cov[g], wid[g], len(per[g])) for g in gpus},
            "coverage": sum(cov.values()) / len(gpus), "coverage_rows": sum(inside) / len(inside),
            "min_coverage": min(cov.values()),
            "median_width": weighted_median(widths, weights),
            "median_width_rows": float(torch.median(widths))}


def oracle_width(res: Residuals, level: float = 0.8) -> dict[str, float]:
    """Per GPU, the median hi/lo an interval would need if it knew that GPU's own residuals in
    each of its finest buckets (in-sample: a bound no held-out calibration can beat by much)."""
    a = (1 - level) / 2
    out = {}
    for g in sorted(set(res.gpu)):
        sub = res.select(torch.tensor([x == g for x in res.gpu]))
        c = sub.cases
        code = ((c.engine * 8 + c.precision) * 8 + c.regime) * 8 + c.size
        width = torch.empty(len(sub), dtype=torch.float64)
        for u in torch.unique(code).tolist():
            s = code == u
            q = torch.quantile(sub.log_ratio[s], torch.tensor([a, 1 - a], dtype=torch.float64))
            width[s] = math.exp(float(q[1] - q[0]))
        out[g] = float(torch.median(width))
    return out


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / ".." / "shared" / "data")
    ap.add_argument("--gemm-predictions", default=None)
    ap.add_argument("--board-predictions", default=None)
    ap.add_argument("--save-board-predictions", default=None)
    ap.add_argument("--whole-models", type=Path, default=None)
    ap.add_argument("--save-whole-models", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=None,
                    help="folder for e2e.py's held-out fits, reused when present")
    ap.add_argument("--out", type=Path, default=None,
                    help="default: benchmarks/results/intervals.md (intervals_gemm.md with "
                         "--gemm-only)")
    ap.add_argument("--gemm-only", action="store_true",
                    help="chip-held-out GEMMs alone: no board predictions, no whole models")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.out is None:
        name = "intervals_gemm.md" if args.gemm_only else "intervals.md"
        args.out = ROOT / "benchmarks" / "results" / name
    if args.gemm_only:
        import intervals_gemm

        return intervals_gemm.run(args.data, args.gemm_predictions, args.out, argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    measured, chip_res, board_res = held_out_residuals(
        args.data, args.gemm_predictions, args.board_predictions, args.save_board_predictions)
    gpus = sorted(set(measured.gpu))
    if args.whole_models is not None and args.whole_models.is_file():
        runs = load_whole_models(args.whole_models)
    else:
        runs = whole_model_rows(args.data, gpus, args.cache)
        if args.save_whole_models:
            args.save_whole_models.write_text(json.dumps(
                {"description": "whole models, each priced with its chip held out of the GEMM "
                                "and op-cost fits (benchmarks/e2e.py HeldOutByChip, seed 0)",
                 "rows": [r.to_dict() for r in runs]}) + "\n")
    log.info("inputs ready in %.0fs", time.perf_counter() - t0)

    # ------------------------------------------------------------ nested: each chip left out
    cache: dict[frozenset[str], Any] = {}
    gemm_lo: dict[float, torch.Tensor] = {}
    gemm_hi: dict[float, torch.Tensor] = {}
    board_nested: dict[float, tuple[torch.Tensor, torch.Tensor]] = {}
    run_bounds: dict[float, dict[int, tuple[float, float]]] = defaultdict(dict)
    all_levels = sorted(set(LEVELS) | set(DIAGRAM_LEVELS))
    for lv in all_levels:
        gemm_lo[lv] = torch.empty(len(chip_res), dtype=torch.float64)
        gemm_hi[lv] = torch.empty(len(chip_res), dtype=torch.float64)
        board_nested[lv] = (torch.empty(len(board_res), dtype=torch.float64),
                            torch.empty(len(board_res), dtype=torch.float64))
    for chip in sorted(set(chip_res.chip)):
        cal = fit_interval_calibration(chip_res, board_res, runs, exclude_chips=[chip],
                                       cache=cache)
        rows = torch.tensor([c == chip for c in chip_res.chip])
        brows = torch.tensor([c == chip for c in board_res.chip])
        sub, bsub = chip_res.select(rows), board_res.select(brows)
        for lv in all_levels:
            gemm_lo[lv][rows], gemm_hi[lv][rows] = gemm_bounds(cal, sub, lv)
            if len(bsub):
                lo, hi = gemm_bounds(cal, bsub, lv)
                board_nested[lv][0][brows], board_nested[lv][1][brows] = lo, hi
            for i, r in enumerate(runs):
                if r.chip == chip:
                    q = cal.gemm_log_quantiles(r.cases, r.novelty)
                    run_bounds[lv][i] = propagate(r.gemm_ms, q, r.other_ms,
                                                  cal.level_sigma_of(r.novelty), cal.total_z, lv)
        log.info("%s left out: done (%.0fs)", chip, time.perf_counter() - t0)
    full = fit_interval_calibration(chip_res, board_res, runs, cache=cache)
    board_full = {lv: gemm_bounds(full, board_res, lv) for lv in LEVELS}

    gemm_scores = {lv: score_gemms(chip_res, gemm_lo[lv], gemm_hi[lv]) for lv in all_levels}
    board_scores = {lv: score_gemms(board_res, *board_nested[lv]) for lv in LEVELS}
    board_full_scores = {lv: score_gemms(board_res, *board_full[lv]) for lv in LEVELS}
    run_scores = {lv: score_runs(runs, run_bounds[lv]) for lv in all_levels}
    oracle = oracle_width(chip_res)
    novelty_of_gpu = {g: NOVELTY[int(chip_res.novelty[chip_res.gpu.index(g)])]
                      for g in sorted(set(chip_res.gpu))}

    # ------------------------------------------------------------ report
    command = "python benchmarks/intervals.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    lines = [
        "# Calibrated intervals, each chip held out", "",
        f"Command: `{command.strip()}` ({time.perf_counter() - t0:.0f} s).", "",
        ("Nested: a chip's GEMMs are predicted by hybrids fitted without any board of its chip, "
        "and their intervals come from a calibration fitted without that chip's residuals; its "
        "whole models are priced with the chip left out of the GEMM and op-cost fits "
        "(`benchmarks/e2e.py` HeldOutByChip, seed 0) and get intervals from a calibration that "
        "left the chip out too. Coverage is the share of measured times inside the interval; "
        "'overall' averages the GPUs, each counting once ('rows' pools every row); width is "
         "hi/lo, its median over rows with each GPU weighing the same."), "",
        (f"Inputs: GEMM predictions {args.gemm_predictions or 'computed here (seed 0)'}, board "
        f"predictions {args.board_predictions or 'computed here (seed 0)'}, whole models "
        f"{args.whole_models or 'priced here'}; {len(chip_res)} GEMMs on {len(gpus)} GPUs, "
         f"{len(board_res)} GEMMs of boards left out alone, {len(runs)} whole-model runs."), "",
        f"Targets: {TARGETS}", "",
        "## Summary, chip held out", "",
    ]
    body: list[list[Any]] = []
    for lv in LEVELS:
        gs, rs = gemm_scores[lv], run_scores[lv]
        body.append([f"{lv:.0%}", pct(gs["coverage"]), pct(gs["coverage_rows"]),
                     pct(gs["min_coverage"]), f"{gs['median_width']:.2f}",
                     pct(rs["coverage"]), pct(rs["coverage_rows"]), pct(rs["min_coverage"]),
                     f"{rs['median_width']:.2f}"])
    lines.append(tabulate(body, headers=[
        "level", "GEMM coverage (GPUs)", "GEMM coverage (rows)", "GEMM worst GPU",
        "GEMM median hi/lo", "whole-model coverage (GPUs)", "whole-model coverage (runs)",
        "whole-model worst GPU", "whole-model median hi/lo"], tablefmt="github"))
    lines += ["", "## GEMMs per GPU, chip held out", "",
              ("`class` is the GPU's novelty to the fit that predicted it. `own-bucket width` is "
              "the median hi/lo of an 80% interval that knew the GPU's own residuals in each of "
              "its buckets (in-sample): the spread the predictor leaves on that GPU, which no "
               "held-out calibration can undercut by much."), ""]
    body = []
    for gpu in sorted(gemm_scores[0.8]["per_gpu"]):
        row: list[Any] = [gpu, chip_of(gpu), novelty_of_gpu[gpu],
                          gemm_scores[0.8]["per_gpu"][gpu][2]]
        for lv in LEVELS:
            cov, wid, _ = gemm_scores[lv]["per_gpu"][gpu]
            row += [pct(cov), f"{wid:.2f}"]
        row.append(f"{oracle[gpu]:.2f}")
        body.append(row)
    lines.append(tabulate(body, headers=[
        "gpu", "chip", "class", "rows", "50% cov", "50% hi/lo", "80% cov", "80% hi/lo",
        "95% cov", "95% hi/lo", "own-bucket width (80%)"], tablefmt="github"))
    lines += ["", "## GEMMs by engine and regime, 80%, chip held out", ""]
    body = []
    meas = chip_res.predicted_ms * torch.exp(chip_res.log_ratio)
    inside = (meas >= gemm_lo[0.8]) & (meas <= gemm_hi[0.8])
    width = gemm_hi[0.8] / gemm_lo[0.8]
    for e, eng in enumerate(ENGINE_CLASSES):
        for k, reg in enumerate(REGIMES):
            s = (chip_res.cases.engine == e) & (chip_res.cases.regime == k)
            if int(s.sum()) < 50:
                continue
            sub_gpus = [chip_res.gpu[i] for i in torch.nonzero(s).flatten().tolist()]
            names = sorted(set(sub_gpus))
            w = group_weights(torch.tensor([names.index(x) for x in sub_gpus]))
            body.append([eng, reg, int(s.sum()), len(names),
                         pct(float((inside[s].double() * w).sum())),
                         f"{weighted_median(width[s], w):.2f}"])
    lines.append(tabulate(body, headers=["engine", "regime", "rows", "GPUs",
                                         "coverage (GPUs weigh the same)", "median hi/lo"],
                          tablefmt="github"))
    lines += ["", "## Chip seen: each board of a multi-board chip left out alone", "",
              ("Nested, the chip's other boards are left out of the calibration too, so only one "
              "multi-board chip remains and the `chip_seen` buckets fall back to the family-seen "
              "ones (wider). Beside it, the shipped calibration, whose `chip_seen` buckets were "
              "fitted on these very residuals (in-sample for the calibration, shown for the "
               "widths it gives)."), ""]
    body = []
    for gpu in sorted(board_scores[0.8]["per_gpu"]):
        row = [gpu, board_scores[0.8]["per_gpu"][gpu][2]]
        for lv in LEVELS:
            cov, wid, _ = board_scores[lv]["per_gpu"][gpu]
            fc, fw, _ = board_full_scores[lv]["per_gpu"][gpu]
            row += [f"{pct(cov)} / {wid:.2f}", f"{pct(fc)} / {fw:.2f}"]
        body.append(row)
    lines.append(tabulate(body, headers=[
        "board", "rows", "50% nested cov / hi/lo", "50% shipped", "80% nested", "80% shipped",
        "95% nested", "95% shipped"], tablefmt="github"))
    lines += ["", "## Whole models per GPU, chip held out", ""]
    body = []
    for gpu in sorted(run_scores[0.8]["per_gpu"]):
        row = [gpu, run_scores[0.8]["per_gpu"][gpu][2],
               next(r.novelty for r in runs if r.gpu == gpu)]
        for lv in LEVELS:
            cov, wid, _ = run_scores[lv]["per_gpu"][gpu]
            row += [pct(cov), f"{wid:.2f}"]
        body.append(row)
    lines.append(tabulate(body, headers=["gpu", "runs", "class", "50% cov", "50% hi/lo",
                                         "80% cov", "80% hi/lo", "95% cov", "95% hi/lo"],
                          tablefmt="github"))
    lines += ["", "## Whole-model runs at 80%, chip held out", ""]
    body = []
    for i, r in sorted(enumerate(runs), key=lambda x: (x[1].gpu, x[1].label)):
        lo_ms, hi_ms = run_bounds[0.8][i]
        body.append([r.gpu, r.label, f"{r.measured_ms:.1f}", f"{r.predicted_ms:.1f}",
                     f"{lo_ms:.1f}", f"{hi_ms:.1f}",
                     "yes" if lo_ms <= r.measured_ms <= hi_ms else "NO"])
    lines.append(tabulate(body, headers=["gpu", "run", "measured ms", "predicted ms", "lo ms",
                                         "hi ms", "inside"], tablefmt="github"))
    lines += ["", "## Reliability: nominal level against coverage, chip held out", "",
              tabulate([[f"{lv:.0%}", pct(gemm_scores[lv]["coverage"]),
                         f"{gemm_scores[lv]['median_width']:.2f}",
                         pct(run_scores[lv]["coverage"]),
                         f"{run_scores[lv]['median_width']:.2f}"] for lv in DIAGRAM_LEVELS],
                       headers=["level", "GEMM coverage", "GEMM median hi/lo",
                                "whole-model coverage", "whole-model median hi/lo"],
                       tablefmt="github"),
              "", "## The shipped calibration's fit (every chip)", "",
              f"{len(full.buckets)} buckets; shared level term (log sd): "
              + ", ".join(f"{k} {v:.3f}" for k, v in full.level_sigma.items())
              + "; whole-model quantiles at 10%/50%/90%: "
              + ", ".join(f"{float(full.total_z[full.probs.index(p)]):+.2f}"
                          for p in (0.1, 0.5, 0.9))
              + " (in units of σ).", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    _diagram(args.out.with_suffix(".png"), gemm_scores, run_scores)
    print("\n".join(lines[:30]))
    return 0


def _diagram(path: Path, gemm_scores: dict[float, Any], run_scores: dict[float, Any]) -> None:
    """Nominal level against measured coverage (the reliability diagram)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("no matplotlib: the reliability diagram is skipped (the plot extra)")
        return
    levels = sorted(gemm_scores)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="calibrated")
    gpus = sorted(gemm_scores[levels[0]]["per_gpu"])
    for gpu in gpus:
        ax.plot(levels, [gemm_scores[lv]["per_gpu"][gpu][0] for lv in levels], color="C0",
                lw=0.6, alpha=0.35)
    ax.plot(levels, [gemm_scores[lv]["coverage"] for lv in levels], "o-", color="C0",
            label="GEMMs (mean over GPUs; thin: each GPU)")
    ax.plot(levels, [run_scores[lv]["coverage"] for lv in levels], "s-", color="C3",
            label="whole models (mean over GPUs)")
    ax.set_xlabel("nominal level")
    ax.set_ylabel("coverage, chip held out")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("Interval reliability (nested leave-one-chip-out)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
