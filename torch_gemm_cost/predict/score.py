"""How far predicted times fall from measured ones: absolute percentage errors, summarised.

Training and calibration score predictors with these, so a MAPE means the same everywhere: the
mean of |predicted − measured| / measured over the rows, as a fraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ErrorSummary", "absolute_percentage_errors", "summarize_errors"]


@dataclass(frozen=True)
class ErrorSummary:
    """Errors of ``rows`` predictions (fractions: 0.1 is 10%)."""

    rows: int
    mape: float  # mean |pred − meas| / meas
    median_ape: float  # the lower median, as torch.median takes it
    within_10: float  # share of rows with APE ≤ 10%
    within_25: float

    def in_percent(self) -> dict[str, Any]:
        """``n``, ``mape`` and ``median_ape`` in %, and the shares within 10% and 25%."""
        return {"n": self.rows, "mape": 100.0 * self.mape, "median_ape": 100.0 * self.median_ape,
                "within_10": self.within_10, "within_25": self.within_25}


def absolute_percentage_errors(pred_ms: torch.Tensor, meas_ms: torch.Tensor) -> torch.Tensor:
    """|pred − meas| / meas per row, (N,); a fraction, not in %."""
    return (pred_ms - meas_ms).abs() / meas_ms


def summarize_errors(pred_ms: torch.Tensor, meas_ms: torch.Tensor) -> ErrorSummary:
    """The errors of predictions against measurements; rows whose error is not finite (a NaN
    prediction) are left out, and no row at all gives NaN rates.

    >>> s = summarize_errors(torch.tensor([1.05, 2.0, 3.6]), torch.tensor([1.0, 2.0, 3.0]))
    >>> s.rows, round(s.mape, 4), round(s.median_ape, 4), round(s.within_10, 4), s.within_25
    (3, 0.0833, 0.05, 0.6667, 1.0)
    """
    ape = absolute_percentage_errors(pred_ms, meas_ms)
    ape = ape[torch.isfinite(ape)]
    if len(ape) == 0:
        nan = float("nan")
        return ErrorSummary(0, nan, nan, nan, nan)
    return ErrorSummary(rows=len(ape), mape=float(ape.mean()), median_ape=float(ape.median()),
                        within_10=float((ape <= 0.10).double().mean()),
                        within_25=float((ape <= 0.25).double().mean()))
