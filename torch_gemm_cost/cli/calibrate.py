"""``torch-gemm-cost calibrate``: time a GEMM sweep on the local GPU or CPU, fit a profile.

Writes ``OUT/measurements.csv`` (the measured data's schema) and ``OUT/profile.json``, which
``predict_gemm_ms``, ``estimate(..., device=...)`` and ``predict-csv --device-profile`` accept.
``--host`` also times this host's eager issue costs (``calibrate.host``) into the profile; with
no ``--budget-s`` it adds them to the profile already in OUT.
"""

from __future__ import annotations

import argparse
import sys

from . import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="measure GEMMs on the local GPU or CPU and fit a device profile",
        description="Time a designed GEMM sweep (small shapes first) for about --budget-s "
        "seconds, then fit OUT/profile.json from OUT/measurements.csv.",
    )
    p.add_argument("--device", default=None,
                   help="cpu, cuda or cuda:N (default: cpu; for --host alone, cuda where "
                        "present, else cpu)")
    p.add_argument("--budget-s", type=float, metavar="S",
                   help="seconds to spend, timing and fitting together (needed unless --host "
                        "adds to the profile in OUT)")
    p.add_argument("--host", action="store_true",
                   help="also time the host's per-op issue costs (the event timing's host "
                        "side) into the profile")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the two files")
    p.add_argument("--dtypes", metavar="LIST",
                   help="comma-separated dtypes (default: every dtype the device runs fast)")
    p.add_argument("--reps", type=int, default=7, help="timed runs per GEMM (median; default 7)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random part of the sweep")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(run=run)


class _Progress:
    """The elapsed share of the budget as a tqdm bar on stderr, with the GEMMs timed so far."""

    def __init__(self, budget_s: float) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=budget_s, desc="calibrate", unit="s", file=sys.stderr,
                        bar_format="{desc} [{bar:30}] {n:5.1f}/{total:.0f} s{postfix}")

    def __call__(self, done: int, total: int, elapsed_s: float, budget_s: float) -> None:
        self.bar.set_postfix_str(f"{done}/{total} GEMMs", refresh=False)
        self.bar.update(min(elapsed_s, budget_s) - self.bar.n)  # redraws at most 10 times a second

    def close(self) -> None:
        self.bar.close()


def run(args: argparse.Namespace) -> int:
    from ..calibrate import calibrate

    if args.budget_s is None:
        if not args.host:
            raise UsageError("--budget-s is needed to time a GEMM sweep (or give --host to "
                             "add the host's costs to the profile in --out)")
        return _host_only(args)
    if not args.budget_s > 0:
        raise UsageError(f"--budget-s must be positive, got {args.budget_s}")
    if args.reps < 1:
        raise UsageError(f"--reps must be at least 1, got {args.reps}")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()] if args.dtypes else None
    bar = None if args.no_progress else _Progress(args.budget_s)
    try:
        result = calibrate(args.device or "cpu", args.budget_s, args.out, dtypes=dtypes,
                           reps=args.reps, seed=args.seed, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    fit = result.fit
    chosen = fit["holdout"][fit["chosen"]]
    print(f"{result.spec.name}: timed {result.measured} of {result.planned} GEMMs in "
          f"{result.elapsed_s:.1f} s; held-out MAPE {chosen['mape']:.1f}% "
          f"(median {chosen['median_ape']:.1f}%, {chosen['n']} GEMMs)")
    print(f"wrote {result.measurements_path} and {result.profile_path}")
    if args.host:
        _add_host(result.profile_path, args.device or "cpu")
    return 0


def _host_only(args: argparse.Namespace) -> int:
    from pathlib import Path

    path = Path(args.out) / "profile.json"
    if not path.is_file():
        raise UsageError(f"--host without --budget-s adds to {path}, which does not exist: "
                         "run calibrate with --budget-s first")
    _add_host(path, args.device)
    return 0


def _add_host(path: object, device: str | None) -> None:
    """Time the host on ``device`` (None: the local one) and write it into the profile at
    ``path``."""
    import json
    from pathlib import Path

    from ..calibrate.host import host_section, measure_host, with_host
    from ..predict.profile import load_profile, save_profile

    path = Path(str(path))
    load_profile(path)  # a profile, checked, before anything is timed
    section = host_section(measure_host(device))
    save_profile(path, with_host(json.loads(path.read_text(encoding="utf-8")), section))
    c = section["costs"]
    print(f"host on {section['device']}: {c['eager_op_ms'] * 1e3:.1f} µs per op, "
          f"{c['eager_view_ms'] * 1e3:.1f} µs per view, {c['eager_call_ms'] * 1e3:.1f} µs per "
          f"call ({section['reps']} repeats of {section['ops']}); wrote {path}")
