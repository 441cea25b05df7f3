"""``torch-gemm-cost sweep``: one command over every combination of a YAML file's option values.

    torch-gemm-cost sweep sweep.yaml --out results.csv [--workers 2] [--ray]
        [--pareto pareto.png --pareto-x gpus --pareto-y tpot_ms]
"""

from __future__ import annotations

import argparse
import sys
import time

from . import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run estimate, llm, serve-sim or train-plan over every combination of a YAML's options",
        description="The YAML names the command (kind: estimate, llm, serve-sim or train-plan) and a value "
        "or a list of values per option, spelled as the command line spells them (hf-config, "
        "device, dtype, batch, seq, prompt, gen, tp, ...). Every combination is one row: the "
        "options, the command's figures, and an error column for combinations it refuses.",
    )
    p.add_argument("spec", metavar="SWEEP.yaml", help="the sweep file")
    p.add_argument("--out", required=True, metavar="PATH",
                   help="results: .csv, or .parquet (needs pyarrow)")
    p.add_argument("--workers", type=int, default=None,
                   help="local worker processes (default: one per CPU; 1: no pool)")
    p.add_argument("--ray", action="store_true", help="run the calls as Ray tasks (the ray extra)")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="join a running Ray cluster (implies --ray)")
    p.add_argument("--pareto", metavar="PNG", help="plot --pareto-y against --pareto-x")
    p.add_argument("--pareto-x", default="gpus", help="a figure or option column (default gpus)")
    p.add_argument("--pareto-y", default=None,
                   help="default: tpot_ms (llm), total_ms (estimate), tpot_p50_ms (serve-sim)")
    p.set_defaults(run=run)


PARETO_Y = {"llm": "tpot_ms", "estimate": "total_ms", "serve-sim": "tpot_p50_ms",
            "train-plan": "step_ms"}


def run(args: argparse.Namespace) -> int:
    from ..sweep import plot_pareto, read_sweep, run_sweep, write_rows
    from ..sweep.run import columns

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}; try --workers 1")
    spec = read_sweep(args.spec)
    started = time.perf_counter()
    rows = run_sweep(spec, workers=args.workers, ray=args.ray, ray_address=args.ray_address)
    cols = columns(spec.kind, rows, spec.options)
    out = write_rows(rows, args.out, cols)
    errors = sum(1 for r in rows if r.get("error"))
    print(f"{len(rows)} rows ({errors} with an error) in {time.perf_counter() - started:.1f} s "
          f"written to {out}", file=sys.stderr)
    if args.pareto:
        y = args.pareto_y or PARETO_Y[spec.kind]
        for c in (args.pareto_x, y):
            if c not in cols:
                from ..suggest import unknown

                raise UsageError(unknown("column", c, cols))
        plot_pareto(rows, args.pareto_x, y, args.pareto, title=f"{spec.kind} sweep")
        print(f"Pareto plot written to {args.pareto}", file=sys.stderr)
    return 0
