"""GEMM intervals on chips held out, GEMMs alone: coverage and median hi/lo per GPU at 50%, 80%
and 95%, each GPU's novelty class and the stretch its class got. Run by
``benchmarks/intervals.py --gemm-only`` (writes benchmarks/results/intervals_gemm.md).

Nested: a chip's GEMMs are predicted by hybrids fitted without any board of its chip, and their
intervals come from buckets fitted without that chip's residuals, read at a tail map and
stretched by the unlike classes' stretch that are fitted on the other chips' crossings. NB: one
fit per chip (12, not the 78 of ``intervals.py``): the other chips' crossings are read off
their own chip-out buckets, which still hold this chip's residuals (the second exclusion is
skipped). No board-held-out predictions and no whole models are needed: a GEMM interval does not
depend on them.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from intervals import LEVELS, TARGETS, gemm_bounds, oracle_width, pct, score_gemms
from tabulate import tabulate

from torch_gemm_cost.predict.intervals import NOVELTY, PROBS, UNLIKE, IntervalCalibration
from torch_gemm_cost.train.gemm import chip_of
from torch_gemm_cost.train.intervals import (
    RAW_PROBS,
    GemmPart,
    fit_gemm_part,
    fit_stretch,
    gemm_residuals,
    held_out_rows,
    mapped_probs,
    remap,
    tail_map,
    with_stretch,
)

log = logging.getLogger("intervals")


def run(data: Path, predictions: str | None, out: Path, argv: Sequence[str] | None) -> int:
    t0 = time.perf_counter()
    measured, pred = held_out_rows(data, predictions)
    if pred is None:
        raise ValueError("--gemm-only needs --gemm-predictions (a leave-one-chip-out file of "
                         "benchmarks/accuracy.py --save-predictions)")
    res = gemm_residuals(measured, pred, "chip")
    chips = sorted(set(res.chip))
    parts: dict[str, GemmPart] = {}
    for chip in chips:
        parts[chip] = fit_gemm_part(res.without_chips({chip}), None, probs=RAW_PROBS)
        log.info("fitted without %s (%.0fs)", chip, time.perf_counter() - t0)
    normal = torch.special.ndtri(torch.tensor(PROBS, dtype=torch.float64))
    lo = {lv: torch.empty(len(res), dtype=torch.float64) for lv in LEVELS}
    hi = {lv: torch.empty(len(res), dtype=torch.float64) for lv in LEVELS}
    stretch_of: dict[str, float] = {}
    for chip in chips:
        held = res.without_chips({chip})
        others = {c: parts[c] for c in chips if c != chip}
        mapped = mapped_probs(*tail_map(held, others))
        stretch, _ = fit_stretch(held, {c: remap(p, RAW_PROBS, mapped)
                                        for c, p in others.items()})
        own = remap(parts[chip], RAW_PROBS, mapped)
        cal = IntervalCalibration(probs=PROBS, buckets=own.buckets, log_q=own.log_q,
                                  level_sigma=with_stretch(own, stretch), total_z=normal,
                                  stretch={u: stretch for u in UNLIKE})
        rows = torch.tensor([c == chip for c in res.chip])
        sub = res.select(rows)
        for lv in LEVELS:
            lo[lv][rows], hi[lv][rows] = gemm_bounds(cal, sub, lv)
        stretch_of[chip] = stretch
    scores = {lv: score_gemms(res, lo[lv], hi[lv]) for lv in LEVELS}
    oracle = oracle_width(res)
    cls = {g: NOVELTY[int(res.novelty[res.gpu.index(g)])] for g in sorted(set(res.gpu))}
    s80 = scores[0.8]
    inside = [v[0] for v in s80["per_gpu"].values()]
    command = "python benchmarks/intervals.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    lines = [
        "# GEMM intervals per GPU, each chip held out", "",
        f"Command: `{command.strip()}` ({time.perf_counter() - t0:.0f} s).", "",
        ("Nested: a chip's GEMMs are predicted by hybrids fitted without any board of its chip "
         "and get intervals from a calibration fitted without that chip's residuals: its "
         "buckets, its tail map and the stretch of the classes unlike any GPU in the fit "
         "(`generation_unseen`, `board_unseen`, `spec_file`: the family-unseen quantiles "
         "stretched about their median by the largest stretch any other held-out GPU needed "
         "for 80% coverage). NB: one fit per chip; the tail map and stretch read the other "
         "chips' crossings off their own chip-out buckets, which still hold this chip's "
         "residuals (the second exclusion of `intervals.py` is skipped). GEMMs alone: no "
         "whole models, no board held out alone (`intervals.md` has those)."), "",
        (f"Inputs: GEMM predictions {predictions}; {len(res)} GEMMs on "
        f"{len(s80['per_gpu'])} GPUs."), "",
        f"Targets: {TARGETS} Every GPU within 70-90% at 80%.", "", "## Summary", "",
        "| level | coverage (GPUs) | coverage (rows) | worst GPU | median hi/lo |",
        "|---|---|---|---|---|",
    ]
    for lv in LEVELS:
        s = scores[lv]
        lines.append(f"| {lv:.0%} | {pct(s['coverage'])} | {pct(s['coverage_rows'])} | "
                     f"{pct(s['min_coverage'])} | {s['median_width']:.2f} |")
    lines += ["", (f"At 80%: {sum(0.7 <= c <= 0.9 for c in inside)} of {len(inside)} GPUs "
              "within 70-90%."), "", "## Per GPU", "",
              ("`class` is the GPU's novelty to the fit that predicted it; `stretch` the factor "
               "an unlike class got in that GPU's nested calibration (1: not stretched); "
               "`own-bucket width` the median hi/lo of an 80% interval that knew the GPU's own "
               "residuals in each of its buckets (in-sample)."), ""]
    body: list[list[Any]] = []
    for g in sorted(s80["per_gpu"]):
        row: list[Any] = [g, chip_of(g), cls[g], s80["per_gpu"][g][2],
                          f"{stretch_of[chip_of(g)]:.2f}" if cls[g] in UNLIKE else "1"]
        for lv in LEVELS:
            cov, wid, _ = scores[lv]["per_gpu"][g]
            row += [pct(cov), f"{wid:.2f}"]
        row.append(f"{oracle[g]:.2f}")
        body.append(row)
    lines.append(tabulate(body, headers=[
        "gpu", "chip", "class", "rows", "stretch", "50% cov", "50% hi/lo", "80% cov",
        "80% hi/lo", "95% cov", "95% hi/lo", "own-bucket width (80%)"], tablefmt="github"))
    lines += ["", "Stretch of the unlike classes with each chip left out: "
              + ", ".join(f"{c} {v:.2f}" for c, v in sorted(stretch_of.items())) + ".", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0
