"""predict/cast.py: vLLM's fp8 activation cast, its time and the two latencies read off measured
N -> 0 intercepts, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from torch_gemm_cost.predict.cast import cast_intercepts_ms, cast_ms, fit_cast_latencies


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
    got = cast_intercepts_ms([m] * 6, ns, [k] * 6, ms)
    assert list(got) == [(m, k)]
    assert got[(m, k)] == pytest.approx(0.04774, abs=1e-5)


def test_short_small_and_negative_series_are_left_out() -> None:
    # three distinct N only; a series of 2^24 - 1 elements under a floor of 2^24; a line whose
    # intercept is negative
    assert cast_intercepts_ms([4096] * 3, [1, 2, 3], [8192] * 3, [1.0, 2.0, 3.0]) == {}
    small = 2**24 - 1
    assert cast_intercepts_ms([small] * 4, [1, 2, 3, 4], [1] * 4, [1.0] * 4,
                              min_elements=2**24) == {}
    assert cast_intercepts_ms([small] * 4, [1, 2, 3, 4], [1] * 4, [1.0] * 4) != {}
    assert cast_intercepts_ms([4096] * 4, [1, 2, 3, 4], [8192] * 4, [1.0, 3.0, 5.0, 7.0]) == {}


def test_cast_time_by_hand() -> None:
    # 100 SMs, 1 TB/s, 1.0 µs a CTA, 0.5 µs a further pass. 4096 rows of K = 8192: ⌈4096 / 100⌉
    # = 41 deep, ⌈8192 / 2048⌉ = 4 passes: 41 · (1.0 + 3 · 0.5) = 102.5 µs, and 3 bytes an
    # element: 3 · 33,554,432 / 1e12 s = 100.663296 µs; 0.203163296 ms. No elements: 0.
    got = cast_ms(torch.tensor([4096.0 * 8192, 0.0]), torch.tensor([8192.0, 8192.0]),
                  torch.tensor([100.0, 100.0]), torch.tensor([1e12, 1e12]),
                  torch.tensor(1.0), torch.tensor(0.5))
    assert got.tolist() == [pytest.approx(0.203163296, rel=1e-6), 0.0]


def test_latencies_read_off_two_pass_counts_by_hand() -> None:
    # one GPU of 100 SMs and 1 TB/s; M = 4096 is 41 rows deep. The cast of 1.0 µs a CTA and
    # 0.5 µs a further pass gives K = 2048 (one pass): 41 · 1.0 µs + 3 · 4096 · 2048 / 1e12 s
    # (25.165824 µs) = 0.066165824 ms, and K = 8192 (four passes): 0.203163296 ms (above).
    # Two series, two unknowns: the line goes through both, so the read is exact. M = 2048 is
    # shallower than DEEP_ROWS and does not count, whatever its time.
    series = {"gpu": {(4096, 2048): 0.066165824, (4096, 8192): 0.203163296, (2048, 8192): 9.0}}
    got = fit_cast_latencies(series, {"gpu": 100}, {"gpu": 1e12})
    assert got is not None
    assert (got.cta_us, got.pass_us) == (pytest.approx(1.0), pytest.approx(0.5))
    assert (got.series, got.gpus) == (2, ("gpu",))


def test_each_gpu_weighs_the_same() -> None:
    # GPU a holds three series read as 1.0 / 0.5 µs, GPU b one pair read as 2.0 / 1.0 µs (no
    # bytes: an infinite bandwidth). The exact fits are those; a relative least squares with
    # each GPU's series summing to one weight lands between them, not at a's values.
    def ms(depth: int, passes: int, cta: float, per_pass: float) -> float:
        return depth * (cta + (passes - 1) * per_pass) * 1e-3

    series = {
        "a": {(4096, 2048): ms(41, 1, 1.0, 0.5), (4096, 8192): ms(41, 4, 1.0, 0.5),
              (8192, 8192): ms(82, 4, 1.0, 0.5)},
        "b": {(4096, 2048): ms(41, 1, 2.0, 1.0), (4096, 8192): ms(41, 4, 2.0, 1.0)},
    }
    sms, bws = {"a": 100, "b": 100}, {"a": math.inf, "b": math.inf}
    got = fit_cast_latencies(series, sms, bws)
    assert got is not None and got.series == 5
    assert 1.0 < got.cta_us < 2.0 and 0.5 < got.pass_us < 1.0
    # series of one pass count leave the line undetermined
    one = {"a": {(4096, 2048): 0.04, (8192, 2048): 0.08}}
    assert fit_cast_latencies(one, sms, bws) is None
    assert fit_cast_latencies({}, sms, bws) is None
