"""The fitted files the package ships (``data/*.json``): one place that knows them, reads each
once and checks what it holds.

Each file names its ``format`` (what it holds) and ``version`` (which model it was fitted for).
``check_format`` is the one check every reader runs, shipped file or not: a file of another
format, or of a version the model no longer reads, raises an error naming what it holds, what
is expected and the command that refits it. ``load_shipped`` reads a shipped file through its
model's ``from_dict`` and keeps the result (models are read once per process).

The device catalog (``data/devices.json``) is read by ``devices``, before any model exists,
and is not a fitted file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any, TypeVar

from .base import read_fitted

__all__ = ["SHIPPED", "ShippedFile", "check_format", "load_file", "load_shipped", "shipped_path",
           "shipped_versions"]


@dataclass(frozen=True)
class ShippedFile:
    """One shipped file: its ``path`` under the package, ``what`` it holds (for messages), its
    ``format`` and the command that ``refit``s it."""

    path: str
    what: str
    format: str
    refit: str


SHIPPED: Mapping[str, ShippedFile] = {
    "hybrid": ShippedFile("data/hybrid_weights.json", "hybrid GEMM weights",
                          "torch_gemm_cost.hybrid",
                          "torch-gemm-cost train --data DATA --out W.json"),
    "attention": ShippedFile("data/attention_weights.json", "attention weights",
                             "torch_gemm_cost.attention",
                             "python -m torch_gemm_cost.train.attention"),
    "collectives": ShippedFile("data/collective_weights.json", "collective weights",
                               "torch_gemm_cost.collectives",
                               "python -m torch_gemm_cost.train.collectives"),
    "op_costs": ShippedFile("data/op_costs.json", "op cost table", "torch_gemm_cost.op_costs",
                            "python -m torch_gemm_cost.train.ops"),
    "host_costs": ShippedFile("data/host_costs.json", "host cost table",
                              "torch_gemm_cost.host_costs",
                              "python -m torch_gemm_cost.train.host"),
    "gemm_intervals": ShippedFile("data/gemm_intervals.json", "GEMM interval calibration",
                                  "torch_gemm_cost.intervals",
                                  "python -m torch_gemm_cost.train.intervals"),
}

_Model = TypeVar("_Model")


def _entry(name: str) -> ShippedFile:
    if name not in SHIPPED:
        raise ValueError(f"no shipped file {name!r}; known: {', '.join(SHIPPED)}")
    return SHIPPED[name]


def check_format(doc: Any, name: str, version: str | int) -> None:
    """Raise a ValueError unless ``doc`` (a parsed JSON file) holds ``SHIPPED[name]``'s format
    at ``version``, the one its reader reads. The message says what the file holds, what was
    expected and how to refit it."""
    entry = _entry(name)
    got_format = doc.get("format") if isinstance(doc, Mapping) else type(doc).__name__
    got_version = doc.get("version") if isinstance(doc, Mapping) else None
    if got_format != entry.format or str(got_version) != str(version):
        raise ValueError(f"version {got_version} weights of format {got_format!r}; this "
                         f"package reads version {version} of format {entry.format!r} "
                         f"(refit: {entry.refit})")


def shipped_path(name: str) -> Traversable:
    """Where shipped file ``name`` lives in the package (it may be absent in a checkout)."""
    return resources.files("torch_gemm_cost").joinpath(_entry(name).path)


def shipped_versions() -> dict[str, tuple[str, str]]:
    """Each shipped file's (format, version) as the file states them, by its name in
    ``SHIPPED``; ("missing", "") for a file this installation lacks, ("unreadable", "") for one
    that is no JSON object."""
    out = {}
    for name in SHIPPED:
        try:
            doc = json.loads(shipped_path(name).read_text())
        except FileNotFoundError:
            out[name] = ("missing", "")
            continue
        except (json.JSONDecodeError, UnicodeDecodeError):
            doc = None
        if isinstance(doc, Mapping):
            out[name] = (str(doc.get("format")), str(doc.get("version")))
        else:
            out[name] = ("unreadable", "")
    return out


@cache
def load_shipped(name: str, from_dict: Callable[[Any], _Model]) -> _Model:
    """Shipped file ``name`` read through ``from_dict`` (which runs ``check_format``), once
    per process. A missing, corrupt or mismatched file raises an error naming it."""
    with resources.as_file(shipped_path(name)) as real:
        return load_file(name, real, from_dict)


def load_file(name: str, path: str | Path, from_dict: Callable[[Any], _Model]) -> _Model:
    """A file of shipped kind ``name`` at ``path`` (a copy, a refit), read as ``load_shipped``
    reads the shipped one, uncached."""
    entry = _entry(name)
    return read_fitted(path, entry.what, entry.format, from_dict)
