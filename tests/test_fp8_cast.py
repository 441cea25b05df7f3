"""benchmarks/fp8_cast.py: the N -> 0 intercept that measures vLLM's fp8 activation cast, by
hand, and the rate the predictor prices."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from torch_gemm_cost.devices import get_device
from torch_gemm_cost.predict.hybrid import HybridPredictor

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


def test_priced_rate_is_the_slower_of_the_sm_side_and_dram() -> None:
    # the shipped fit's SM-side rate against the DRAM roof at 3 bytes an element:
    # L40S: 0.96 x 864 GB/s / 3 B / (142 SMs x 2.52 GHz) = 0.77 elements per SM-clock,
    # below the SM-side rate, so the DRAM roof sets it; on a B200 the SM-side rate does
    model = HybridPredictor.load(
        Path(__file__).resolve().parents[1] / "torch_gemm_cost" / "data" / "hybrid_weights.json")
    c = model.physical_constants()
    for gpu in ("l40s", "b200"):
        d = get_device(gpu)
        dram = c["eta_dram"] * d.dram_bw_bytes_per_s / 3.0 / (d.sm_count * d.boost_clock_mhz * 1e6)
        want = min(c["cast_elements_per_sm_clk"], dram)
        assert fp8_cast.priced_rate(model, d) == pytest.approx(want)
    l40s = get_device("l40s")
    assert fp8_cast.priced_rate(model, l40s) < c["cast_elements_per_sm_clk"]
    assert fp8_cast.priced_rate(model, get_device("b200")) == pytest.approx(
        c["cast_elements_per_sm_clk"])


class _Constants:
    def physical_constants(self) -> dict[str, float]:
        return {"eta_dram": 0.96, "cast_elements_per_sm_clk": 1.0}


def test_additive_rate_by_hand() -> None:
    # L40S: 142 SMs x 2.52 GHz = 3.5784e11 SM-clocks a second; 3 bytes an element at 0.96 of
    # 864 GB/s take 3 x 3.5784e11 / 8.2944e11 = 1.29427 SM-clocks an element. Measured 0.47
    # elements per SM-clock is 2.12766 SM-clocks an element, so the SM side takes 0.83339 of
    # them: 1.19992 elements per SM-clock. Measured faster than its DRAM time alone: NaN.
    l40s = get_device("l40s")
    model = _Constants()
    assert fp8_cast.additive_rate(0.47, model, l40s) == pytest.approx(1.19992, abs=1e-4)
    assert fp8_cast.additive_rate(1.0, model, l40s) != fp8_cast.additive_rate(1.0, model, l40s)
