"""An interval read off a grid of residual quantiles: the quantile at any probability, and each
predicted time's (lo, hi) at a level."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import torch

from .levels import PROBS, check_level


def quantile_at(log_q: torch.Tensor, p: float, probs: Sequence[float] = PROBS) -> torch.Tensor:
    """Column p of a (..., P) grid of quantiles at ``probs``, linear between grid points."""
    j = bisect.bisect_left(list(probs), p)
    if j < len(probs) and abs(probs[j] - p) < 1e-12:
        return log_q[..., j]
    if j == 0 or j == len(probs):
        raise ValueError(f"probability {p} lies outside the stored grid "
                         f"[{probs[0]}, {probs[-1]}]")
    t = (p - probs[j - 1]) / (probs[j] - probs[j - 1])
    return log_q[..., j - 1] * (1 - t) + log_q[..., j] * t


def bounds(time_ms: torch.Tensor, log_q: torch.Tensor, level: float,
           floor_ms: torch.Tensor | None = None,
           probs: Sequence[float] = PROBS) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) of each predicted time (N,) at ``level`` from its residual quantiles (N, P).

    lo ≤ time ≤ hi always (a bucket whose quantiles both sit above zero still keeps the
    prediction inside), and lo never falls below the physical floor where one is given.
    """
    a = 1.0 - check_level(level)
    q_lo = quantile_at(log_q, a / 2, probs).clamp(max=0.0)  # (N,)
    q_hi = quantile_at(log_q, 1.0 - a / 2, probs).clamp(min=0.0)
    lo = time_ms * torch.exp(q_lo)
    if floor_ms is not None:
        lo = torch.minimum(torch.maximum(lo, floor_ms), time_ms)
    return lo, time_ms * torch.exp(q_hi)
