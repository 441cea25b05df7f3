"""The model contract: a typed batch and a device in, one ``Prediction`` out.

Every model implements ``predict(batch, device) -> Prediction`` on its own batch record: the GEMM
predictors (roofline, hybrid, each ablation, a calibrated device's own: ``Predictor``) on a
``GemmBatch``, the attention model on an ``AttentionBatch``, the op cost model on an ``OpBatch``.
A ``Prediction`` is the same record whichever model made it, so callers swap
predictors in one line and read times, intervals and what bounds each item alike.

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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import torch

from ..hardware.catalog import DeviceSpec
from ..records.types import DTYPE_NAMES, GemmBatch

__all__ = [
    "BOUNDS",
    "DTYPE_NAMES",
    "Estimator",
    "GemmBatch",
    "Model",
    "Prediction",
    "Predictor",
    "bound_of",
    "inv_softplus",
    "predict_distinct",
]

if TYPE_CHECKING:
    from typing import Self  # Python 3.11; only type checkers read it


# what limits an item's time: its arithmetic, its memory traffic, or fixed per-kernel costs
BOUNDS: tuple[str, ...] = ("compute", "memory", "latency")


@dataclass(frozen=True)
class Prediction:
    """Predicted time of each of N items (GEMMs, attention calls, ops), with what explains it.

    ``time_ms`` (N,); ``lo_ms`` and ``hi_ms`` (N,): the model's calibrated interval at
    ``intervals.DEFAULT_LEVEL`` of the measured time, both None where the model carries no
    calibration. ``bound``: per item, one of ``BOUNDS``; empty where the model does not say.
    ``kernel``: per item, the kernel it was priced as, where the model names one; else empty.
    ``details``: the model's intermediates, name -> (N,) tensor (waves, FLOPs, bytes, ...).
    """

    time_ms: torch.Tensor
    lo_ms: torch.Tensor | None = None
    hi_ms: torch.Tensor | None = None
    bound: tuple[str, ...] = ()
    kernel: tuple[str, ...] = ()
    details: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.time_ms.dim() != 1:
            raise ValueError(f"time_ms must be one time per item, shape (N,); got shape "
                             f"{tuple(self.time_ms.shape)}")
        n = len(self.time_ms)
        if (self.lo_ms is None) != (self.hi_ms is None):
            raise ValueError("an interval needs both lo_ms and hi_ms (or neither)")
        shapes = {"lo_ms": self.lo_ms, "hi_ms": self.hi_ms, **{
            f"details[{k!r}]": v for k, v in self.details.items()}}
        for name, t in shapes.items():
            if t is not None and tuple(t.shape) != (n,):
                raise ValueError(f"{name} has shape {tuple(t.shape)}; expected ({n},), one "
                                 "value per item as time_ms")
        for name, labels in (("bound", self.bound), ("kernel", self.kernel)):
            if labels and len(labels) != n:
                raise ValueError(f"{name} names {len(labels)} items; expected {n} (or none)")
        unknown = sorted(set(self.bound) - set(BOUNDS))
        if unknown:
            raise ValueError(f"bound {unknown[0]!r} is not one of {BOUNDS}")

    def __len__(self) -> int:
        return len(self.time_ms)

    def select(self, index: torch.Tensor) -> Prediction:
        """The items at ``index`` (integer positions, repeats allowed), in that order."""
        idx = index.tolist()
        return Prediction(
            time_ms=self.time_ms[index],
            lo_ms=None if self.lo_ms is None else self.lo_ms[index],
            hi_ms=None if self.hi_ms is None else self.hi_ms[index],
            bound=tuple(self.bound[i] for i in idx) if self.bound else (),
            kernel=tuple(self.kernel[i] for i in idx) if self.kernel else (),
            details={k: v[index] for k, v in self.details.items()},
        )

    def times_or_none(self) -> list[float | None]:
        """Each item's time in ms, None where the model prices none (NaN: an op it does not
        model)."""
        return [None if math.isnan(t) else t for t in self.time_ms.tolist()]


def bound_of(compute_ms: torch.Tensor, memory_ms: torch.Tensor,
             latency_ms: torch.Tensor | None = None) -> tuple[str, ...]:
    """Per item the largest of its compute, memory and (if given) latency times, as
    ``BOUNDS`` names them; a tie goes to the earlier (compute before memory)."""
    parts = [compute_ms, memory_ms] + ([] if latency_ms is None else [latency_ms])
    which = torch.stack(parts, dim=1).argmax(dim=1)  # (N,)
    return tuple(BOUNDS[i] for i in which.tolist())


_Batch_contra = TypeVar("_Batch_contra", contravariant=True)


@runtime_checkable
class Model(Protocol[_Batch_contra]):
    """Any model: its typed batch and a device in, one ``Prediction`` out."""

    def predict(self, batch: _Batch_contra, device: DeviceSpec, /) -> Prediction: ...


@runtime_checkable
class Predictor(Model[GemmBatch], Protocol):
    """Anything that turns GEMMs on a device into times, named and versioned (a report says
    which predictor priced it)."""

    name: str
    version: str

    def predict(self, gemms: GemmBatch, device: DeviceSpec) -> Prediction: ...


def predict_distinct(predictor: Model[GemmBatch], gemms: GemmBatch, device: DeviceSpec
                     ) -> Prediction:
    """``predictor.predict(gemms, device)``, each distinct GEMM predicted once: a predictor
    prices every GEMM on its own, so repeats (an RNN's steps, a model's identical layers) take
    the first one's prediction. The result has one item per GEMM of ``gemms``, in order."""
    if len(gemms) < 2:
        return predictor.predict(gemms, device)
    rows = torch.stack([getattr(gemms, f.name).to(torch.float64)
                        for f in fields(GemmBatch)], dim=1)  # (N, fields)
    seen: dict[tuple[float, ...], int] = {}
    inverse = [seen.setdefault(row, len(seen)) for row in map(tuple, rows.tolist())]
    if len(seen) == len(gemms):
        return predictor.predict(gemms, device)
    first = [0] * len(seen)
    for i, j in reversed(list(enumerate(inverse))):
        first[j] = i
    return predictor.predict(gemms.select(torch.tensor(first)), device).select(
        torch.tensor(inverse))


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
