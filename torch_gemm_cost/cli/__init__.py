"""The ``torch-gemm-cost`` command line. Each subcommand lives in its own module of this package
and exposes ``register(subparsers)``; the parser sets ``args.run`` to the function to call."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["UsageError", "main"]

# module name in this package -> registered in this order
SUBCOMMANDS: tuple[str, ...] = ("devices", "estimate", "llm", "serve_sim", "sweep", "predict_csv",
                                 "train", "calibrate")


class UsageError(Exception):
    """Bad arguments or input files: exit code 2, one line on stderr, no traceback."""


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


class _Parser(argparse.ArgumentParser):
    """Argument errors are one line on stderr and exit code 2, never a usage dump."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="torch-gemm-cost",
        description="Predict where a model's GPU time goes, GEMM by GEMM, before running it.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log diagnostics to stderr")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s: %(message)s"
    )
    try:
        return int(args.run(args) or 0)
    except (UsageError, ValueError, FileNotFoundError) as e:
        print(f"torch-gemm-cost {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # an internal error: one line, the traceback only with -v
        logging.getLogger(__name__).debug("internal error", exc_info=True)
        hint = "" if args.verbose else " (run with -v for the traceback)"
        print(
            f"torch-gemm-cost {args.command}: internal error: {type(e).__name__}: {e}{hint}",
            file=sys.stderr,
        )
        return 1
