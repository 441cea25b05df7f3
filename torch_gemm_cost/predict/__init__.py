"""Predictors: a batch on a device in, times out. Every model shares ``Model.predict`` and
returns a ``Prediction``; the GEMM predictors are ``Predictor``s, and the shipped fitted files
are read through ``registry``."""

from __future__ import annotations

import logging
from importlib.abc import Traversable

from ..records.types import GemmBatch
from .base import Model, Prediction, Predictor
from .gemm.hybrid import HybridPredictor
from .gemm.roofline import RooflinePredictor
from .registry import load_shipped, shipped_path

__all__ = [
    "GemmBatch",
    "HybridPredictor",
    "Model",
    "Prediction",
    "Predictor",
    "RooflinePredictor",
    "default_predictor",
    "shipped_hybrid",
    "shipped_weights_path",
]

log = logging.getLogger(__name__)


def shipped_weights_path() -> Traversable:
    """Where the package's trained hybrid weights live (they may be absent in a dev checkout)."""
    return shipped_path("hybrid")


def _shipped() -> Predictor:
    path = shipped_weights_path()
    if not path.is_file():
        log.warning("no shipped hybrid weights at %s; falling back to the roofline", path)
        return RooflinePredictor()
    return load_shipped("hybrid", HybridPredictor.from_dict)


def default_predictor() -> Predictor:
    """The predictor ``estimate()`` uses when none is given: the hybrid with shipped weights."""
    return _shipped()


def shipped_hybrid() -> HybridPredictor:
    """The shipped hybrid itself, for what only it does (``predict_measured``, ``explain``,
    its fitted metadata); a FileNotFoundError where the package holds no weights."""
    predictor = _shipped()
    if not isinstance(predictor, HybridPredictor):
        raise FileNotFoundError(f"no shipped hybrid weights at {shipped_weights_path()}; "
                                "train them with `torch-gemm-cost train`")
    return predictor
