"""The predictor contract: a batch of GEMMs and a device in, a time per GEMM out.

Every predictor (roofline, hybrid, each ablation, a calibrated device's own) implements
``Predictor.predict`` with the same signature, so callers and benchmarks swap them in one line.

A predictor fitted to measurements is also an ``Estimator``, scikit-learn's contract:
``__init__`` stores hyperparameters, ``get_params`` returns them and ``set_params`` changes
them (both checked by the constructor), ``fit(measured, warm_start=False)`` fits to a
``MeasuredGemms`` and returns self, and fitted state has a trailing ``_``. Randomness comes from
a ``seed`` hyperparameter.
"""

from __future__ import annotations

import inspect
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import torch

from ..devices import DeviceSpec
from ..gemms.records import DTYPE_NAMES, GemmBatch

__all__ = [
    "DTYPE_NAMES",
    "Estimator",
    "GemmBatch",
    "GemmPrediction",
    "Predictor",
    "inv_softplus",
]

if TYPE_CHECKING:
    from typing import Self  # Python 3.11; only type checkers read it


@dataclass(frozen=True)
class GemmPrediction:
    """Predicted time per GEMM, with the intermediates that explain it."""

    time_ms: torch.Tensor  # (N,)
    compute_bound: torch.Tensor  # (N,) bool
    details: Mapping[str, torch.Tensor] = field(default_factory=dict)  # name -> (N,)


@runtime_checkable
class Predictor(Protocol):
    """Anything that turns GEMMs on a device into times."""

    name: str
    version: str

    def predict(self, gemms: GemmBatch, device: DeviceSpec) -> GemmPrediction: ...


class Estimator:
    """The fitting half of the contract (see the module docstring); subclasses implement
    ``fit(measured, *, warm_start=False) -> self``."""

    # the interval calibration of the one device it was fitted to (a calibration profile's,
    # ``predict/intervals.py``); None for a predictor of many devices
    own_intervals_: Any = None

    def get_params(self) -> dict[str, Any]:
        """The hyperparameters: every keyword of ``__init__``, as stored."""
        return {name: getattr(self, name) for name in inspect.signature(type(self)).parameters}

    def set_params(self, **params: Any) -> Self:
        """Change hyperparameters; fitted state stays. The constructor checks the new set, and
        what it derives from them is derived again. Returns self."""
        current = self.get_params()
        unknown = sorted(set(params) - set(current))
        if unknown:
            raise ValueError(f"unknown hyperparameter(s) {', '.join(map(repr, unknown))} of "
                             f"{type(self).__name__}; known: {', '.join(current)}")
        fresh = type(self)(**{**current, **params})
        for name, value in vars(fresh).items():
            if not name.endswith("_"):
                setattr(self, name, value)
        return self


def inv_softplus(x: float) -> float:
    """The raw parameter whose softplus is ``x`` (> 0): log(eˣ − 1).

    >>> round(float(torch.nn.functional.softplus(torch.tensor(inv_softplus(2.0)))), 6)
    2.0
    """
    return math.log(math.expm1(x))


_Fitted = TypeVar("_Fitted")


def read_fitted(path: str | os.PathLike[str], what: str, fmt: str,
                from_dict: Callable[[Any], _Fitted]) -> _Fitted:
    """A fitted model from the JSON file ``save`` wrote, through ``from_dict``. A missing file
    raises FileNotFoundError, a corrupt or mismatched one a ValueError; both name the file as
    ``what`` (e.g. "weights file") and, for a mismatch, the ``fmt`` expected."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{what} {path} is not valid JSON: {e}") from None
    try:
        return from_dict(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{what} {path} is not a {fmt} file: {e}") from None
