"""The interval of a sum of GEMMs (a layer, a whole model): a shared level term plus independent
per-GEMM terms weighted by each GEMM's share of the time (the package docstring), and the term
of fully correlated calls."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .bounds import quantile_at
from .levels import PROBS, check_level

_Z80 = 1.2815515655446004  # the standard normal's 0.9 quantile: Q(0.9) − Q(0.1) = 2·z·sd


def spread_of(log_q: torch.Tensor, probs: Sequence[float] = PROBS
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each GEMM's (median, normal-equivalent sd) of its log residual, (N,) each: the median
    and (Q(0.9) − Q(0.1)) / (2·1.2816)."""
    med = quantile_at(log_q, 0.5, probs)
    sd = (quantile_at(log_q, 0.9, probs) - quantile_at(log_q, 0.1, probs)) / (2 * _Z80)
    return med, sd


def comonotonic_sum(time_ms: torch.Tensor, log_q: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """One term for a sum of fully correlated times (M,) with residual quantiles (M, P): its
    time (1,) and quantiles (1, P). Quantiles of comonotonic variables add, so the sum's
    quantile at p is Σ t_i·e^Q_i(p), and its log residual quantile log(Σ t_i·e^Q_i(p) / Σ t_i).

    >>> t = torch.tensor([1.0, 3.0]); q = torch.log(torch.tensor([[0.5, 2.0], [1.0, 1.0]]))
    >>> [round(float(v), 4) for v in torch.exp(comonotonic_sum(t, q)[1][0])]
    [0.875, 1.25]
    """
    total = time_ms.to(torch.float64).sum()
    summed = (time_ms.to(torch.float64).unsqueeze(1) * torch.exp(log_q)).sum(0)  # (P,)
    return total.reshape(1), torch.log(summed / total).unsqueeze(0)


def center_and_sigma(time_ms: torch.Tensor, log_q: torch.Tensor, other_ms: float | torch.Tensor,
                     level_sigma: float, probs: Sequence[float] = PROBS) -> tuple[float, float]:
    """(μ, σ) of the log residual of a sum of GEMMs (N,) plus ``other_ms``: μ the shift their
    median residuals give the total, σ² = level_sigma² + Σ_i w_i² s_i² with w_i each GEMM's
    share of the total and s_i its residual's sd (``spread_of``)."""
    total = float(time_ms.sum()) + float(other_ms)
    if not len(time_ms):
        return 0.0, float(level_sigma)
    med, sd = spread_of(log_q, probs)
    w = time_ms / total  # (N,) each GEMM's share of the time
    mu = math.log((float((time_ms * torch.exp(med)).sum()) + float(other_ms)) / total)
    return mu, math.sqrt(level_sigma ** 2 + float((w * w * sd * sd).sum()))


def propagate(time_ms: torch.Tensor, log_q: torch.Tensor, other_ms: float | torch.Tensor,
              level_sigma: float, total_z: torch.Tensor, level: float,
              probs: Sequence[float] = PROBS) -> tuple[float, float]:
    """(lo, hi) of a sum of GEMMs (N,) with residual quantiles (N, P), plus ``other_ms`` of
    non-GEMM ops, at ``level``: a shared level term of sd ``level_sigma`` and independent
    per-GEMM terms (the package docstring), scaled by the whole-model quantiles ``total_z`` (P,)."""
    a = 1.0 - check_level(level)
    total = float(time_ms.sum()) + float(other_ms)
    if total <= 0.0:
        return 0.0, 0.0
    mu, sigma = center_and_sigma(time_ms, log_q, other_ms, level_sigma, probs)
    z = total_z.to(torch.float64)
    z_lo = min(float(quantile_at(z, a / 2, probs)), 0.0)
    z_hi = max(float(quantile_at(z, 1.0 - a / 2, probs)), 0.0)
    lo = total * math.exp(min(mu + z_lo * sigma, 0.0))
    hi = total * math.exp(max(mu + z_hi * sigma, 0.0))
    return lo, hi
