"""Sustained compute: the issue share of SIMT SGEMMs and the clock a power-capped board holds."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from torch_gemm_cost.hardware.catalog import get_device, list_devices
from torch_gemm_cost.predict import shipped_hybrid
from torch_gemm_cost.predict.gemm.features import (
    DeviceTable,
    RowInputs,
    base_clock_share,
    simt_issue_per_lane,
)
from torch_gemm_cost.predict.gemm.power import (
    simt_issue_share,
    sustained_clock_share,
    top_clock_over_boost,
)
from torch_gemm_cost.records.types import DTYPE_NAMES, GemmBatch

DTYPE_INDEX = {name: i for i, name in enumerate(DTYPE_NAMES)}


def t(*v: float) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.float64)


def test_issue_share_by_hand() -> None:
    # H200 (GH100): 4 schedulers × 1 dispatch × 32 = 128 issue lanes for 128 FP32 lanes: 1.0.
    # A CUTLASS SIMT main loop with an 8x8 thread tile issues 64 FFMA + 4 LDS.128 + ~2 more a
    # k step: r = 6/64, so FMAs get 64 of every 70 slots = 0.914286.
    # A100 (GA100): 128 issue lanes for 64 FP32 lanes: 2.0, and 2 / (70/64) > 1: no limit.
    # P4 (GP104): 4 × 2 × 32 = 256 for 128: 2.0 as well.
    per_lane = [simt_issue_per_lane(get_device(d))
                for d in ("h200_sxm_141gb", "a100_sxm4_80gb", "tesla_p4", "mi210")]
    assert per_lane == [1.0, 2.0, 2.0, 2.0]  # AMD: unknown, taken as never binding
    share = simt_issue_share(t(*per_lane), 6.0 / 64.0)
    assert share.tolist() == pytest.approx([64.0 / 70.0, 1.0, 1.0, 1.0], rel=1e-12)


def test_base_clock_share_from_the_catalog() -> None:
    # T4: 585 MHz base, 1590 boost; L4: 795 / 2040; MI300X publishes a peak clock only
    assert base_clock_share(get_device("tesla_t4")) == pytest.approx(585 / 1590)
    assert base_clock_share(get_device("l4")) == pytest.approx(795 / 2040)
    assert math.isnan(base_clock_share(get_device("mi300x")))


def test_sustained_clock_by_hand() -> None:
    # base at half the boost clock, specified for an activity of 2, power ∝ clock^2:
    # a flat-out GEMM (activity 1) needs 1/2 · 2^2 = 2x the power limit at boost, so the clock
    # falls to 2^(-1/2) = 0.70711 of boost; with the soft knee q = 8, α = 1/γ = 1/2:
    # (1 + 2^(8/2))^(-1/8) = 17^(-0.125) = 0.70215.
    # At activity 0.25 it needs 0.5x: (1 + 0.5^4)^(-1/8) = 1.0625^(-0.125) = 0.99245.
    # An unpublished base clock (NaN) keeps the boost clock whatever the activity.
    share = sustained_clock_share(t(1.0, 0.25, 1.0), t(0.5, 0.5, float("nan")), t(2.0),
                                  gamma=2.0, q=8.0)
    assert share.tolist() == pytest.approx([17 ** -0.125, 1.0625 ** -0.125, 1.0], rel=1e-12)
    # the hard limit, large q: base/boost · (base_activity / activity)^(1/γ) = 0.5 · 2^0.5
    hard = sustained_clock_share(t(1.0), t(0.5), t(2.0), gamma=2.0, q=200.0)
    assert float(hard) == pytest.approx(0.5 * 2 ** 0.5, rel=5e-3)


def test_unpublished_base_clock_keeps_gradients_finite() -> None:
    activity = t(1.0, 1.0).requires_grad_()
    base_activity = t(3.0).requires_grad_()
    sustained_clock_share(activity, t(float("nan"), 0.37), base_activity, gamma=3.0,
                          q=8.0).sum().backward()
    assert torch.isfinite(activity.grad).all() and torch.isfinite(base_activity.grad).all()


def test_a_low_base_clock_costs_a_large_gemm_more_than_a_small_one() -> None:
    # one activity law for every board: the T4 (base 0.37 of boost) loses more clock on a GEMM
    # that keeps its SMs busy than on one that leaves them mostly idle; the A100 SXM (0.90)
    # loses next to nothing (the soft knee) at the same activity
    share = sustained_clock_share(t(1.0, 0.05, 1.0), t(585 / 1590, 585 / 1590, 1275 / 1410),
                                  t(3.4), gamma=3.0, q=8.0)
    big_t4, small_t4, a100 = share.tolist()
    assert big_t4 < small_t4 and big_t4 < 0.6 and a100 > 0.98  # 0.5526, 0.9953, 0.9898


def test_a_geforce_board_runs_above_its_rated_boost_by_hand() -> None:
    # RTX 3090 (GeForce): a tensor-core GEMM's top clock is 1695 · 1.10 = 1864.5 MHz; fp16 with
    # fp32 accumulate is 71 TFLOP/s at the rated boost, so 71 · 1.10 = 78.1 at the top clock;
    # its base clock (1395 MHz at the 350 W limit) is 1395 / 1864.5 = 0.74819 of the top one.
    # An fp32 SGEMM keeps 1695 MHz, 35.6 TFLOP/s and 1395 / 1695 = 0.82301. The A40 (a
    # datacenter GA102) keeps 1740 MHz, 149.7 TFLOP/s and 1305 / 1740 = 0.75 for both.
    assert [top_clock_over_boost(c) for c in ("geforce", "workstation", "datacenter")] == [
        1.1, 1.0, 1.0]
    table = DeviceTable.build([get_device("rtx_3090"), get_device("a40")])
    g = GemmBatch.from_dims(m=[64] * 4, n=[64] * 4, k=[64] * 4, dtype="float16")
    g = replace(g, dtype_index=torch.tensor([DTYPE_INDEX[d] for d in (
        "float16", "float32", "float16", "float32")]))
    rows = RowInputs.gather(g, table, torch.tensor([0, 0, 1, 1]), torch.zeros(4, dtype=torch.long))
    assert rows.clock_hz.tolist() == pytest.approx([1864.5e6, 1695e6, 1740e6, 1740e6], rel=1e-12)
    assert rows.peak_flops_per_s.tolist() == pytest.approx([78.1e12, 35.6e12, 149.7e12,
                                                            37.4e12], rel=1e-12)
    assert rows.base_clock_share.tolist() == pytest.approx(
        [1395 / 1864.5, 1395 / 1695, 0.75, 0.75], rel=1e-12)


def test_only_geforce_boards_move() -> None:
    # every other board's rows carry its table's clock, peaks and base-clock share bit for bit,
    # for every dtype it runs (so its predictions in tests/fixtures/predictions.json stay put)
    devices = list_devices()
    table = DeviceTable.build(devices)
    n = len(DTYPE_NAMES)
    g = GemmBatch.from_dims(m=[64] * n, n=[64] * n, k=[64] * n)
    g = replace(g, dtype_index=torch.arange(n))
    for i, d in enumerate(devices):
        rows = RowInputs.gather(g, table, torch.full((n,), i), torch.zeros(n, dtype=torch.long))
        moved = ~torch.eq(rows.peak_flops_per_s, table.peak_flops_per_s[i]) & ~torch.isnan(
            rows.peak_flops_per_s)
        clock_moved = rows.clock_hz != table.clock_hz[i]
        assert bool(moved.any()) == bool(clock_moved.any()) == (d.board_class == "geforce"), d.id


def test_the_geforce_clock_speeds_a_large_gemm_by_at_most_its_share() -> None:
    # an 8192³ fp16 Linear on an RTX 3090 is compute bound: 1.1 T FLOP at 71-78 TFLOP/s. The top
    # clock makes it faster by at most 1.10 (the MLP's device-relative inputs move a little), and
    # its physical floor is FLOPs / 78.1 TFLOP/s = 1.0995e12 / 78.1e12 s = 14.08 ms, no longer
    # the datasheet's 15.49 ms
    g = GemmBatch.from_dims(m=[8192], n=[8192], k=[8192], dtype="float16", op="linear")
    h = shipped_hybrid()
    geforce = get_device("rtx_3090")
    fast = float(h.predict(g, geforce).time_ms[0])
    rated = float(h.predict(g, replace(geforce, board_class="datacenter")).time_ms[0])
    assert 1.05 < rated / fast <= 1.10 + 1e-9
    assert fast > 2 * 8192 ** 3 / 78.1e12 * 1e3


def test_a_published_gemm_clock_by_hand() -> None:
    # a board that holds 1170 of its 2100 MHz on a flat-out GEMM (share 0.55714) keeps that at
    # activity 1; at activity 0.25, with power ∝ clock^2, it could run 0.55714 · 4^(1/2) =
    # 1.11429 of boost, so boost. The hard knee (large q) shows both; q = 8 softens them:
    # (1 + (1/0.55714)^(2·8/2))^(-1/8) = (1 + 107.9)^(-1/8) = 0.55690
    share = sustained_clock_share(t(1.0, 0.25), t(1170 / 2100), t(1.0), gamma=2.0, q=200.0)
    assert share.tolist() == pytest.approx([1170 / 2100, 1.0], rel=5e-3)
    soft = sustained_clock_share(t(1.0), t(1170 / 2100), t(1.0), gamma=2.0, q=8.0)
    assert float(soft) == pytest.approx((1 + (2100 / 1170) ** 8) ** (-1 / 8), rel=1e-12)
