"""A sweep's YAML: the command it runs (``kind``) and one list of values per option, named as
the command line names them; every combination is one run.

    kind: llm
    hf-config: examples/llama3_8b.json
    device: [h100_sxm5_80gb, a100_sxm4_80gb, l4]
    batch: [1, 8, 64]
    prompt: [512, 2048]
    tp: [1, 2]

A bad option name is named with the nearest good one before anything runs; a bad value is the
``error`` of its own combinations.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..suggest import check_choice, unknown

__all__ = ["KINDS", "SweepSpec", "command_options", "read_sweep"]

# the commands a sweep runs, and the options it reads itself rather than passing on
KINDS = ("estimate", "llm", "serve-sim", "train-plan")
# options whose output a row cannot hold, or that only change what a command prints
_NOT_SWEPT = frozenset({"json", "csv", "plot", "html", "layers", "assumptions", "quiet",
                        "depth", "top", "help", "max-rate-under-slo"})


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep: its command, its options in the file's order with their values, and
    every combination (option -> value) in the order itertools.product walks them."""

    kind: str
    options: tuple[str, ...]
    values: Mapping[str, tuple[Any, ...]]

    def combinations(self) -> list[dict[str, Any]]:
        return [dict(zip(self.options, combo))
                for combo in itertools.product(*(self.values[o] for o in self.options))]


def command_options(kind: str) -> dict[str, argparse.Action]:
    """The options of ``torch-gemm-cost KIND`` by name without dashes ('hf-config' -> its
    action), as its own parser defines them."""
    from ..cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices[kind]
    out = {}
    for action in command._actions:
        for flag in action.option_strings:
            if flag.startswith("--"):
                out[flag[2:]] = action
    return out


def read_sweep(path: str | Path) -> SweepSpec:
    """The sweep a YAML file describes; a ValueError names what is wrong and the nearest good
    spelling."""
    try:
        import yaml
    except ImportError:
        raise ValueError("sweep files are YAML: pip install pyyaml (from a checkout of "
                         "torch_gemm_cost: pip install -e '.[sweep]')"
                         ) from None
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"sweep file {str(path)!r}: no such file")
    try:
        doc = yaml.safe_load(file.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"sweep file {path}: not valid YAML ({e})") from e
    if not isinstance(doc, dict):  # the file's content: a ValueError, as for any bad value
        raise ValueError(f"sweep file {path}: a mapping of options is expected, e.g. "  # noqa: TRY004
                         "'kind: llm' and 'batch: [1, 8]'")
    return parse_sweep(doc, str(path))


def parse_sweep(doc: Mapping[str, Any], where: str = "sweep") -> SweepSpec:
    """``read_sweep`` of an already loaded mapping."""
    if "kind" not in doc:
        raise ValueError(f"{where}: no 'kind'; one of {', '.join(KINDS)}")
    kind = check_choice("sweep kind", str(doc["kind"]), KINDS)
    known = command_options(kind)
    good = sorted(k for k in known if k not in _NOT_SWEPT)
    options, values = [], {}
    for key, value in doc.items():
        if key == "kind":
            continue
        name = str(key).lstrip("-").replace("_", "-")
        if name not in good:
            raise ValueError(f"{where}: {unknown(f'option of {kind}', key, good)}")
        seq = tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) \
            else (value,)
        if not seq:
            raise ValueError(f"{where}: option {key!r} has no values; give one or a list")
        options.append(name)
        values[name] = seq
    return SweepSpec(kind, tuple(options), values)


def argv_of(kind: str, combo: Mapping[str, Any]) -> list[str]:
    """The command line of one combination: ``[kind, --option, value, ...]``; a flag (an
    option without a value) is given where its value is true."""
    known = command_options(kind)
    argv = [kind]
    for name, value in combo.items():
        action = known[name]
        if action.nargs == 0:  # a flag
            if value:
                argv.append(f"--{name}")
            continue
        argv += [f"--{name}", str(value)]
    return argv
