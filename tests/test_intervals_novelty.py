"""Intervals of GPUs unlike any in the fit: which class a GPU falls in, the stretch rule by
hand, and the shipped calibration's stretch (wider than the family-unseen intervals, and the
largest any held-out GPU needed)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from torch_gemm_cost import get_device
from torch_gemm_cost.predict.intervals import (
    PROBS,
    UNLIKE,
    IntervalCalibration,
    bounds,
    default_calibration,
    gemm_cases,
    generation_of,
    novelty_of,
    quantile_at,
)
from torch_gemm_cost.records.types import GemmBatch
from torch_gemm_cost.train.interval_stretch import stretch_needed, unlike_stretch

SHIPPED = default_calibration()
needs_shipped = pytest.mark.skipif(SHIPPED is None, reason="no shipped interval calibration")
NORMAL = torch.special.ndtri(torch.tensor(PROBS, dtype=torch.float64))  # (P,)
Z90 = float(torch.special.ndtri(torch.tensor(0.9, dtype=torch.float64)))


def _grid(rows: int, low: float, high: float, median: float = 0.0) -> torch.Tensor:
    """(rows, P) quantiles with Q(0.5) = median, Q(0.1) = median − low, Q(0.9) = median + high:
    a normal shape, scaled apart on each side."""
    scale = torch.where(NORMAL < 0, torch.tensor(low), torch.tensor(high)) / Z90
    return (median + NORMAL * scale).unsqueeze(0).expand(rows, -1)


def test_grid_helper_puts_the_tails_where_asked() -> None:
    q = _grid(1, 0.1, 0.2)
    assert float(quantile_at(q, 0.1)[0]) == pytest.approx(-0.1)
    assert float(quantile_at(q, 0.9)[0]) == pytest.approx(0.2)


def test_stretch_needed_by_hand() -> None:
    # median 0, Q(0.1) = -0.1, Q(0.9) = +0.2: at 80% the interval is [s·(-0.1), s·0.2].
    # r = 0.1: inside from s = 0.1/0.2 = 0.5; 0.3: 1.5; -0.2: 0.2/0.1 = 2.0; 0.4: 2.0;
    # -0.05: 0.5. Sorted 0.5 0.5 1.5 2.0 2.0: 80% needs the ⌈0.8·5⌉ = 4th, 2.0.
    r = torch.tensor([0.1, 0.3, -0.2, 0.4, -0.05], dtype=torch.float64)
    q = _grid(5, 0.1, 0.2)
    assert stretch_needed(r, q, 0.8) == pytest.approx(2.0)
    # at 60% the tails are Q(0.2), Q(0.8): 0.2·Φ⁻¹(0.8)/Φ⁻¹(0.9) = 0.2·0.8416/1.2816 = 0.1313
    # above, 0.0657 below; r = 0.3 then needs 0.3/0.1313 = 2.285, the 3rd smallest of
    # 0.1/0.1313 = 0.76, 2.285, 0.2/0.0657 = 3.05, 3.05, 0.05/0.0657 = 0.76
    assert stretch_needed(r, q, 0.6) == pytest.approx(0.3 / (0.2 * 0.8416212 / Z90), rel=1e-5)
    # a stretch never narrows: residuals a tenth as far need 0.05..0.2, so 1
    assert stretch_needed(r / 10, q, 0.8) == 1.0


def test_stretch_is_about_the_median_and_keeps_the_prediction_inside() -> None:
    # median +0.05, Q(0.1) = -0.05, Q(0.9) = +0.25. r = 0.03 and 0.01 lie between 0 and the
    # median: inside at any stretch (lo ≤ 0 ≤ r ≤ m ≤ hi). r = 0.45 needs (0.45 − 0.05)/0.2
    # = 2; r = -0.15 needs (0.05 + 0.15)/0.1 = 2; r = 0.15: 0.5. Sorted 0 0 0.5 2 2: at 80%
    # the 4th, 2; at 40% the 2nd, 0, so 1.
    r = torch.tensor([0.03, 0.45, -0.15, 0.15, 0.01], dtype=torch.float64)
    q = _grid(5, 0.1, 0.2, median=0.05)
    assert stretch_needed(r, q, 0.8) == pytest.approx(2.0)
    assert stretch_needed(r, q, 0.4) == 1.0


def test_unlike_stretch_is_the_worst_gpus_need() -> None:
    q = _grid(5, 0.1, 0.2)
    wild = torch.tensor([0.1, 0.3, -0.2, 0.4, -0.05], dtype=torch.float64)  # needs 2.0
    tame = wild / 4  # every need a quarter: 0.5 at most, so 1
    s, need = unlike_stretch({"wild": wild, "tame": tame}, lambda g: q)
    assert need == pytest.approx({"wild": 2.0, "tame": 1.0}) and s == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no held-out GPU"):
        unlike_stretch({}, lambda g: q)


def test_a_stretched_class_covers_what_the_stretch_was_fitted_to() -> None:
    """Oracle: intervals read off the calibration for an unlike class hold 80% of the residuals
    whose need set the stretch, and a hair less stretch holds fewer."""
    torch.manual_seed(0)
    r = 0.15 + 0.3 * torch.randn(2000, dtype=torch.float64)  # a GPU priced 16% too fast
    g = GemmBatch.from_dims(m=[4096] * 2000, n=[4096] * 2000, k=[4096] * 2000, dtype="bf16")
    cases = gemm_cases(g, get_device("mi300x"))
    bucket = {"novelty": "family_unseen", "engine": None, "precision": None, "regime": None,
              "size": None, "rows": 10, "gpus": 3, "chips": 3}
    base = IntervalCalibration(probs=PROBS, buckets=(bucket,), log_q=_grid(1, 0.2, 0.2),
                               level_sigma={"family_unseen": 0.1}, total_z=NORMAL)
    s = stretch_needed(r, _grid(len(r), 0.2, 0.2))
    assert s > 1.0
    t = torch.ones(len(r), dtype=torch.float64)

    def coverage(stretch: float) -> float:
        cal = replace(base, stretch={u: stretch for u in UNLIKE})
        lo, hi = bounds(t, cal.gemm_log_quantiles(cases, "generation_unseen"), 0.8)
        return float(((torch.exp(r) >= lo) & (torch.exp(r) <= hi)).double().mean())

    assert coverage(s) >= 0.8 - 1e-9 and coverage(s * 0.99) < 0.8
    cal = replace(base, stretch={u: s for u in UNLIKE})
    assert cal.level_sigma_of("board_unseen") == pytest.approx(0.1 * s)
    assert cal.has("spec_file") and not cal.has("chip_seen")
    back = IntervalCalibration.from_dict(cal.to_dict())
    assert back.stretch == pytest.approx(cal.stretch)
    bad = {**cal.to_dict(), "stretch": {"board_unseen": 0.5}}
    with pytest.raises(ValueError, match="factor >= 1"):
        IntervalCalibration.from_dict(bad)


def test_novelty_of_names_what_the_fit_lacked() -> None:
    datacenter = ["a100_sxm4_80gb", "a40", "l40s", "mi210", "tesla_t4"]
    assert generation_of(get_device("mi210")) == "gfx90"
    assert generation_of(get_device("a40")) == "ampere"
    # CDNA3 beside CDNA2: one kernel-library family, another vendor generation
    assert novelty_of(get_device("mi300x"), datacenter) == "generation_unseen"
    # a GeForce board when only datacenter boards were fitted, even with its chip (the A40's
    # GA102) in the fit; once a GeForce board is fitted, its chip decides
    assert novelty_of(get_device("rtx_3090"), ["a100_sxm4_80gb", "l40s"]) == "board_unseen"
    assert novelty_of(get_device("rtx_3090"), datacenter) == "board_unseen"
    assert novelty_of(get_device("rtx_3090"), [*datacenter, "rtx_3090"]) == "chip_seen"
    assert novelty_of(get_device("rtx_pro_6000"), datacenter) == "board_unseen"  # workstation
    assert novelty_of(get_device("b200"), datacenter) == "family_unseen"
    assert novelty_of(get_device("tesla_p100_pcie_16gb"), datacenter) == "family_unseen"
    assert novelty_of(get_device("l40s"), ["a100_sxm4_80gb"]) == "family_seen"
    spec = replace(get_device("l40s"), id="my_gpu", name="My GPU")
    assert novelty_of(spec, datacenter) == "spec_file" and novelty_of(spec, None) == "spec_file"


@needs_shipped
def test_shipped_stretch_is_the_largest_need_and_widens_the_unseen_interval() -> None:
    assert SHIPPED is not None
    need = SHIPPED.metadata["stretch_needed"]
    stretch = {SHIPPED.stretch[u] for u in UNLIKE}
    assert len(stretch) == 1 and stretch.pop() == pytest.approx(max(need.values()), abs=1e-4)
    g = GemmBatch.from_dims(m=[1, 64, 4096], n=[4096] * 3, k=[4096] * 3, dtype="bf16")
    cases = gemm_cases(g, get_device("mi300x"))
    t = torch.ones(3, dtype=torch.float64)
    lo_u, hi_u = bounds(t, SHIPPED.gemm_log_quantiles(cases, "family_unseen"), 0.8)
    for u in UNLIKE:
        lo, hi = bounds(t, SHIPPED.gemm_log_quantiles(cases, u), 0.8)
        assert bool((hi / lo >= hi_u / lo_u).all()), u
        assert SHIPPED.level_sigma_of(u) >= SHIPPED.level_sigma_of("family_unseen")


def test_whole_model_score_of_an_unlike_gpu_by_hand() -> None:
    # one 1 ms GEMM, nothing else, measured 1.5 ms. The family-unseen bucket: median 0, sd 0.1
    # (Q = 0.1·Φ⁻¹(p)), level term 0.3. Stretched 2: sd 0.2, level 0.6, σ = √(0.6² + 0.2²) =
    # √0.40 = 0.63246, μ = 0, so the score is ln 1.5 / σ = 0.405465 / 0.63246 = 0.64110;
    # unstretched σ = √(0.3² + 0.1²) = 0.31623 and the score 1.28220
    from torch_gemm_cost.train.intervals import GemmPart, WholeModelRow, whole_model_scores

    g = GemmBatch.from_dims(m=[4096], n=[4096], k=[4096], dtype="bf16")
    bucket = {"novelty": "family_unseen", "engine": None, "precision": None, "regime": None,
              "size": None, "rows": 10, "gpus": 3, "chips": 3}
    part = GemmPart((bucket,), 0.1 * NORMAL.unsqueeze(0), {"family_unseen": 0.3})
    row = WholeModelRow(gpu="mi300x", chip="MI300X", novelty="generation_unseen", label="x",
                        measured_ms=1.5, other_ms=0.0,
                        gemm_ms=torch.tensor([1.0], dtype=torch.float64),
                        cases=gemm_cases(g, get_device("mi300x")))
    stretched = whole_model_scores([row], {"MI300X": part}, stretch=2.0)
    assert float(stretched[0]) == pytest.approx(0.64110, abs=1e-5)
    assert float(whole_model_scores([row], {"MI300X": part})[0]) == pytest.approx(1.28220,
                                                                                 abs=1e-5)
