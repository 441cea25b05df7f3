"""``torch-gemm-cost calibrate-comm``: nccl-tests logs read into a collective profile.

    torch-gemm-cost calibrate-comm all_reduce_perf.txt all_gather_perf.txt --out comm.json

The profile prices the collectives it measured in ``train-plan --comm-profile`` (and in
``predict_collective_ms(..., comm_profile=)``); the collective model prices the rest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate-comm",
        help="read nccl-tests logs into a collective profile (JSON) for train-plan",
        description="Read the logs of nccl-tests (all_reduce_perf, all_gather_perf, "
        "reduce_scatter_perf, alltoall_perf, sendrecv_perf) into a collective profile: each "
        "test's bus bandwidth per message size, for its GPU count and GPUs per node.",
    )
    p.add_argument("logs", nargs="+", metavar="LOG", help="nccl-tests output, one test each")
    p.add_argument("--out", required=True, metavar="PATH", help="the profile to write (JSON)")
    p.add_argument("--collective", default=None,
                   help="the test of logs that do not name it (e.g. all_reduce)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..measured.nccl_tests import read_nccl_tests
    from ..trainplan.text import format_comm_profile

    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: directory {out.parent} does not exist")
    profile = read_nccl_tests(args.logs, collective=args.collective)
    profile.save(out)
    print(format_comm_profile(profile))
    print(f"written to {out}", file=sys.stderr)
    return 0
