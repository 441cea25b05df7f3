"""Fit a calibrated device's predictor: candidates fitted on most of the sweep, scored on the
rest, the best refitted on all of it and stored with the device's spec as a profile."""

from __future__ import annotations

import logging
from dataclasses import replace
from importlib import resources
from typing import Any

import torch

from ..hardware.catalog import DeviceSpec, is_cpu
from ..hardware.dtypes import DTYPES
from ..measured.gemm import MeasuredGemms
from ..predict import shipped_weights_path
from ..predict.gemm.calibrated import CalibratedPredictor
from ..predict.gemm.hybrid import HybridPredictor
from ..predict.intervals import default_calibration, own_calibration
from ..predict.profile import make_profile
from ..predict.score import summarize_errors
from .timing import PREDICTOR_TIMING, SOURCE

__all__ = ["fit_profile"]

log = logging.getLogger(__name__)


def _tile_candidates(spec: DeviceSpec) -> tuple[tuple[int, int], ...]:
    """(Tn, block) candidates: register blocking along n on a CPU, CTA tiles on a GPU."""
    if is_cpu(spec):
        return ((1, 64), (16, 64), (32, 64))
    return ((64, 64), (128, 128), (256, 128))


def _split(n: int, share: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    cut = max(1, round(n * share)) if n >= 10 else 0
    return perm[cut:], perm[:cut]


def _measured_spec(spec: DeviceSpec, data: MeasuredGemms) -> DeviceSpec:
    """``spec`` with any dtype peak the measurements beat (or lack) raised to the best measured
    rate, so no measured row looks faster than physics (nominal clocks understate boost)."""
    peaks = dict(spec.peak_flops)
    names = data.gemms.dtype_names()
    raised = []
    for dt in dict.fromkeys(names):
        sel = torch.tensor([x == dt for x in names])
        best = float((data.gemms.flops[sel] / (data.latency_ms[sel] * 1e-3)).max())
        key = DTYPES[dt].peak_key
        if dt == "float32" and spec.peak("fp32_matrix"):
            key = "fp32_matrix"
        current = peaks.get(key)
        if current is None or not current > best:
            peaks[key] = best * 1.05
            raised.append(key)
    if not raised:
        return spec
    return replace(spec, peak_flops=tuple(sorted(peaks.items())),
                   uncertain=tuple(dict.fromkeys((*spec.uncertain, "peak_flops"))),
                   notes=(*spec.notes, (f"peaks {', '.join(raised)} raised to 1.05x the best "
                                        "measured rate")))


def _on_device(data: MeasuredGemms, spec: DeviceSpec) -> MeasuredGemms:
    """``data`` as calibration rows of ``spec``, a device the catalog may lack, each with the
    launch overhead of its timer (``PREDICTOR_TIMING``)."""
    return replace(data.on_device(spec), source=(SOURCE,) * len(data),
                   timing=tuple(PREDICTOR_TIMING.get(t, t) for t in data.timing))


def _shipped_hybrid(steps: int, seed: int) -> HybridPredictor | None:
    """The hybrid predictor with the package's shipped weights, or None where there are none."""
    path = shipped_weights_path()
    if not path.is_file():
        return None
    with resources.as_file(path) as real:
        return HybridPredictor.load(real).set_params(steps=steps, seed=seed,
                                                     default_timing="event")


def _candidates(spec: DeviceSpec, seed: int, steps: int,
                hybrid_steps: int) -> dict[str, CalibratedPredictor | HybridPredictor]:
    """Unfitted candidates by name: the shipped hybrid (where weights ship and
    ``hybrid_steps`` > 0), and ``CalibratedPredictor`` at each register/CTA tile."""
    out: dict[str, CalibratedPredictor | HybridPredictor] = {}
    hybrid = _shipped_hybrid(hybrid_steps, seed) if hybrid_steps > 0 else None
    if hybrid is not None:
        out["hybrid"] = hybrid
    for tn, block in _tile_candidates(spec):
        out[f"calibrated_n{tn}"] = CalibratedPredictor(tile_n=tn, block=block, steps=steps,
                                                       seed=seed)
    return out


def fit_profile(spec: DeviceSpec, data: MeasuredGemms, *, seed: int = 0, holdout: float = 0.2,
                steps: int = 600, hybrid_steps: int = 100) -> dict[str, Any]:
    """Fit the profile's predictor to ``data``, one device's measured rows, and return the
    profile document.

    Candidates are fitted on a seeded 80% of the rows and scored on the rest: the hybrid
    predictor fine-tuned from the shipped weights (``hybrid_steps`` Adam steps; skipped where
    no weights ship) and ``CalibratedPredictor`` at each register/CTA tile (``steps``). The
    candidate with the lowest held-out median APE is fine-tuned on all rows (a third of its
    steps) and kept. Its residuals on the held-out rows set the device's own intervals
    (``predict/intervals.own_calibration``), narrower than a catalog device's where it fits well.
    """
    spec = _measured_spec(spec, data)
    rows = _on_device(data, spec)
    train_idx, val_idx = _split(len(rows), holdout, seed)
    train = rows.select(train_idx)
    val = rows.select(val_idx) if len(val_idx) else train
    candidates = _candidates(spec, seed, steps, hybrid_steps)
    scores: dict[str, dict[str, float]] = {}
    held_out: dict[str, torch.Tensor] = {}  # name -> log(measured / predicted) on val
    for name, candidate in candidates.items():
        # warm: the hybrid starts from the shipped weights, a calibrated candidate from nothing
        candidate.fit(train, warm_start=True)
        pred_ms = candidate.predict(val.gemms, spec).time_ms
        held_out[name] = torch.log(val.latency_ms / pred_ms)
        scores[name] = summarize_errors(pred_ms, val.latency_ms).in_percent()
        log.info("%s: held-out MAPE %.1f%%, median %.1f%%", name, scores[name]["mape"],
                 scores[name]["median_ape"])
    # by median APE: a mean would rank candidates on the few rows that other jobs stalled
    chosen = min(scores, key=lambda name: (scores[name]["median_ape"], scores[name]["mape"]))
    model = candidates[chosen]
    full_steps = model.get_params()["steps"]
    model.set_params(steps=max(1, full_steps // 3)).fit(rows, warm_start=True)
    model.set_params(steps=full_steps)
    shipped = default_calibration()
    intervals = own_calibration(
        held_out[chosen], None if shipped is None else shipped.total_z,
        metadata={"residuals": f"{chosen} fitted on {len(train_idx)} rows, scored on the "
                               f"{len(val_idx) or len(rows)} held out"
                               + ("" if len(val_idx) else " (too few rows to hold any out: "
                                  "in-sample)")})
    return make_profile(spec, model, intervals=intervals.to_dict(), fit={
        "rows": len(rows), "holdout_rows": len(val_idx), "timing": ", ".join(sorted(
            set(data.timing))), "holdout": scores, "chosen": chosen,
        "train_all": summarize_errors(model.predict(rows.gemms, spec).time_ms,
                                      rows.latency_ms).in_percent(),
        "constants": model.physical_constants(),
    })
