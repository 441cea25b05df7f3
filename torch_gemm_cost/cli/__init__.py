"""The ``torch-gemm-cost`` command line. Each subcommand lives in its own module of this package
and exposes ``register(subparsers)``; the parser sets ``args.run`` to the function to call.

Exit codes: 0 done; 2 bad arguments or input files (``UsageError``), or an exception in the
user's own code, a builder or a model (``UserCodeError``), said as theirs; 1 an internal error.
Each is one line on stderr; ``-v`` adds the traceback."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import sysconfig
import traceback
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["UsageError", "UserCodeError", "add_network_options", "main", "network_kwargs",
           "raised_at", "version_text"]

# module name in this package -> registered in this order
SUBCOMMANDS: tuple[str, ...] = ("devices", "estimate", "llm", "serve_sim", "sweep", "train_plan",
                               "predict_csv", "train", "calibrate", "calibrate_comm")


class UsageError(Exception):
    """Bad arguments or input files: exit code 2, one line on stderr, no traceback."""


class UserCodeError(UsageError):
    """An exception raised in the user's own code (their builder, their model): exit code 2,
    one line that names their function and file, the traceback with ``-v``."""


# code that is not the user's: this package, torch, installed packages, the standard library
_NOT_USERS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
              *(sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "purelib", "platlib")))


def raised_at(e: BaseException) -> str | None:
    """Where ``e`` was raised in the user's code: "function at file:line" of the innermost frame
    outside this package, installed packages and the standard library; None if none is."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not os.path.abspath(f.filename).startswith(_NOT_USERS)]
    return f"{frames[-1].name} at {frames[-1].filename}:{frames[-1].lineno}" if frames else None


def version_text() -> str:
    """The package's version and the versions of the fitted files it ships."""
    from .. import __version__
    from ..predict.registry import SHIPPED, shipped_versions

    lines = [f"torch-gemm-cost {__version__}", "shipped weights and constants:"]
    for name, (fmt, version) in shipped_versions().items():
        stated = f"{fmt} version {version}" if version else fmt
        lines.append(f"  {SHIPPED[name].what}: {stated} ({SHIPPED[name].path})")
    return "\n".join(lines)


class _Version(argparse.Action):
    """``--version``: the versions, read only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(version_text())
        parser.exit(0)


def config_file(flag: str, path: str) -> Path:
    """The config JSON that ``flag`` names: the file, or ``config.json`` in the directory."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    if not file.is_file():
        raise UsageError(f"{flag} {path}: no such file")
    return file


def read_config(flag: str, path: str) -> dict[str, Any]:
    """The JSON object of the config that ``flag`` names (``config_file``)."""
    file = config_file(flag, path)
    try:
        raw = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise UsageError(f"{flag} {path}: not valid JSON ({e.msg} at line {e.lineno})") from e
    if not isinstance(raw, dict):
        raise UsageError(f"{flag} {path}: not a JSON object")
    return raw


def add_network_options(p: argparse.ArgumentParser) -> None:
    """What a user states about the cluster's network, where no --comm-profile measures it
    (``predict.comm_host``); shared by train-plan, llm and serve-sim."""
    p.add_argument("--comm-host", default="fitted", metavar="CLASS",
                   help="the host class pricing the collectives no --comm-profile covers: "
                        "fitted (default: the shipped fit, from one cloud A100 cluster whose "
                        "network delivered about a fifth of a DGX A100's 8x 200 Gb/s) or "
                        "reference "
                        "(NCCL's own tuning constants at 0.8 of each link's datasheet "
                        "bandwidth, as a reference-architecture DGX/HGX cluster with GPUDirect "
                        "RDMA on every NIC runs)")
    p.add_argument("--nic-gbps", type=float, default=None, metavar="GBPS",
                   help="each NIC's speed in Gb/s (e.g. 200 for HDR, 400 for NDR), restating "
                        "the device record's network (its usual node's)")
    p.add_argument("--nics-per-node", type=int, default=None, metavar="N",
                   help="NICs a node with --nic-gbps (default: one a GPU)")


def network_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``add_network_options`` for the planners."""
    return {"comm_host": args.comm_host, "nics_per_node": args.nics_per_node,
            "nic_gbps": args.nic_gbps}


class _Parser(argparse.ArgumentParser):
    """Argument errors are one line on stderr and exit code 2, never a usage dump."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="torch-gemm-cost",
        description="Predict where a model's GPU time goes, GEMM by GEMM, before running it.",
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log diagnostics to stderr, and an error's traceback")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print the package's version and its shipped weights' versions")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            continue
        module.register(sub)
    for command in sub.choices.values():  # -v after the subcommand too
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="log diagnostics to stderr, and an error's traceback")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s: %(message)s"
    )
    log = logging.getLogger(__name__)
    hint = "" if args.verbose else " (run with -v for the traceback)"
    try:
        return int(args.run(args) or 0)
    except UserCodeError as e:  # theirs: one line, the traceback (through their code) with -v
        log.debug("the error in your code", exc_info=True)
        print(f"torch-gemm-cost {args.command}: error in your code: {e}{hint}", file=sys.stderr)
        return 2
    except (UsageError, ValueError, FileNotFoundError) as e:
        log.debug("the error", exc_info=True)
        print(f"torch-gemm-cost {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # an internal error: one line, the traceback only with -v
        log.debug("internal error", exc_info=True)
        print(
            f"torch-gemm-cost {args.command}: internal error: {type(e).__name__}: "
            f"{_summary(e)}{hint}",
            file=sys.stderr,
        )
        return 1


def _summary(e: BaseException) -> str:
    """An internal error's message; a capture error's without the API's options it suggests,
    which a command that takes none cannot use."""
    from ..capture.core import CaptureError

    return e.summary if isinstance(e, CaptureError) else str(e)
