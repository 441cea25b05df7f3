"""``torch-gemm-cost train``: fit the hybrid GEMM predictor on measured data and write weights."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="fit the hybrid GEMM predictor on measured GEMMs and write its weights (JSON)",
    )
    p.add_argument("--data", default="../shared/data",
                   help="measured data directory holding gemm/*.csv.gz (default: ../shared/data)")
    p.add_argument("--out", required=True, help="weights file to write (JSON)")
    p.add_argument("--own-data", metavar="DIR", action="append", default=None,
                   help="also train on the GEMMs measured into DIR/gemm (repeatable; default: "
                        "this checkout's benchmarks/data/h200; 'none' for none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None, help="Adam steps (default: the model's)")
    p.add_argument("--warm-start", metavar="W", default=None,
                   help="fine-tune from these weights instead of a fresh init")
    p.add_argument("--op-costs-out", default=None,
                   help="where to write the fitted non-GEMM op costs "
                        "(default: op_costs.json beside --out)")
    p.add_argument("--skip-ops", action="store_true", help="do not fit the non-GEMM op costs")
    p.add_argument("--held-out-metrics", metavar="JSON", default=None,
                   help="held-out scores to record in the weights' metadata (the summary "
                        "benchmarks/accuracy.py writes beside its report)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..measured.gemm import DEFAULT_OWN_DIRS, load_all_gemms
    from ..predict.gemm.hybrid import HybridPredictor
    from ..train.gemm import train_gemm_predictor
    from . import UsageError

    data = Path(args.data)
    if not (data / "gemm").is_dir():
        raise UsageError(f"--data {data}: no gemm/ directory with measured GEMMs there")
    own = DEFAULT_OWN_DIRS if args.own_data is None else tuple(
        Path(d) for d in args.own_data if d != "none")
    for d in own:
        if not (Path(d) / "gemm").is_dir():
            raise UsageError(f"--own-data {d}: no gemm/ directory with measured GEMMs there")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: directory {out.parent} does not exist")
    command = "torch-gemm-cost " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    hyper = {} if args.steps is None else {"steps": args.steps}
    if args.warm_start:
        model = HybridPredictor.load(args.warm_start).set_params(**hyper)
        model.fit(load_all_gemms(data, own), warm_start=True).set_metadata(
            {**model.metadata_, "training_command": command,
             "warm_start_from": str(args.warm_start)})
    else:
        model = train_gemm_predictor(data, own_dirs=own, seed=args.seed, command=command,
                                     **hyper)
    if args.held_out_metrics:
        try:
            held = json.loads(Path(args.held_out_metrics).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(f"--held-out-metrics {args.held_out_metrics}: {e}") from None
        metrics = {**model.metadata_.get("metrics", {}), "held_out": held}
        model.set_metadata({**model.metadata_, "metrics": metrics})
    model.save(out)
    log.info("wrote %s", out)
    if not args.skip_ops:
        try:
            from ..train.ops import fit_op_costs
        except ImportError:
            return 0
        ops_out = Path(args.op_costs_out) if args.op_costs_out else out.with_name("op_costs.json")
        ops_out.write_text(json.dumps(fit_op_costs(data, own_dirs=own), indent=1) + "\n")
        log.info("wrote %s", ops_out)
    return 0
