"""benchmarks/fp8_dispatch.py: vLLM's sm_89 fp8 dispatch and the one-constant bound, by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "fp8_dispatch_bench", Path(__file__).resolve().parents[1] / "benchmarks" / "fp8_dispatch.py")
assert _spec is not None and _spec.loader is not None
fp8_dispatch = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fp8_dispatch  # its dataclass looks its module up there
_spec.loader.exec_module(fp8_dispatch)
Config = fp8_dispatch.Sm89Config


@pytest.mark.parametrize(("m", "n", "label", "config"), [
    # M = 4096 is past 256; N = 5120 rounds up to N' = 8192, in (4096, 8192]: 256 x 128
    (4096, 5120, "M > 256, N' in (4096, 8192]", Config(256, 128, 64, 3)),
    # N = 4096 is its own power of two, N' <= 4096: 128 x 128, five stages
    (4096, 4096, "M > 256, N' in (0, 4096]", Config(128, 128, 64, 5)),
    # N = 10240 rounds up to 16384, past 8192: 128 x 128 again
    (4096, 10240, "M > 256, N' > 8192", Config(128, 128, 64, 5)),
    # M = 8: max(32, next_pow_2(8)) = 32, the (16, 32] bucket; N' = 4096 <= 8192
    (8, 4096, "M in (0, 32], N' in (0, 8192]", Config(32, 64, 128, 5)),
    # M = 200 rounds up to 256, in (128, 256]; N = 5000 rounds up to 8192, past 4096
    (200, 5000, "M in (128, 256], N' > 4096", Config(128, 128, 64, 5)),
    # M = 100 rounds up to 128; N = 20000 rounds up to 32768, past 16384
    (100, 20000, "M in (64, 128], N' > 16384", Config(128, 64, 128, 3)),
    # M = 64 is its own power of two, in (32, 64]; N' = 8192 is under vLLM's 8196 there
    (64, 8192, "M in (32, 64], N' in (0, 8196]", Config(64, 64, 128, 5)),
    (64, 9000, "M in (32, 64], N' in (8196, 16384]", Config(64, 128, 128, 3)),
])
def test_sm89_dispatch_by_hand(m: int, n: int, label: str, config: object) -> None:
    assert fp8_dispatch.sm89_fp8_config(m, n) == (label, config)


def test_one_factor_bound_by_hand() -> None:
    # group a: ratios 2.0 and 1.0, median 1.5 -> 1.333 and 0.667, both 1/3 off;
    # group b: 0.5 alone -> 1.0, exact. MAPE = (33.33 + 33.33 + 0) / 3 = 22.22%
    got = fp8_dispatch.one_factor_mape([2.0, 1.0, 0.5], ["a", "a", "b"])
    assert got == pytest.approx(200.0 / 9.0)
    # without groups the same ratios score (100 + 0 + 50) / 3 = 50%
    assert fp8_dispatch.mape([2.0, 1.0, 0.5]) == pytest.approx(50.0)


def test_k_buckets_are_inclusive_above() -> None:
    assert [fp8_dispatch.k_bucket(k) for k in (1024, 1025, 4096, 4097)] == [
        "K <= 1024", "K <= 4096", "K <= 4096", "K > 4096"]
