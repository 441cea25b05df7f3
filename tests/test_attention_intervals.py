"""Intervals of the fused-attention model: hand-worked bounds and buckets, coverage of a
synthetic predictor with known noise on a GPU left out of the calibration, and the shipped
calibration's bounds (finite, ordered, deterministic, saved and loaded whole)."""

from __future__ import annotations

import math

import pytest
import torch

from torch_gemm_cost.measured.attention import MeasuredAttention
from torch_gemm_cost.predict.attention import AttentionBatch, AttentionCall, AttentionPredictor
from torch_gemm_cost.predict.intervals import PROBS, AttentionIntervals
from torch_gemm_cost.train.attention import fit_attention_intervals


def by_hand() -> AttentionIntervals:
    # every quantile linear in the probability: Q(p) = a + b·(p − 0.5); decode's 0.01-0.1 ms
    # bucket a = 0.05, b = 1.0; prefill's pooled bucket a = 0, b = 0.5
    def grid(a: float, b: float) -> list[float]:
        return [a + b * (p - 0.5) for p in PROBS]

    return AttentionIntervals(PROBS, (("decode", "0.01-0.1ms"), ("prefill", None)),
                              torch.tensor([grid(0.05, 1.0), grid(0.0, 0.5)],
                                           dtype=torch.float64))


def test_bounds_by_hand_and_a_thin_phase_borrows_its_pooled_bucket() -> None:
    cal = by_hand()
    t = torch.tensor([0.05, 2.0], dtype=torch.float64)
    lo, hi = cal.bounds(t, torch.tensor([1.0, 0.0]), 0.8)
    # decode at 0.05 ms: Q(0.1) = 0.05 − 0.4 = −0.35, Q(0.9) = 0.05 + 0.4 = 0.45
    assert lo[0].item() == pytest.approx(0.05 * math.exp(-0.35))
    assert hi[0].item() == pytest.approx(0.05 * math.exp(0.45))
    # prefill at 2 ms has no ">=1ms" bucket: its phase's pooled one, ±0.5·0.4 = ±0.2
    assert lo[1].item() == pytest.approx(2.0 * math.exp(-0.2))
    assert hi[1].item() == pytest.approx(2.0 * math.exp(0.2))
    # a decode with no bucket of its size and no pooled decode bucket is refused by name
    with pytest.raises(ValueError, match="no bucket for decode"):
        cal.bounds(torch.tensor([5.0]), torch.tensor([1.0]), 0.8)


def test_round_trip_and_bad_buckets_are_refused() -> None:
    cal = by_hand()
    back = AttentionIntervals.from_dict(cal.to_dict())
    assert back.buckets == cal.buckets
    assert torch.allclose(back.log_q, cal.log_q, atol=1e-6)
    doc = cal.to_dict()
    doc["buckets"][0]["size"] = "0.01-1ms"
    with pytest.raises(ValueError, match="size one of"):
        AttentionIntervals.from_dict(doc)


def synthetic(gpus: list[str], n: int, sigma: float, seed: int) -> tuple[MeasuredAttention,
                                                                          torch.Tensor]:
    """n decode calls a GPU, each measured at 0.3 ms (mid-decade: the noise never moves a
    prediction to another size bucket), predicted 0.3 ms · exp(N(0, sigma))."""
    gen = torch.Generator().manual_seed(seed)
    calls = AttentionBatch.from_calls(
        [AttentionCall("decode", 1, 1, 1024, 8, 8, 128)] * (n * len(gpus)))
    measured = MeasuredAttention(calls=calls, gpu=tuple(g for g in gpus for _ in range(n)),
                                 kernel=("",) * (n * len(gpus)),
                                 kv_dtype=("bfloat16",) * (n * len(gpus)),
                                 latency_ms=torch.full((n * len(gpus),), 0.3,
                                                       dtype=torch.float64))
    pred = 0.3 * torch.exp(sigma * torch.randn(n * len(gpus), generator=gen, dtype=torch.float64))
    return measured, pred


def test_a_gpu_left_out_is_covered_at_the_nominal_level() -> None:
    # four GPUs with the same noise calibrate; a fifth, never seen, is covered about 80% of
    # the time by the 80% interval, whose width is about exp(2 · 1.2816 · 0.1) = 1.292
    measured, pred = synthetic(["g0", "g1", "g2", "g3"], 2000, 0.1, seed=0)
    cal = fit_attention_intervals(measured, pred)
    new, new_pred = synthetic(["g4"], 4000, 0.1, seed=1)
    lo, hi = cal.bounds(new_pred, new.calls.decode, 0.8)
    covered = ((new.latency_ms >= lo) & (new.latency_ms <= hi)).double().mean().item()
    assert covered == pytest.approx(0.8, abs=0.03)
    assert (hi / lo).median().item() == pytest.approx(math.exp(2 * 1.2816 * 0.1), rel=0.05)


def test_shipped_bounds_are_finite_ordered_and_deterministic(tmp_path) -> None:
    model = AttentionPredictor.shipped()
    calls = [AttentionCall("prefill", 4, 2048, 2048, 32, 8, 128),
             AttentionCall("decode", 64, 1, 4096, 32, 8, 128),
             AttentionCall("decode", 1, 1, 16, 8, 8, 64)]
    pred = model.predict(AttentionBatch.from_calls(calls), "h200_sxm_141gb")
    t = pred.time_ms
    decode = torch.tensor([0.0, 1.0, 1.0])
    # the prediction carries the interval at the default level, 0.8
    lo_8, hi_8 = model.bounds(t, decode, 0.8)
    assert pred.lo_ms is not None and pred.hi_ms is not None
    assert torch.equal(pred.lo_ms, lo_8) and torch.equal(pred.hi_ms, hi_8)
    for level in (0.5, 0.8, 0.95):
        lo, hi = model.bounds(t, decode, level)
        assert bool(torch.isfinite(lo).all() and torch.isfinite(hi).all())
        assert bool((lo <= t).all() and (t <= hi).all() and (lo > 0).all())
    wide = model.bounds(t, decode, 0.95)
    narrow = model.bounds(t, decode, 0.5)
    assert bool((wide[1] / wide[0] > narrow[1] / narrow[0]).all())
    again = AttentionPredictor.load(model.save(tmp_path / "w.json")).bounds(t, decode, 0.8)
    assert torch.equal(again[0], model.bounds(t, decode, 0.8)[0])
    bare = AttentionPredictor.from_dict({k: v for k, v in model.to_dict().items()
                                         if k != "intervals"})
    with pytest.raises(ValueError, match="no interval calibration"):
        bare.bounds(t, decode, 0.8)


def test_a_total_takes_its_attention_kernels_as_one_comonotonic_term_by_hand() -> None:
    # no GEMMs, no level term, standard normal whole-model quantiles; two decode kernels of
    # 0.05 ms each in the by-hand bucket Q(p) = 0.05 + (p − 0.5). Comonotonic, their sum of
    # 0.1 ms has the same log quantiles: median 0.05, sd (Q(0.9) − Q(0.1)) / (2·1.2816)
    # = 0.8 / 2.5631; the total's μ = 0.05 and σ = that sd, so the 80% bounds are
    # 0.1·e^(0.05 ∓ 1.2816·0.31213) = 0.1·e^-0.35 and 0.1·e^0.45
    from dataclasses import replace

    from torch_gemm_cost.predict.intervals import ReportUncertainty

    z = torch.special.ndtri(torch.tensor(PROBS, dtype=torch.float64))
    unc = ReportUncertainty(novelty="family_seen", gemm_log_q=torch.zeros(0, len(PROBS)),
                            floor_ms=torch.zeros(0), level_sigma=0.0, total_z=z,
                            attention=by_hand())
    none = torch.zeros(0, dtype=torch.float64)
    att = torch.tensor([0.05, 0.05], dtype=torch.float64)
    lo, hi = unc.total_bounds(none, 0.0, 0.8, attention_ms=att,
                              attention_decode=torch.ones(2))
    assert lo == pytest.approx(0.1 * math.exp(-0.35), rel=1e-6)
    assert hi == pytest.approx(0.1 * math.exp(0.45), rel=1e-6)
    # without an attention calibration the kernels' time is exact
    exact = replace(unc, attention=None).total_bounds(none, 0.0, 0.8, attention_ms=att,
                                                      attention_decode=torch.ones(2))
    assert exact == pytest.approx((0.1, 0.1))


def test_an_sdpa_model_on_a_gpu_carries_its_attention_uncertainty() -> None:
    from dataclasses import replace

    import torch_gemm_cost as tgc

    class Attn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(64, 64)

        def forward(self, q: torch.Tensor) -> torch.Tensor:
            a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            return self.proj(a)

    report = tgc.estimate(Attn(), (torch.ones(8, 16, 4096, 64),), device="h100_sxm5_80gb",
                          dtype="bf16")
    att = [o for o in report.others if o.kernel.startswith("flash_attention_")]
    assert att and report.uncertainty is not None and report.uncertainty.attention is not None
    lo, hi = report.interval(0.8)
    exact = replace(report, uncertainty=replace(report.uncertainty, attention=None))
    lo0, hi0 = exact.interval(0.8)
    # the attention kernel is most of this run: its own spread widens the total's interval
    assert sum(o.time_ms or 0.0 for o in att) > 0.5 * report.gpu_ms
    assert hi / lo > hi0 / lo0
    assert lo <= report.total_ms <= hi
