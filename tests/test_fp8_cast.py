"""benchmarks/fp8_cast.py: the N -> 0 intercept that measures vLLM's fp8 activation cast, and
the time per row and the priced / measured ratio read from it, by hand."""

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


def test_intercept_by_hand() -> None:
    # M = 4096, K = 8192 (2^25 elements): t = 0.05 ms + 1e-5 ms per N at N = 1024, 2048, 3072
    # and 4096 (0.06024, 0.07048, 0.08072, 0.09096 ms; a second N = 4096 row of 0.10 ms makes
    # the median there 0.09548); the fifth N, 8192, is not among the four smallest.
    # Least squares through (1024, 0.06024), (2048, 0.07048), (3072, 0.08072), (4096, 0.09548):
    # mean N 2560, mean t 0.07673; dN = -1536, -512, 512, 1536 and dt = -0.01649, -0.00625,
    # 0.00399, 0.01875, so sum(dN dt) = 25.329 + 3.200 + 2.043 + 28.800 = 59.372 and
    # sum(dN^2) = 5,242,880: slope 1.1324e-5 ms per N; intercept = 0.07673 - 2560 * 1.1324e-5
    # = 0.04774 ms (the line bends up to the repeated N = 4096, so it is not 0.05).
    m, k = 4096, 8192
    ns = [1024, 2048, 3072, 4096, 4096, 8192]
    ms = [0.06024, 0.07048, 0.08072, 0.09096, 0.10000, 0.5]
    got = fp8_cast.cast_intercepts_ms([m] * 6, ns, [k] * 6, ms)
    assert list(got) == [(m, k)]
    assert got[(m, k)] == pytest.approx(0.04774, abs=1e-5)


def test_short_small_and_negative_series_are_left_out() -> None:
    # three distinct N only; a series of 2^24 - 1 elements; a line whose intercept is negative
    assert fp8_cast.cast_intercepts_ms([4096] * 3, [1, 2, 3], [8192] * 3, [1.0, 2.0, 3.0]) == {}
    small = 2**24 - 1
    assert fp8_cast.cast_intercepts_ms([small] * 4, [1, 2, 3, 4], [1] * 4, [1.0] * 4) == {}
    assert fp8_cast.cast_intercepts_ms([4096] * 4, [1, 2, 3, 4], [8192] * 4,
                                       [1.0, 3.0, 5.0, 7.0]) == {}


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
