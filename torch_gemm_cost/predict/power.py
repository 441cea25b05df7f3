"""Sustained compute under a board power limit: the clock share a GEMM keeps.

    need_W = static_W + dynamic_W · activity
    cap    = (1 + (need_W / board_W)^(q·α))^(−1/q)   →   min(1, (board_W / need_W)^α)

static_W is the board's static power at full clock (per SM-GHz in the hybrid), dynamic_W the
power of running every FLOP of its peak, and activity the share of that peak this GEMM keeps
busy. When the need exceeds the board's power the clock drops until it fits: power^α, with α
near 1/3 while voltage still scales with clock (P ∝ f·V², V ∝ f) and near 1 once voltage
sits at its floor (P ∝ f). q sets how sharp the knee is.
"""

from __future__ import annotations

import torch

__all__ = ["power_cap"]


def power_cap(need_w: torch.Tensor, board_w: torch.Tensor, *, q: torch.Tensor | float,
              alpha: torch.Tensor | float) -> torch.Tensor:
    """Share of full clock (0, 1] a board of ``board_w`` watts sustains when running at full
    clock would draw ``need_w``. Broadcasts; NaN ``board_w`` (power unknown) means no cap."""
    unknown = torch.isnan(board_w)
    # NB: a NaN in the branch torch.where drops still poisons the gradient, so unknown boards
    # get a finite stand-in before the division
    safe_w = torch.where(unknown, need_w, board_w)
    cap = (1.0 + (need_w / safe_w) ** (q * alpha)) ** (-1.0 / q)
    return torch.where(unknown, torch.ones_like(cap), cap)
