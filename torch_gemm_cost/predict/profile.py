"""Calibration profiles: a device's spec and the predictor fitted to it, in one JSON file.

``torch-gemm-cost calibrate`` writes them. Every entry point that takes a device reads one
through ``target.resolve_target`` and, when it prices, builds its predictor with
``profile_predictor``. JSON only (never pickle), checked entry by entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..hardware.catalog import DeviceSpec, spec_to_record
from ..hardware.datasheet import PROFILE_FORMAT, PROFILE_VERSION
from ..hardware.target import Target, profile_spec
from .base import Estimator, Predictor
from .gemm.calibrated import CalibratedPredictor
from .gemm.hybrid import HybridPredictor
from .intervals import IntervalCalibration

__all__ = ["FORMAT", "PREDICTOR_KINDS", "VERSION", "load_profile", "make_profile",
           "profile_predictor", "save_profile"]

FORMAT = PROFILE_FORMAT  # the content that tells a profile from a spec file
VERSION = PROFILE_VERSION
PREDICTOR_KINDS: tuple[str, ...] = ("calibrated", "hybrid")


def _predictor_record(predictor: Predictor) -> dict[str, Any]:
    if isinstance(predictor, CalibratedPredictor):
        return predictor.to_dict()  # {"kind": "calibrated", ...}
    if isinstance(predictor, HybridPredictor):
        return {"kind": "hybrid", "weights": predictor.to_dict()}
    raise TypeError(f"a profile stores a calibrated or a hybrid predictor, got {predictor!r}")


def _predictor_from_record(doc: Any) -> Predictor:
    kind = doc.get("kind") if isinstance(doc, Mapping) else None
    if kind == "calibrated":
        return CalibratedPredictor.from_dict(doc)
    if kind == "hybrid":
        weights = doc["weights"]
        got = weights.get("version") if isinstance(weights, Mapping) else None
        if str(got) != HybridPredictor.version:
            # the profile's device still stands, but its weights are another model's
            raise ValueError(
                f"its hybrid weights are version {got}, this predictor reads version "
                f"{HybridPredictor.version}: run `torch-gemm-cost calibrate` again")
        return HybridPredictor.from_dict(weights)
    raise ValueError(f"predictor kind is {kind!r}; known: {', '.join(PREDICTOR_KINDS)}")


def make_profile(spec: DeviceSpec, predictor: Predictor, **sections: Any) -> dict[str, Any]:
    """The profile document of ``spec`` and its fitted ``predictor``; ``sections`` (the fit's
    scores, the calibration run) are stored beside them as they are."""
    return {"format": FORMAT, "version": VERSION, "device": spec_to_record(spec),
            "predictor": _predictor_record(predictor), **sections}


def save_profile(path: str | Path, profile: Mapping[str, Any]) -> Path:
    """Write a profile document as JSON."""
    path = Path(path)
    path.write_text(json.dumps(profile, indent=1) + "\n", encoding="utf-8")
    return path


def load_profile(path: str | Path) -> tuple[DeviceSpec, Predictor]:
    """The device spec and fitted predictor of a calibration profile written by
    ``torch-gemm-cost calibrate``. A missing file raises FileNotFoundError, anything malformed
    a ValueError that names the file and the bad entry."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"calibration profile {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"calibration profile {str(path)!r} cannot be read: {e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"calibration profile {str(path)!r} is not valid JSON: {e}") from None
    return profile_spec(doc, path), _predictor_of_document(doc,
                                                           f"calibration profile {str(path)!r}")


def profile_predictor(target: Target) -> Predictor | None:
    """The predictor the target's calibration profile brings; None for any other device."""
    if target.profile is None:
        return None
    return _predictor_of_document(target.profile, f"calibration {target.source}")


def _predictor_of_document(doc: Mapping[str, Any], where: str) -> Predictor:
    """The fitted predictor of a profile document whose device ``profile_spec`` has checked."""
    try:
        predictor = _predictor_from_record(doc["predictor"])
        if "intervals" in doc and isinstance(predictor, Estimator):
            # the device's own cross-validated residuals set its intervals
            predictor.own_intervals_ = IntervalCalibration.from_dict(doc["intervals"])
        return predictor
    except (KeyError, TypeError, ValueError) as e:
        detail = f"missing {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"{where} is invalid: {detail}") from None
