"""Predictors: GEMMs on a device in, times out. All share ``Predictor.predict``."""

from .base import GemmBatch, GemmPrediction, Predictor
from .roofline import RooflinePredictor

__all__ = ["GemmBatch", "GemmPrediction", "Predictor", "RooflinePredictor", "default_predictor"]


def default_predictor() -> Predictor:
    """The predictor ``estimate()`` uses when none is given."""
    return RooflinePredictor()
