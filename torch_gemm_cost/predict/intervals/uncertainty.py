"""What a report needs to give an interval at any level, for the GEMMs a predictor priced on a
device: the calibration that covers that predictor, each GEMM's quantiles and the whole-model
terms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ...hardware.catalog import DeviceSpec
from ...records.types import GemmBatch
from .attention import AttentionIntervals
from .bounds import bounds
from .calibration import IntervalCalibration, default_calibration
from .cases import gemm_cases, novelty_of
from .levels import DEFAULT_LEVEL, PROBS
from .totals import comonotonic_sum, propagate


@dataclass(frozen=True)
class ReportUncertainty:
    """What a report needs to give an interval at any level: each GEMM's log-residual
    quantiles (N, P), their physical floors (N,), the shared level term and the whole-model
    quantiles, and which novelty class they come from."""

    novelty: str
    gemm_log_q: torch.Tensor = field(compare=False)  # (N, P)
    floor_ms: torch.Tensor = field(compare=False)  # (N,)
    level_sigma: float
    total_z: torch.Tensor = field(compare=False)  # (P,)
    probs: tuple[float, ...] = PROBS
    # the fused-attention kernels' own calibration, where the device runs them (None: their
    # time enters a total as exact)
    attention: AttentionIntervals | None = field(default=None, compare=False)

    def gemm_bounds(self, time_ms: torch.Tensor, level: float,
                    index: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(lo, hi) of the GEMMs at ``index`` (all by default) with times ``time_ms``."""
        q = self.gemm_log_q if index is None else self.gemm_log_q[index]
        floor = self.floor_ms if index is None else self.floor_ms[index]
        return bounds(time_ms, q, level, floor, self.probs)

    def total_bounds(self, time_ms: torch.Tensor, other_ms: float, level: float,
                     index: torch.Tensor | None = None,
                     attention_ms: torch.Tensor | None = None,
                     attention_decode: torch.Tensor | None = None) -> tuple[float, float]:
        """(lo, hi) of the GEMMs at ``index`` (times ``time_ms``) plus ``other_ms`` of other
        ops, and fused-attention kernels of times ``attention_ms`` (M,) and phases
        ``attention_decode`` (M,), which ``other_ms`` leaves out: with ``attention``, one term
        of their summed time, its quantiles those of comonotonic calls (``comonotonic_sum``:
        one kernel on one GPU errs the same way in every layer), beside the GEMMs'; without
        it, their time counts as exact."""
        q = self.gemm_log_q if index is None else self.gemm_log_q[index]
        t = time_ms.to(torch.float64)
        if attention_ms is not None and len(attention_ms) and float(attention_ms.sum()) > 0:
            att = attention_ms.to(torch.float64)
            if self.attention is None:
                other_ms = other_ms + float(att.sum())
            elif tuple(self.attention.probs) != tuple(self.probs):
                raise ValueError("the attention intervals' probabilities differ from the GEMM "
                                 "calibration's; refit one of them on PROBS")
            else:
                decode = (torch.zeros_like(att) if attention_decode is None
                          else attention_decode)
                a_t, a_q = comonotonic_sum(att, self.attention.log_quantiles(att, decode))
                t, q = torch.cat([t, a_t]), torch.cat([q.to(torch.float64), a_q])
        return propagate(t, q, other_ms, self.level_sigma, self.total_z, level, self.probs)


def _source(device: DeviceSpec, predictor: Any, novelty: str | None
            ) -> tuple[IntervalCalibration, str] | None:
    """The calibration and novelty class for ``predictor`` on ``device``: a calibration
    profile's own residuals where the predictor carries them, else the shipped calibration when
    it was made for this predictor (its name and version), else None."""
    own = getattr(predictor, "own_intervals_", None)
    if isinstance(own, IntervalCalibration) and novelty in (None, "calibrated"):
        return own, "calibrated"
    cal = default_calibration()
    if cal is None:
        return None
    made_for = (cal.predictor.get("name"), cal.predictor.get("version"))
    if made_for != (getattr(predictor, "name", None), str(getattr(predictor, "version", ""))):
        return None  # calibrated on another predictor's residuals: no honest interval
    if novelty is None:
        trained = (getattr(predictor, "metadata_", None) or {}).get("trained_gpus")
        novelty = novelty_of(device, trained)
    if not cal.has(novelty):
        raise ValueError(f"the interval calibration has no {novelty!r} class; it has: "
                         f"{', '.join(sorted({b['novelty'] for b in cal.buckets}))}")
    return cal, novelty


def uncertainty_of(gemms: GemmBatch, device: DeviceSpec, predictor: Any,
                   novelty: str | None = None) -> ReportUncertainty | None:
    """The intervals' inputs for GEMMs priced by ``predictor`` on ``device``; None where no
    calibration covers that predictor (the roofline, an ablation, other weights' versions).
    ``novelty`` overrides the class ``novelty_of`` finds (a device from a spec file is
    ``spec_file`` whatever its id)."""
    found = _source(device, predictor, novelty)
    if found is None:
        return None
    cal, cls = found
    cases = gemm_cases(gemms, device)
    return ReportUncertainty(novelty=cls, gemm_log_q=cal.gemm_log_quantiles(cases, cls),
                             floor_ms=cases.floor_ms,
                             level_sigma=cal.level_sigma_of(cls), total_z=cal.total_z,
                             probs=cal.probs)


def gemm_interval(gemms: GemmBatch, device: DeviceSpec, predictor: Any, time_ms: torch.Tensor
                  ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(lo, hi) at ``DEFAULT_LEVEL`` of GEMMs that ``predictor`` priced at ``time_ms`` (N,) on
    ``device``, (N,) each; (None, None) where no calibration covers that predictor
    (``uncertainty_of``)."""
    unc = uncertainty_of(gemms, device, predictor)
    if unc is None:
        return None, None
    return unc.gemm_bounds(time_ms.to(torch.float64), DEFAULT_LEVEL)
