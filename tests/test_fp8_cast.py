"""benchmarks/fp8_cast.py: the time per row and the priced / measured ratio read from the N -> 0
intercepts that measure vLLM's fp8 activation cast (predict/cast.py), by hand."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "fp8_cast_bench", Path(__file__).resolve().parents[1] / "benchmarks" / "fp8_cast.py"
)
assert _spec is not None and _spec.loader is not None
fp8_cast = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fp8_cast)


def test_time_per_row_an_sm_works_through_by_hand() -> None:
    # 148 SMs: M = 8192 is ⌈8192 / 148⌉ = 56 rows deep, so 0.0582 ms is 1.03929 µs a row; K =
    # 2048 is one pass of 256 threads x 8 elements and K = 2049 two. M = 4095 is below the depth
    # the table keeps (4096).
    got = fp8_cast.us_per_row({(8192, 2048): 0.0582, (8192, 2049): 0.0900,
                               (4095, 2048): 0.03}, 148)
    assert sorted(got) == [1, 2]
    assert got[1] == [pytest.approx(1.039286, abs=1e-6)]
    assert got[2] == [pytest.approx(0.0900 * 1e3 / 56)]


def test_median_ratio_over_shared_series() -> None:
    # priced / measured over the series both hold: 1.0, 1.2, 1.4, 1.6 (the fifth is measured
    # only); quartiles by statistics.quantiles' exclusive method: 1.05, 1.3, 1.55
    measured = {(1, 1): 1.0, (1, 2): 1.0, (1, 3): 1.0, (1, 4): 1.0, (1, 5): 1.0}
    priced = {(1, 1): 1.0, (1, 2): 1.2, (1, 3): 1.4, (1, 4): 1.6}
    q2, q1, q3, count = fp8_cast.median_ratio(priced, measured)
    assert count == 4
    assert (q2, q1, q3) == (pytest.approx(1.3), pytest.approx(1.05), pytest.approx(1.55))
    # fewer than four shared series: no figure
    assert math.isnan(fp8_cast.median_ratio({(1, 1): 1.0}, measured)[0])
