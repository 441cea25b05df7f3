"""The levels an interval is asked at, and the grid of probabilities every stored quantile is
read off."""

from __future__ import annotations

import math
from typing import Any

DEFAULT_LEVEL = 0.8

# the probabilities whose residual quantiles are stored: levels 0.1 to 0.99 read off them
PROBS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
    0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.975, 0.99, 0.995,
)
MIN_LEVEL, MAX_LEVEL = 0.1, 0.99


def check_level(level: Any, name: str = "interval") -> float:
    """``level`` as a coverage in [0.1, 0.99], or a ValueError naming it and the nearest good
    value (``interval=80`` -> did you mean 0.8?)."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or math.isnan(level):
        raise ValueError(f"{name} must be a coverage in (0, 1) such as 0.8, got {level!r}")
    level = float(level)
    if not 0.0 < level < 1.0:
        hint = f"; did you mean {level / 100:g}?" if 1.0 < level < 100.0 else "; try 0.8"
        raise ValueError(f"{name} must be a coverage in (0, 1), got {level:g}{hint}")
    if not MIN_LEVEL <= level <= MAX_LEVEL:
        nearest = min(max(level, MIN_LEVEL), MAX_LEVEL)
        raise ValueError(
            f"{name} = {level:g} is outside the levels the calibration supports "
            f"[{MIN_LEVEL:g}, {MAX_LEVEL:g}]; nearest: {nearest:g}")
    return level
