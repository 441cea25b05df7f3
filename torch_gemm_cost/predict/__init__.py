"""Predictors: GEMMs on a device in, times out. All share ``Predictor.predict``."""

from __future__ import annotations

import logging
from functools import lru_cache
from importlib import resources

from ..gemms.records import GemmBatch
from .base import GemmPrediction, Predictor
from .hybrid import HybridPredictor
from .roofline import RooflinePredictor

__all__ = [
    "GemmBatch",
    "GemmPrediction",
    "HybridPredictor",
    "Predictor",
    "RooflinePredictor",
    "default_predictor",
    "shipped_hybrid",
    "shipped_weights_path",
]

log = logging.getLogger(__name__)

WEIGHTS_FILE = "data/hybrid_weights.json"


def shipped_weights_path():  # -> importlib.resources.abc.Traversable
    """Where the package's trained hybrid weights live (they may be absent in a dev checkout)."""
    return resources.files("torch_gemm_cost").joinpath(WEIGHTS_FILE)


@lru_cache(maxsize=1)
def _shipped() -> Predictor:
    path = shipped_weights_path()
    if not path.is_file():
        log.warning("no shipped hybrid weights at %s; falling back to the roofline", path)
        return RooflinePredictor()
    with resources.as_file(path) as real:
        return HybridPredictor.load(real)


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
