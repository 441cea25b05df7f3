"""Calibrated intervals: the conformal quantile by hand, coverage of a predictor with known noise,
the whole-model propagation, the shipped calibration's intervals on every catalog device, and
where intervals reach the user (query, report, comparison, predict-csv)."""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from torch_gemm_cost import GemmSite, get_device, list_devices
from torch_gemm_cost.cli import main
from torch_gemm_cost.predict import RooflinePredictor, default_predictor
from torch_gemm_cost.predict.intervals import (
    ENGINE_CLASSES,
    NOVELTY,
    PRECISIONS,
    PROBS,
    REGIMES,
    SIZES,
    GemmCases,
    IntervalCalibration,
    bounds,
    check_level,
    conformal_grid,
    conformal_quantiles,
    default_calibration,
    gemm_cases,
    novelty_of,
    own_calibration,
    propagate,
    quantile_at,
    resolve_bucket,
)
from torch_gemm_cost.predict.price import price_gemms
from torch_gemm_cost.predict.query import GemmInterval, predict_gemm_ms
from torch_gemm_cost.records import alignment_bytes
from torch_gemm_cost.records.types import GemmBatch
from torch_gemm_cost.report import CostReport, format_comparison, intervals_overlap
from torch_gemm_cost.train.intervals import Residuals, fit_gemm_part, group_weights, mapped_probs

SHIPPED = default_calibration()
needs_shipped = pytest.mark.skipif(SHIPPED is None, reason="no shipped interval calibration")
NORMAL = torch.special.ndtri(torch.tensor(PROBS, dtype=torch.float64))  # (P,) N(0, 1) quantiles


# ------------------------------------------------------------------------------ conformal


def test_conformal_quantile_by_hand() -> None:
    # nine scores; sorted: -0.4 -0.2 -0.1 0.0 0.1 0.2 0.3 0.4 0.5
    scores = torch.tensor([0.3, -0.1, 0.5, 0.2, 0.0, -0.4, 0.1, 0.4, -0.2])
    q = conformal_quantiles(scores, probs=(0.1, 0.2, 0.5, 0.8, 0.9, 0.95))
    # p ≥ 0.5: the ⌈p·(n+1)⌉-th smallest: ⌈5⌉ = 5th = 0.1, ⌈8⌉ = 8th = 0.4, ⌈9⌉ = 9th = 0.5,
    # ⌈9.5⌉ = 10th: beyond the scores, +∞. p < 0.5: the ⌊p·(n+1)⌋-th: 1st = -0.4, 2nd = -0.2
    assert q[:5].tolist() == pytest.approx([-0.4, -0.2, 0.1, 0.4, 0.5])
    assert q[5] == math.inf


def test_weighted_conformal_quantile_weighs_gpus_not_rows() -> None:
    # GPU A has three rows (1, 2, 3), GPU B one (10): each GPU weighs 1/2, so a row of A 1/6.
    w = group_weights(torch.tensor([0, 0, 0, 1]))
    assert w.tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2])
    # the test point adds the mean weight 1/4: total 1.25. The median needs W(≤ s) ≥ 0.625:
    # W(≤ 3) = 0.5, W(≤ 10) = 1.0, so it is 10, where unweighted it would be 3 (⌈2.5⌉ = 3rd)
    assert float(conformal_quantiles(torch.tensor([1.0, 2.0, 3.0, 10.0]), w, (0.5,))[0]) == 10.0
    assert float(conformal_quantiles(torch.tensor([1.0, 2.0, 3.0, 10.0]), None, (0.5,))[0]) == 3.0


def test_conformal_grid_continues_a_thin_tail_as_a_normal_one() -> None:
    # 9 scores support p = 0.9 (the 9th, 0.5) but not 0.95: Q(0.95) = 0.5·Φ⁻¹(0.95)/Φ⁻¹(0.9)
    scores = torch.tensor([0.3, -0.1, 0.5, 0.2, 0.0, -0.4, 0.1, 0.4, -0.2])
    q = conformal_grid(scores, probs=(0.05, 0.1, 0.5, 0.9, 0.95))
    assert float(q[4]) == pytest.approx(0.5 * 1.6448536 / 1.2815516, rel=1e-6)
    assert float(q[0]) == pytest.approx(-0.4 * 1.6448536 / 1.2815516, rel=1e-6)
    assert bool(torch.isfinite(q).all())


def test_quantile_at_interpolates_the_grid() -> None:
    grid = torch.tensor([[-1.0, 0.0, 2.0]])
    assert float(quantile_at(grid, 0.3, (0.1, 0.5, 0.9))) == pytest.approx(-0.5)  # halfway
    assert float(quantile_at(grid, 0.8, (0.1, 0.5, 0.9))) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="outside the stored grid"):
        quantile_at(grid, 0.95, (0.1, 0.5, 0.9))


def test_levels_are_checked_at_the_boundary() -> None:
    assert check_level(0.8) == 0.8
    with pytest.raises(ValueError, match=r"got 80; did you mean 0.8\?"):
        check_level(80)
    with pytest.raises(ValueError, match=r"outside the levels .* \[0.1, 0.99\]; nearest: 0.99"):
        check_level(0.999)
    with pytest.raises(ValueError, match="coverage in"):
        check_level("0.8")


# ------------------------------------------------------------------------------ synthetic


def synthetic_residuals(gpus: int = 16, rows: int = 400, noise: float = 0.2,
                        level: float = 0.1, seed: int = 0, noisy_regime: float = 0.0
                        ) -> Residuals:
    """A predictor whose log error on GPU g is level_g + ε: level_g ~ N(0, level²) shared by
    the GPU's rows, ε ~ N(0, noise²) per row; each GPU its own chip of one family. Rows of the
    launch regime get noise·(1 + noisy_regime)."""
    gen = torch.Generator().manual_seed(seed)
    levels = torch.randn(gpus, generator=gen, dtype=torch.float64) * level
    eps = torch.randn(gpus, rows, generator=gen, dtype=torch.float64) * noise
    regime = torch.arange(rows).remainder(2).expand(gpus, rows).reshape(-1)  # launch, memory
    r = (levels.unsqueeze(1) + eps).reshape(-1) * torch.where(
        regime == 0, 1.0 + noisy_regime, 1.0)
    n = gpus * rows
    zeros = torch.zeros(n, dtype=torch.long)
    cases = GemmCases(engine=zeros + ENGINE_CLASSES.index("tensor_cores"),
                      precision=zeros + PRECISIONS.index("half"), regime=regime.long(),
                      size=zeros, floor_ms=torch.full((n,), 1e-6, dtype=torch.float64))
    names = tuple(f"gpu{g}" for g in range(gpus) for _ in range(rows))
    return Residuals(log_ratio=r, predicted_ms=torch.ones(n, dtype=torch.float64), cases=cases,
                     gpu=names, chip=names,
                     novelty=zeros + NOVELTY.index("family_seen"))


def test_coverage_of_a_predictor_with_known_noise() -> None:
    """Leave each GPU out, calibrate on the rest, cover its rows: the 80% interval holds about
    80% of them, and its bounds match the known spread, ±Φ⁻¹(0.9)·√(0.2² + 0.1²) = ±0.2866."""
    res = synthetic_residuals()
    covered, upper = [], []
    for g in sorted(set(res.gpu)):
        part = fit_gemm_part(res.without_chips([g]))
        held = res.select(torch.tensor([x == g for x in res.gpu]))
        q = part.log_q[part.rows_for("family_seen", held.cases)]
        lo, hi = bounds(held.predicted_ms, q, 0.8)
        meas = held.predicted_ms * torch.exp(held.log_ratio)
        covered.append(float(((meas >= lo) & (meas <= hi)).double().mean()))
        upper.append(float(torch.log(hi[0])))
    assert sum(covered) / len(covered) == pytest.approx(0.8, abs=0.04)
    assert sum(upper) / len(upper) == pytest.approx(1.2816 * math.sqrt(0.2**2 + 0.1**2),
                                                    rel=0.12)


def test_buckets_follow_the_noise_of_their_regime() -> None:
    # launch rows carry twice the error: their interval is about twice as wide as memory rows'
    part = fit_gemm_part(synthetic_residuals(noisy_regime=1.0))
    index = part.index()
    launch = part.log_q[resolve_bucket(index, ("family_seen", "tensor_cores", "half", "launch",
                                               SIZES[0]))]
    memory = part.log_q[resolve_bucket(index, ("family_seen", "tensor_cores", "half", "memory",
                                               SIZES[0]))]
    width = lambda q: float(quantile_at(q, 0.9) - quantile_at(q, 0.1))
    assert width(launch) / width(memory) == pytest.approx(2.0, rel=0.2)


def test_thin_buckets_fall_back_and_a_new_family_is_never_narrower() -> None:
    res = synthetic_residuals(gpus=4)
    # two GPUs are of a family nothing else in the fit shares, and have wilder errors
    wild = torch.tensor([g in ("gpu0", "gpu1") for g in res.gpu])
    res = replace(res, novelty=torch.where(wild, NOVELTY.index("family_unseen"), res.novelty),
                  log_ratio=torch.where(wild, res.log_ratio * 3, res.log_ratio))
    part = fit_gemm_part(res)
    # family seen: two chips, fewer than 3, so only the novelty-only bucket stands
    seen = [b for b in part.buckets if b["novelty"] == "family_seen"]
    assert [b["engine"] for b in seen] == [None]
    index = part.index()
    for cell in (("tensor_cores", "half", "launch", SIZES[0]), ("cuda_cores", "fp32",
                                                                 "compute", SIZES[3])):
        q_seen = part.log_q[resolve_bucket(index, ("family_seen", *cell))]
        q_new = part.log_q[resolve_bucket(index, ("family_unseen", *cell))]
        below = torch.tensor([p < 0.5 for p in PROBS])
        assert bool(torch.where(below, q_new <= q_seen, q_new >= q_seen).all())
    assert part.level_sigma["family_unseen"] >= part.level_sigma["family_seen"]


def test_tail_map_by_hand() -> None:
    # raw quantiles at 0.9 and 0.95 were crossed by 15% and 8% of held-out rows; an honest
    # 90% upper bound (10% above) lies between: raw tail 0.05 + (0.10 - 0.08)/(0.15 - 0.08)·0.05
    # = 0.0643, so p = 0.9357; the median stays
    raw = (0.05, 0.1, 0.5, 0.9, 0.95)
    below = torch.tensor([0.04, 0.1, 0.0, 0.0, 0.0], dtype=torch.float64)
    above = torch.tensor([0.0, 0.0, 0.0, 0.15, 0.08], dtype=torch.float64)
    out = mapped_probs(below, above, raw, target=(0.1, 0.5, 0.9))
    assert out == pytest.approx([0.1, 0.5, 1 - (0.05 + (0.02 / 0.07) * 0.05)])


# ------------------------------------------------------------------------------ propagation


def _grid(sd: float) -> torch.Tensor:
    return (NORMAL * sd).unsqueeze(0)  # (1, P): a normal log error of sd ``sd``


def test_whole_model_interval_keeps_the_shared_level_term() -> None:
    """N equal GEMMs of 1 ms with a per-GEMM log sd of 0.2 and normal whole-model quantiles:
    independent terms alone give σ = √(N·(1/N)²·0.2²) = 0.2/√N, so the 80% interval of 100
    GEMMs is e^(±1.2816·0.02); a shared level of sd 0.1 keeps σ = √(0.1² + 0.02²) = 0.1020."""
    def width(n: int, level_sigma: float) -> float:
        lo, hi = propagate(torch.ones(n, dtype=torch.float64), _grid(0.2).expand(n, -1), 0.0,
                           level_sigma, NORMAL, 0.8)
        return math.log(hi / lo)

    assert width(1, 0.0) == pytest.approx(2 * 1.2816 * 0.2, rel=1e-3)
    assert width(100, 0.0) == pytest.approx(2 * 1.2816 * 0.02, rel=1e-3)  # shrinks as 1/√N
    assert width(100, 0.1) == pytest.approx(2 * 1.2816 * math.sqrt(0.1**2 + 0.02**2), rel=1e-3)
    assert width(10000, 0.1) >= 2 * 1.2816 * 0.1  # never below the level term's own


def test_propagation_counts_other_ops_and_the_gemms_median() -> None:
    # one GEMM of 3 ms whose median residual is +0.1 (priced too fast) and 1 ms of other ops:
    # μ = log((3·e^0.1 + 1) / 4) = log(1.07878) = 0.07583; both bounds move up by it
    grid = _grid(0.0) + 0.1
    lo, hi = propagate(torch.tensor([3.0], dtype=torch.float64), grid, 1.0, 0.05, NORMAL, 0.8)
    mu = math.log((3 * math.exp(0.1) + 1) / 4)
    assert hi == pytest.approx(4 * math.exp(mu + 1.2816 * 0.05), rel=1e-4)
    assert lo == pytest.approx(4 * min(1.0, math.exp(mu - 1.2816 * 0.05)), rel=1e-4)


# ------------------------------------------------------------------------------ shipped


def _shapes(dtype: str) -> GemmBatch:
    return GemmBatch.from_dims(m=[1, 16, 128, 1024, 4096, 8192, 4096],
                               n=[4096, 4096, 1000, 4096, 4096, 50257, 11008],
                               k=[4096, 4096, 4095, 1024, 4096, 768, 4096], dtype=dtype,
                               op="linear")


@needs_shipped
def test_shipped_intervals_are_finite_ordered_and_deterministic() -> None:
    predictor = default_predictor()
    for device in list_devices():
        for dtype in ("float32", "float16", "bfloat16", "float8_e4m3fn"):
            if not device.supports(dtype) and dtype != "float32":
                continue
            g = _shapes(dtype)
            time_ms = predictor.predict(g, device).time_ms
            unc = gemm_uncertainty_of(g, device)
            lo, hi = unc.gemm_bounds(time_ms, 0.8)
            again = gemm_uncertainty_of(g, device).gemm_bounds(time_ms, 0.8)
            assert bool(torch.isfinite(lo).all() & torch.isfinite(hi).all()), device.id
            assert bool(((lo <= time_ms) & (time_ms <= hi) & (lo > 0)).all()), device.id
            assert torch.equal(lo, again[0]) and torch.equal(hi, again[1])
            lo95, hi95 = unc.gemm_bounds(time_ms, 0.95)
            assert bool(((lo95 <= lo) & (hi <= hi95)).all()), device.id


def gemm_uncertainty_of(g: GemmBatch, device):  # type: ignore[no-untyped-def]
    from torch_gemm_cost.predict.intervals import uncertainty_of

    unc = uncertainty_of(g, device, default_predictor())
    assert unc is not None
    return unc


@needs_shipped
def test_a_device_from_its_datasheet_gets_the_widest_intervals() -> None:
    trained = default_predictor().metadata_["trained_gpus"]
    h100 = get_device("h100_sxm5_80gb")
    assert novelty_of(h100, trained) == "chip_seen"  # the H200's chip
    assert novelty_of(get_device("l4"), trained) == "family_seen"  # Ada: the L40S's family
    spec_file = replace(h100, id="my_gpu", name="My GPU")  # not the catalog's record
    assert novelty_of(spec_file, trained) == "spec_file"
    assert novelty_of(h100, None) == "family_unseen"
    g = _shapes("bfloat16")
    cases = gemm_cases(g, h100)
    widths = {}
    for cls in ("chip_seen", "family_seen", "family_unseen", "spec_file"):
        q = SHIPPED.gemm_log_quantiles(cases, cls)
        lo, hi = bounds(torch.ones(len(g), dtype=torch.float64), q, 0.8)
        widths[cls] = hi / lo
    assert bool((widths["family_unseen"] >= widths["family_seen"]).all())
    assert bool((widths["spec_file"] >= widths["family_unseen"]).all())
    assert SHIPPED.level_sigma["family_unseen"] >= SHIPPED.level_sigma["family_seen"]


def test_cases_from_physics_by_hand() -> None:
    h100 = get_device("h100_sxm5_80gb")  # bf16 dense peak 989.4 TFLOP/s, 3.35 TB/s
    g = GemmBatch.from_dims(m=[1, 4096, 4096], n=[4096, 4096, 4095], k=[4096, 4096, 4096],
                            dtype="bf16", op="linear")
    c = gemm_cases(g, h100)
    assert [ENGINE_CLASSES[i] for i in c.engine] == ["tensor_cores"] * 3
    assert [PRECISIONS[i] for i in c.precision] == ["half"] * 3
    # m = 1: 2·4096² B of weights / 3.35e12 B/s = 0.0100 ms, memory-bound, in the 0.01-0.1 decade
    # 4096³: 2·4096³ / 989.4e12 = 0.139 ms, compute-bound; n = 4095 leaves C rows off 16 bytes
    assert [REGIMES[i] for i in c.regime] == ["memory", "compute", "misaligned"]
    assert [SIZES[i] for i in c.size] == ["0.01-0.1ms", "0.1-1ms", "0.1-1ms"]
    assert float(c.floor_ms[1]) == pytest.approx(2 * 4096**3 / h100.peak_flops_per_s("bf16")
                                                 * 1e3)


def test_calibration_round_trips_and_names_bad_files(tmp_path: Path) -> None:
    bucket = {"novelty": "family_seen", "engine": None, "precision": None, "regime": None,
              "size": None, "rows": 10, "gpus": 3, "chips": 3}
    cal = IntervalCalibration(probs=PROBS, buckets=(bucket,), log_q=_grid(0.2),
                              level_sigma={"family_seen": 0.1}, total_z=NORMAL,
                              predictor={"name": "hybrid", "version": "9"})
    path = cal.save(tmp_path / "cal.json")
    back = IntervalCalibration.load(path)
    assert back.buckets == cal.buckets and torch.allclose(back.log_q, cal.log_q, atol=1e-5)
    doc = cal.to_dict()
    doc["buckets"][0]["regime"] = "warp"
    path.write_text(__import__("json").dumps(doc))
    with pytest.raises(ValueError, match=r"cal.json is not a torch_gemm_cost.intervals file: "
                       r"bucket field regime = 'warp'"):
        IntervalCalibration.load(path)


def test_a_misspelled_novelty_names_the_nearest_class() -> None:
    bucket = {"novelty": "family_seen", "engine": None, "precision": None, "regime": None,
              "size": None, "rows": 10, "gpus": 3, "chips": 3}
    cal = IntervalCalibration(probs=PROBS, buckets=(bucket,), log_q=_grid(0.2),
                              level_sigma={"family_seen": 0.1}, total_z=NORMAL)
    cases = gemm_cases(GemmBatch.from_dims(m=[64], n=[64], k=[64], dtype="bf16", op="linear"),
                       get_device("h100_sxm5_80gb"))
    assert cal.gemm_log_quantiles(cases, "family_seen").shape == (1, len(PROBS))
    with pytest.raises(ValueError, match=r"unknown novelty 'family_sen'; did you mean "
                                         r"'family_seen'"):
        cal.gemm_log_quantiles(cases, "family_sen")


# ------------------------------------------------------------------------------ where shown


def site(module: str, m: int, n: int, k: int, dtype: str = "float16") -> GemmSite:
    eb = 2
    return GemmSite(module=module, module_type="Linear", op="linear", node=module,
                    phase="forward", batch=1, m=m, n=n, k=k, dtype=dtype, out_dtype=dtype,
                    a_transposed=False, b_transposed=True, a_align_bytes=alignment_bytes(k, eb),
                    b_align_bytes=alignment_bytes(k, eb), c_align_bytes=alignment_bytes(n, eb),
                    bias=False, flops=2 * m * n * k, dram_bytes=eb * (m * k + n * k + m * n))


def report_on(device_id: str, predictor=None) -> CostReport:  # type: ignore[no-untyped-def]
    device = get_device(device_id)
    predictor = predictor or default_predictor()
    sites = [site(f"layers.{i}.{p}", 2048, n, k) for i in range(4)
             for p, n, k in (("q", 4096, 4096), ("up", 11008, 4096), ("down", 4096, 11008))]
    gemms, uncertainty = price_gemms(sites, device, predictor)
    return CostReport(model="Toy", device=device, dtype="float16", mode="inference",
                      predictor=predictor.name, predictor_version=predictor.version, gemms=gemms,
                      uncertainty=uncertainty)


@needs_shipped
def test_reports_carry_intervals_everywhere() -> None:
    r = report_on("a100_sxm4_80gb")
    lo, hi = r.total_interval_ms  # type: ignore[misc]
    assert lo <= r.total_ms <= hi
    lo50, hi50 = r.interval(0.5)
    lo95, hi95 = r.interval(0.95)
    assert lo95 <= lo <= lo50 <= r.total_ms <= hi50 <= hi <= hi95
    # the 12 GEMMs' errors partly cancel: the whole model's interval is narrower, relative to
    # its time, than the widest GEMM's, but never narrower than the shared level term alone
    assert hi / lo < max(g.hi_ms / g.lo_ms for g in r.gemms)  # type: ignore[operator]
    for row in r.rows():
        assert row["lo_ms"] <= row["time_ms"] <= row["hi_ms"]
    d = r.to_dict()
    assert (d["total_lo_ms"], d["total_hi_ms"]) == (lo, hi) and d["novelty"] == "chip_seen"
    assert "lo_ms" in r.to_csv().splitlines()[0]
    assert "[80% interval " in r.footer() and "its chip was in the fit" in r.footer()
    table = r.table(depth=2, intervals=True)
    assert "80% interval ms" in table.splitlines()[0]
    assert "80% interval ms" not in r.table(depth=2)
    for row in r.module_rows(depth=2):
        assert row["lo_ms"] <= row["time_ms"] <= row["hi_ms"]


def test_no_calibration_no_interval() -> None:
    r = report_on("a100_sxm4_80gb", RooflinePredictor())
    assert r.total_interval_ms is None and r.rows()[0]["lo_ms"] is None
    assert "interval" not in r.footer() and "total_lo_ms" not in r.to_dict()
    with pytest.raises(ValueError, match="predictor roofline v1 has no interval calibration"):
        r.interval(0.8)


@needs_shipped
def test_comparisons_flag_overlapping_intervals() -> None:
    a100, sxm, b200 = (report_on(d) for d in ("a100_pcie_80gb", "a100_sxm4_80gb", "b200"))
    assert intervals_overlap(a100, sxm) is True  # one chip, two boards: not told apart
    assert intervals_overlap(a100, b200) is False
    text = format_comparison([a100, sxm, b200])
    lines = text.splitlines()
    assert lines[0].startswith("inputs: ")  # the question the three answer, then the table
    assert "vs first" in lines[1]
    assert "intervals overlap" in lines[4] and "apart" in lines[5]
    assert intervals_overlap(a100, report_on("b200", RooflinePredictor())) is None


@needs_shipped
def test_predict_gemm_ms_with_an_interval() -> None:
    got = predict_gemm_ms("h100_sxm5_80gb", m=4096, n=[4096, 4095], k=4096, dtype="bf16",
                          interval=0.8)
    assert isinstance(got, GemmInterval) and got.level == 0.8
    plain = predict_gemm_ms("h100_sxm5_80gb", m=4096, n=[4096, 4095], k=4096, dtype="bf16")
    assert torch.equal(got.time_ms, plain)  # type: ignore[arg-type]
    assert bool(((got.lo_ms <= got.time_ms) & (got.time_ms <= got.hi_ms)).all())  # type: ignore[operator]
    t, lo, hi, _ = predict_gemm_ms("h100_sxm5_80gb", m=1, n=1, k=1, batch=0, interval=0.5)
    assert (t, lo, hi) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="did you mean 0.8"):
        predict_gemm_ms("h100_sxm5_80gb", m=8, n=8, k=8, interval=80)
    with pytest.raises(ValueError, match="no interval calibration covers predictor 'roofline'"):
        predict_gemm_ms("h100_sxm5_80gb", m=8, n=8, k=8, interval=0.8,
                        predictor=RooflinePredictor())


@needs_shipped
def test_predict_csv_adds_the_bounds(tmp_path: Path, capsys) -> None:
    src = tmp_path / "in.csv"
    src.write_text("gpu,op,dtype,batch,m,n,k\nh100_sxm5_80gb,linear,bfloat16,1,4096,4096,4096\n"
                   "tesla_t4,matmul,float32,0,64,64,64\n")
    out = tmp_path / "out.csv"
    assert main(["predict-csv", str(src), "--out", str(out), "--interval", "0.8"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert float(rows[0]["predicted_lo_ms"]) <= float(rows[0]["predicted_ms"]) <= \
        float(rows[0]["predicted_hi_ms"])
    assert rows[1]["predicted_lo_ms"] == rows[1]["predicted_hi_ms"] == "0"  # batch 0: 0 ms
    assert main(["predict-csv", str(src), "--out", str(out), "--interval", "80"]) == 2
    assert "--interval must be a coverage in (0, 1), got 80; did you mean 0.8?" in \
        capsys.readouterr().err


def test_a_device_own_calibration_is_narrow_where_it_fits_well() -> None:
    # cross-validated residuals within ±5%: its 80% interval is within about ±5% too
    r = torch.linspace(-0.05, 0.05, 41, dtype=torch.float64)
    cal = own_calibration(r, NORMAL)
    cases = gemm_cases(_shapes("float32"), get_device("tesla_t4"))
    q = cal.gemm_log_quantiles(cases, "calibrated")
    lo, hi = bounds(torch.ones(len(cases), dtype=torch.float64), q, 0.8)
    assert float((hi / lo).max()) < 1.1
    # level term: median 0, sd of 41 points evenly over ±0.05 is 0.0296: σ = 0.0296/√41
    assert cal.level_sigma["calibrated"] == pytest.approx(float(r.std()) / math.sqrt(41))
    with pytest.raises(ValueError, match="at least 2"):
        own_calibration(torch.tensor([0.1]))
