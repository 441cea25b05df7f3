"""Weighted split-conformal quantiles of residual scores, on the grid of stored probabilities."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .levels import PROBS


def conformal_quantiles(scores: torch.Tensor, weights: torch.Tensor | None = None,
                        probs: Sequence[float] = PROBS) -> torch.Tensor:
    """Weighted split-conformal quantiles of ``scores`` (n,) at ``probs``, (P,).

    The quantile at p ≥ 0.5 is that of the weighted scores plus one more point at +∞ carrying
    the mean weight (the test case's), so with equal weights it is the ⌈p·(n + 1)⌉-th smallest
    score; below 0.5 the mirror image, with the point at −∞: the ⌊p·(n + 1)⌋-th smallest. A
    level the scores cannot support gives ±∞. ``weights`` default to equal.
    """
    s = scores.to(torch.float64).reshape(-1)
    n = s.shape[0]
    if n == 0:
        return torch.tensor([(-math.inf if p < 0.5 else math.inf) for p in probs],
                            dtype=torch.float64)
    w = torch.ones_like(s) if weights is None else weights.to(torch.float64).reshape(-1)
    order = torch.argsort(s)
    s, w = s[order], w[order]
    total = float(w.sum()) * (n + 1) / n  # the test point's mass is the mean weight
    below = torch.cumsum(w, 0)  # W(score ≤ s_j)
    above = torch.flip(torch.cumsum(torch.flip(w, [0]), 0), [0])  # W(score ≥ s_j)
    out = []
    for p in probs:
        if p >= 0.5:
            # smallest s_j with W(≤ s_j) ≥ p·total (a small slack for float sums)
            j = int(torch.searchsorted(below, torch.tensor(p * total * (1 - 1e-12),
                                                           dtype=torch.float64)))
            out.append(float(s[j]) if j < n else math.inf)
        else:
            # largest s_j with W(≥ s_j) ≥ (1 − p)·total
            ok = torch.nonzero(above >= (1 - p) * total * (1 - 1e-12)).flatten()
            out.append(float(s[int(ok[-1])]) if len(ok) else -math.inf)
    return torch.tensor(out, dtype=torch.float64)


def conformal_grid(scores: torch.Tensor, weights: torch.Tensor | None = None,
                   probs: Sequence[float] = PROBS) -> torch.Tensor:
    """``conformal_quantiles`` at ``probs`` (P,), with every probability the scores are too few
    for (an infinite quantile) continued as a normal tail from the outermost finite one on its
    side: Q(p) = Q(p0)·Φ⁻¹(p)/Φ⁻¹(p0). NB: that tail is an assumption, not a measurement."""
    q = conformal_quantiles(scores, weights, probs)
    p = torch.tensor(probs, dtype=torch.float64)
    normal = torch.special.ndtri(p)
    finite = torch.isfinite(q)
    for side in (p < 0.5, p > 0.5):
        ok = torch.nonzero(side & finite).flatten()
        if not len(ok):
            raise ValueError(f"{len(scores)} scores are too few for any quantile on one side "
                             f"of the median")
        outer = int(ok[0]) if bool(side[0]) else int(ok[-1])
        scale = float(q[outer] / normal[outer]) if float(normal[outer]) else 0.0
        q = torch.where(side & ~finite, normal * max(scale, 0.0), q)
    return q
