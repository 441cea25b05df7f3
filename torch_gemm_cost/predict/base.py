"""The predictor contract: a batch of GEMMs and a device in, a time per GEMM out.

Every predictor (roofline, hybrid, each ablation) implements ``Predictor.predict`` with the same
signature, so callers and benchmarks swap them in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from ..devices import DeviceSpec
from ..gemms.records import DTYPE_NAMES, GemmBatch

__all__ = ["DTYPE_NAMES", "GemmBatch", "GemmPrediction", "Predictor"]


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
