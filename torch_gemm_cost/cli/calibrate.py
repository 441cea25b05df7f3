"""``torch-gemm-cost calibrate``: time a GEMM sweep on the local GPU or CPU, fit a profile.

Writes ``OUT/measurements.csv`` (the measured data's schema) and ``OUT/profile.json``, which
``predict_gemm_ms``, ``estimate(..., device=...)`` and ``predict-csv --device-profile`` accept.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from . import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="measure GEMMs on the local GPU or CPU and fit a device profile",
        description="Time a designed GEMM sweep (small shapes first) for about --budget-s "
        "seconds, then fit OUT/profile.json from OUT/measurements.csv.",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--budget-s", type=float, required=True, metavar="S",
                   help="seconds to spend, timing and fitting together")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the two files")
    p.add_argument("--dtypes", metavar="LIST",
                   help="comma-separated dtypes (default: every dtype the device runs fast)")
    p.add_argument("--reps", type=int, default=7, help="timed runs per GEMM (median; default 7)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random part of the sweep")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(run=run)


class _Bar:
    """Elapsed share of the budget as a bar on stderr, redrawn at most 10 times a second."""

    def __init__(self, stream: TextIO | None = None) -> None:
        # sys.stderr looked up now, not at import: it may be redirected after the import
        self.stream = stream if stream is not None else sys.stderr
        self.last = 0.0

    def __call__(self, done: int, total: int, elapsed_s: float, budget_s: float) -> None:
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        share = min(1.0, elapsed_s / budget_s) if budget_s > 0 else 1.0
        bar = "#" * int(30 * share)
        self.stream.write(f"\rcalibrate [{bar:<30}] {elapsed_s:5.1f}/{budget_s:.0f} s, "
                          f"{done}/{total} GEMMs")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def run(args: argparse.Namespace) -> int:
    from ..calibrate import calibrate

    if not args.budget_s > 0:
        raise UsageError(f"--budget-s must be positive, got {args.budget_s}")
    if args.reps < 1:
        raise UsageError(f"--reps must be at least 1, got {args.reps}")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()] if args.dtypes else None
    bar = None if args.no_progress else _Bar()
    try:
        result = calibrate(args.device, args.budget_s, args.out, dtypes=dtypes, reps=args.reps,
                           seed=args.seed, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    fit = result.fit
    chosen = fit["holdout"][fit["chosen"]]
    print(f"{result.spec.name}: timed {result.measured} of {result.planned} GEMMs in "
          f"{result.elapsed_s:.1f} s; held-out MAPE {chosen['mape']:.1f}% "
          f"(median {chosen['median_ape']:.1f}%, {chosen['n']} GEMMs)")
    print(f"wrote {result.measurements_path} and {result.profile_path}")
    return 0
