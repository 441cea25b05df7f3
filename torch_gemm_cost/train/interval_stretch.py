"""The stretch of a class unlike any GPU in the fit (``predict.intervals.UNLIKE``).

A GPU of a vendor generation, a board class or a spec file the fit never saw has no held-out
residuals of its kind to calibrate on (one MI300X, one GeForce board). The rule, stated once and
fitted on every chip held out: such a GPU takes the family-unseen quantiles stretched about
their median by the largest stretch any held-out GPU needed for its 80% interval, read off the
family-unseen quantiles of a calibration that left its chip out, to cover 80% of its GEMMs. It
is covered as well as the worst-covered GPU of the fit would have been; no GPU's stretch is
tuned on that GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch

from ..predict.intervals import PROBS, quantile_at

__all__ = ["STRETCH_LEVEL", "stretch_needed", "unlike_stretch"]

STRETCH_LEVEL = 0.8  # the level whose coverage the stretch restores


def stretch_needed(log_ratio: torch.Tensor, log_q: torch.Tensor, level: float = STRETCH_LEVEL,
                   probs: Sequence[float] = PROBS) -> float:
    """The smallest stretch s ≥ 1 of the quantiles ``log_q`` (M, P) about their median under
    which the interval at ``level`` holds a share ``level`` of the residuals ``log_ratio`` (M,).

    With median m and tail quantiles q_lo, q_hi, the interval is [min(m + s·(q_lo − m), 0),
    max(m + s·(q_hi − m), 0)] (``bounds``: the prediction is always inside), so a residual r
    above both 0 and m is inside from s = (r − m) / (q_hi − m) on, one below both from
    (m − r) / (m − q_lo), any other at every s; the stretch is the ⌈level·M⌉-th smallest of those, at least 1. NB: the physical floor that
    ``bounds`` puts under lo is not applied; it only moves lo up to a time no GEMM beats.
    """
    r = log_ratio.to(torch.float64).reshape(-1)
    if r.shape[0] == 0 or log_q.shape[0] != r.shape[0]:
        raise ValueError(f"{r.shape[0]} residuals against {log_q.shape[0]} quantile rows: "
                         "they must be the same rows, at least one")
    a = 1.0 - level
    m = quantile_at(log_q, 0.5, probs)
    q_lo, q_hi = quantile_at(log_q, a / 2, probs), quantile_at(log_q, 1.0 - a / 2, probs)
    inf = torch.full_like(r, float("inf"))
    up = torch.where(r <= m, 0.0, torch.where(q_hi > m, (r - m) / (q_hi - m).clamp(min=1e-12),
                                               inf))
    down = torch.where(r >= m, 0.0, torch.where(q_lo < m, (m - r) / (m - q_lo).clamp(min=1e-12),
                                                 inf))
    # a residual above 0 needs hi ≥ r, one below needs lo ≤ r, 0 is always inside
    s = torch.where(r > 0, up, torch.where(r < 0, down, 0.0))
    k = max(1, math.ceil(level * r.shape[0] - 1e-9))  # ⌈level·M⌉, float products eased
    return max(1.0, float(torch.kthvalue(s, k).values))


def unlike_stretch(residuals_of: Mapping[str, torch.Tensor],
                   quantiles_of: Callable[[str], torch.Tensor],
                   level: float = STRETCH_LEVEL) -> tuple[float, dict[str, float]]:
    """The stretch of the unlike classes, the largest any held-out GPU needed, and each GPU's:
    ``residuals_of[gpu]`` its held-out residuals (M,), ``quantiles_of(gpu)`` their family-unseen
    quantiles (M, P) from a calibration that left its chip out."""
    if not residuals_of:
        raise ValueError("no held-out GPU to fit the stretch on")
    need = {g: stretch_needed(r, quantiles_of(g), level) for g, r in residuals_of.items()}
    return max(need.values()), need
