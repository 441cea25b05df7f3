"""The hybrid predictor: hand-worked tile physics, gradients, bounds, weights I/O."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_gemm_cost.hardware.catalog import get_device, list_devices
from torch_gemm_cost.hardware.dtypes import DTYPES
from torch_gemm_cost.measured.gemm import MeasuredGemms, gemm_batch_from_columns
from torch_gemm_cost.predict.base import Prediction
from torch_gemm_cost.predict.gemm.cache import (
    effective_bandwidth,
    grid_dram_bandwidth,
    requested_ab_bytes,
)
from torch_gemm_cost.predict.gemm.features import PEAK_KEYS, DeviceTable, RowInputs
from torch_gemm_cost.predict.gemm.hybrid import SOURCES, TIMINGS, HybridPredictor
from torch_gemm_cost.predict.gemm.intensity import tile_traffic
from torch_gemm_cost.predict.gemm.power import power_cap
from torch_gemm_cost.predict.gemm.tiles import (
    ENGINES,
    SPLITS,
    SPLITS_BY_ENGINE,
    STREAM_K,
    TILES,
    tile_grid,
)
from torch_gemm_cost.predict.query import predict_gemm_ms
from torch_gemm_cost.records.types import DTYPE_NAMES, GemmBatch

DETAIL_KEYS = ("tile_m", "tile_n", "split_k", "waves", "last_wave_fill", "h1", "h2",
               "mem_bw_bytes_per_s", "intensity_flops_per_byte", "util", "compute_ms",
               "memory_ms", "load_issue_ms")


def initialised(**kw) -> HybridPredictor:
    model = HybridPredictor(**kw)
    model.params_ = model._init_params()
    return model


def measured(rows: list[tuple]) -> MeasuredGemms:
    """rows: (gpu, source, timing, op, dtype, batch, m, n, k, latency_ms)."""
    cols = list(zip(*rows))
    gemms = gemm_batch_from_columns(op=cols[3], dtype=cols[4], batch=cols[5], m=cols[6],
                                    n=cols[7], k=cols[8])
    return MeasuredGemms(gemms=gemms, gpu=cols[0], source=cols[1], timing=cols[2],
                         latency_ms=torch.tensor(cols[9], dtype=torch.float64))


def test_tiles_and_waves_by_hand() -> None:
    # V100-like: 80 SMs, 256 KiB registers; m = n = 1000, k = 512, batch 1.
    one = lambda v: torch.tensor([float(v)], dtype=torch.float64)

    def grid_at(engine: str) -> Callable[[int, int, int], dict[str, float]]:
        grid = tile_grid(one(1), one(1000), one(1000), one(512),
                         torch.tensor([ENGINES.index(engine)]), one(80), one(262144))
        cands = [(tm, tn, s) for tm, tn in TILES[engine] for s in SPLITS]

        def at(tm: int, tn: int, s: int) -> dict[str, float]:
            j = cands.index((tm, tn, s))
            return {f: float(getattr(grid, f)[0, j])
                    for f in ("tiles", "slots", "waves", "last_wave_fill", "split_k", "k_slice",
                              "ops_per_wave")}
        return at

    # SIMT (fp32 CUDA cores): one CTA per SM, so 80 slots for every tile
    simt = grid_at("simt")
    # 128x128: ⌈1000/128⌉² = 8·8 = 64 tiles in 80 slots: 1 wave, last-wave fill 64/80 = 0.8
    assert simt(128, 128, 1)["tiles"] == 64
    assert (simt(128, 128, 1)["waves"], simt(128, 128, 1)["last_wave_fill"]) == (1, 0.8)
    # 64x64: 16·16 = 256 tiles: ⌈256/80⌉ = 4 waves, the last holds 256 − 240 = 16: fill 0.2
    assert (simt(64, 64, 1)["tiles"], simt(64, 64, 1)["waves"]) == (256, 4)
    assert simt(64, 64, 1)["last_wave_fill"] == 0.2
    # 32x32: 32·32 = 1024 tiles: ⌈1024/80⌉ = 13 waves, the last holds 1024 − 960 = 64: 0.8
    assert (simt(32, 32, 1)["waves"], simt(32, 32, 1)["last_wave_fill"]) == (13, 0.8)
    # filling split-K: 80 slots / 64 tiles = 1.25 -> largest power of two ≤ 1.25 is 1: no split
    assert simt(128, 128, 0)["split_k"] == 1

    # matrix units: CTAs per SM by registers, ⌊262144 / (Tm·Tn·4·2)⌋, at most 4
    mma = grid_at("mma")
    # 128x128: ⌊262144 / 131072⌋ = 2 -> 160 slots; 64 tiles: 1 wave, fill 64/160 = 0.4
    assert mma(128, 128, 1)["slots"] == 160 and mma(128, 128, 1)["last_wave_fill"] == 0.4
    # 64x64: ⌊262144 / 32768⌋ = 8, capped at 4 -> 320 slots; 256 tiles: fill 256/320 = 0.8
    assert mma(64, 64, 1)["slots"] == 320 and mma(64, 64, 1)["last_wave_fill"] == 0.8
    # 128x128 filling split-K: 160 slots / 64 tiles = 2.5 -> largest power of two ≤ 2.5 is 2
    # (and ≤ 512/128):
    # 128 tiles in 160 slots: 1 wave, fill 0.8; each tile does k/2 = 256
    split = mma(128, 128, 0)
    assert (split["split_k"], split["tiles"], split["k_slice"]) == (2, 128, 256)
    assert (split["waves"], split["last_wave_fill"]) == (1, 0.8)
    # ops per wave = 2·128·128·256·160 = 1,342,177,280
    assert split["ops_per_wave"] == 2 * 128 * 128 * 256 * 160


def test_stream_k_by_hand() -> None:
    # Hopper-like: 132 SMs, 256 KiB registers; m = n = 2048, k = 4096 on the large-tile engine
    one = lambda v: torch.tensor([float(v)], dtype=torch.float64)
    large = torch.tensor([ENGINES.index("mma_large")])
    cands = [(tm, tn, s) for tm, tn in TILES["mma_large"] for s in SPLITS_BY_ENGINE["mma_large"]]
    grid = tile_grid(one(1), one(2048), one(2048), one(4096), large, one(132), one(262144))
    sk, dp = cands.index((128, 256, STREAM_K)), cands.index((128, 256, 1))
    # 128x256: ⌊262144 / (128·256·8)⌋ = 1 CTA a SM -> 132 slots; 16·8 = 128 tiles
    # data-parallel: 128 ≤ 132, one wave; stream-K within one wave is the same grid
    assert float(grid.waves[0, dp]) == 1 and float(grid.waves[0, sk]) == 1
    assert float(grid.last_wave_fill[0, sk]) == float(grid.last_wave_fill[0, dp]) == 128 / 132
    # m = n = 4096: 32·16 = 512 tiles. Data-parallel: ⌈512/132⌉ = 4 waves, the last holding
    # 512 − 396 = 116 tiles (fill 116/132); stream-K: 512/132 = 3.879 waves, every slot busy
    grid = tile_grid(one(1), one(4096), one(4096), one(4096), large, one(132), one(262144))
    assert float(grid.waves[0, dp]) == 4
    assert abs(float(grid.last_wave_fill[0, dp]) - 116 / 132) < 1e-12
    assert abs(float(grid.waves[0, sk]) - 512 / 132) < 1e-12
    assert float(grid.last_wave_fill[0, sk]) == 1.0
    # no split of k: each tile's k-iterations are shared out, not cut into split-K partials
    assert (float(grid.split_k[0, sk]), float(grid.k_slice[0, sk])) == (1.0, 4096.0)
    # work = waves · ops per wave = (512/132) · 2·128·256·4096·132 = the 512 tiles' FLOPs
    work = float(grid.waves[0, sk] * grid.ops_per_wave[0, sk])
    assert abs(work - 512 * 2 * 128 * 256 * 4096) < 1e-3
    # the older engines' libraries have no stream-K candidate
    assert STREAM_K not in SPLITS_BY_ENGINE["mma"] and STREAM_K not in SPLITS_BY_ENGINE["simt"]


def test_split_k_limits() -> None:
    one = lambda v: torch.tensor([float(v)], dtype=torch.float64)
    grid = tile_grid(one(1), one(64), one(64), one(200), torch.tensor([1]), one(108), one(262144))
    # k = 200: ⌊200/128⌋ = 1, so the filling split collapses to 1
    assert torch.all(grid.split_k == 1)
    grid = tile_grid(one(1), one(64), one(64), one(2 ** 20), torch.tensor([1]), one(108),
                     one(262144))
    # one 64x64 tile in 108·4 = 432 slots: 2^⌊log2 432⌋ = 256, capped at 64
    assert float(grid.split_k.max()) == 64


def test_a_tile_past_an_edge_moves_only_what_exists_by_hand() -> None:
    # m = 17, n = 1000, k = 512 in bf16 on 108 SMs; the 64x128 mma tile without split-K
    one = lambda v: torch.tensor([float(v)], dtype=torch.float64)
    grid = tile_grid(one(1), one(17), one(1000), one(512), torch.tensor([ENGINES.index("mma")]),
                     one(108), one(262144))
    j = [(tm, tn, s) for tm, tn in TILES["mma"] for s in SPLITS].index((64, 128, 1))
    # rows: 17 / ⌈17/64⌉ = 17; cols: 1000 / ⌈1000/128⌉ = 1000 / 8 = 125
    assert (float(grid.rows[0, j]), float(grid.cols[0, j])) == (17.0, 125.0)
    two = torch.tensor([2.0])
    t = tile_traffic(grid, two, two, one(16), one(16), one(16))
    # bytes: (17 + 125)·512·2 read + 17·125·2 written = 145408 + 4250 = 149658
    assert float(t.mem_bytes[0, j]) == 149658.0
    # the instructions are the whole tile's, issued predicated off past the edge:
    # (64 + 128)·512·2 B / 16 B a load = 12288 loads; 64·128·2 / 16 = 1024 stores
    assert (float(t.read_inst[0, j]), float(t.write_inst[0, j])) == (12288.0, 1024.0)
    # the MMAs run on the whole tile: 2·64·128·512
    assert float(t.ops[0, j]) == 2 * 64 * 128 * 512
    # all tiles together read 8 tiles·(17 + 125)·512·2 = 1163264 B of A and B: A once per
    # column of tiles (8·17·512·2) and B once (1000·512·2)
    assert float(requested_ab_bytes(grid, two)[0, j]) == 8 * 17 * 512 * 2 + 1000 * 512 * 2


def test_a_grid_that_fills_part_of_the_gpu_shares_dram_among_its_tiles_by_hand() -> None:
    f = lambda v: torch.tensor([v], dtype=torch.float64)
    # η·BW_DRAM 0.85e12, L2 4e13: a full wave (or several) sees DRAM's own rate
    assert float(grid_dram_bandwidth(f(0.85e12), f(4e13), f(3.0), f(1.0))) == 0.85e12
    # 2 waves, the last 0.2 full: occupancy (1 + 0.2) / 2 = 0.6, 0.85e12 / 0.6
    assert float(grid_dram_bandwidth(f(0.85e12), f(4e13), f(2.0), f(0.2))) == \
        pytest.approx(0.85e12 / 0.6, rel=1e-12)
    # one tile of 142·2 slots: occupancy 1/284, 0.85e12·284 = 2.4e14 > the L2 port, 4e13
    assert float(grid_dram_bandwidth(f(0.85e12), f(4e13), f(1.0), f(1 / 284))) == 4e13
    # through the predictor: a one-tile GEMM's misses go at the L2 port, not at its wave share
    # of DRAM, which would cap the hit-weighted bandwidth at η·BW_DRAM / ((1 − H1)(1 − H2))
    model, dev = initialised(), get_device("l40s")
    d = model.predict(GemmBatch.from_dims(m=[1], n=[32], k=[32], dtype="bfloat16"), dev).details
    eta = float(torch.sigmoid(model.params_["eta_dram"]))
    dram_share_cap = eta * dev.dram_bw_bytes_per_s / ((1 - d["h1"][0]) * (1 - d["h2"][0]))
    assert float(d["mem_bw_bytes_per_s"][0]) > 10 * float(dram_share_cap)


def test_bandwidth_without_hits_is_eta_dram() -> None:
    # H1 = H2 = 0: 1/MemBw = 1/(η·BW_DRAM)
    f = lambda v: torch.tensor(v, dtype=torch.float64)
    bw = effective_bandwidth(f(0.0), f(0.0), f(2e13), f(5e12), f(0.8 * 1.555e12))
    assert float(bw) == pytest.approx(0.8 * 1.555e12, rel=1e-12)
    # through the predictor, with the cache model off
    model = initialised(use_cache=False)
    dev = get_device("a100_pcie_40gb")
    pred = model.predict(GemmBatch.from_dims(m=[512, 4096], n=[512, 4096], k=[512, 64],
                                             dtype="float16"), dev)
    eta = float(torch.sigmoid(model.params_["eta_dram"]))
    assert torch.allclose(pred.details["mem_bw_bytes_per_s"],
                          torch.full((2,), eta * dev.dram_bw_bytes_per_s, dtype=torch.float64))
    assert torch.all(pred.details["h1"] == 0) and torch.all(pred.details["h2"] == 0)


def test_half_hits_by_hand() -> None:
    # H1 = 0, H2 = 0.5, BW_L2 = 4e12, η·BW_DRAM = 1e12: 1/MemBw = 0.5/4e12 + 0.5/1e12 = 6.25e-13
    f = lambda v: torch.tensor(v, dtype=torch.float64)
    bw = effective_bandwidth(f(0.0), f(0.5), f(1e13), f(4e12), f(1e12))
    assert float(bw) == pytest.approx(1.6e12)


# every PEAK_KEY, engine, timing and source appears once
COVERING_ROWS = [
    ("tesla_p100_pcie_16gb", "neusight", "event", "bmm", "float32", 4, 300, 200, 100, 0.05),
    ("tesla_p100_pcie_16gb", "deepbench", "kernel", "gemm_NN", "float16_fp32math", 1, 1760, 64,
     1760, 0.3),
    ("mi210", "neusight-test", "event", "linear", "float32", 1, 4096, 4096, 1024, 1.2),
    ("a100_pcie_40gb", "llmcompass", "event", "matmul", "tf32", 1, 2048, 2048, 2048, 0.2),
    ("a100_pcie_40gb", "vidur", "kernel", "linear", "bfloat16", 1, 8192, 8192, 8192, 4.0),
    ("a100_pcie_40gb", "vidur", "kernel", "linear", "float64", 1, 1024, 1024, 1024, 0.3),
    ("tesla_t4", "deepbench", "kernel", "gemm_NN", "float16", 1, 5120, 5120, 5120, 7.0),
    ("tesla_t4", "deepbench", "kernel", "gemm_NN", "int8", 1, 4096, 4096, 4096, 2.0),
    ("h100_sxm5_80gb", "xla-ptable", "table", "matmul", "float8_e4m3fn", 1, 4096, 4096, 4096, 0.2),
    ("h100_sxm5_80gb", "xla-ptable", "table", "bmm", "bfloat16", 2, 512, 512, 512, 0.01),
    ("mi300x", "xla-ptable", "table", "matmul", "bfloat16", 1, 4096, 4096, 4096, 0.3),
    ("mi300x", "xla-ptable", "table", "matmul", "tf32", 1, 4096, 4096, 4096, 0.6),
    ("mi300x", "xla-ptable", "table", "matmul", "float8_e4m3fnuz", 1, 4096, 4096, 4096, 0.1),
    # vLLM's fp8 Linear casts its input first (the cast's rate), a misaligned half-precision
    # Linear (the misaligned-load cost), fp32 on an SM that issues one lane per FP32 lane
    ("h200_sxm_141gb", "aiconfigurator", "kernel", "linear", "float8_e4m3fn", 1, 8192, 4096,
     4096, 0.2),
    ("h200_sxm_141gb", "tgc-align", "event", "linear", "bfloat16", 1, 2048, 4095, 4096, 0.4),
    ("h200_sxm_141gb", "calibrate", "event", "bmm", "float32", 8, 1024, 1024, 1024, 1.0),
]


def test_covering_rows_cover_everything() -> None:
    rows = measured(COVERING_ROWS)
    table = DeviceTable.build([get_device(g) for g in sorted(set(rows.gpu))])
    assert set(rows.timing) == set(TIMINGS) and set(rows.source) == set(SOURCES)
    keys = {PEAK_KEYS[int(table.peak_key[sorted(set(rows.gpu)).index(g), int(t)])]
            for g, t in zip(rows.gpu, rows.gemms.dtype_index)}
    assert keys == set(PEAK_KEYS)


def test_gradients_reach_every_trainable_parameter() -> None:
    model = initialised()
    for t in model.params_.values():
        t.requires_grad_(True)
    rows, source = model._rows_of(measured(COVERING_ROWS))
    engines = {ENGINES[int(e)] for e in rows.engine}
    assert engines == set(ENGINES)
    data = measured(COVERING_ROWS)
    quantized = torch.tensor([float(m * k) if src == "aiconfigurator" else 0.0
                              for _, src, *_, m, n, k, _t in COVERING_ROWS], dtype=torch.float64)
    out = model._forward(rows, source, soft=True, quantized=quantized)
    (torch.log(out["time_ms"]) - torch.log(data.latency_ms)).pow(2).sum().backward()
    for name in model.trainable_names():
        grad = model.params_[name].grad
        assert grad is not None and torch.isfinite(grad).all(), name
        assert grad.abs().sum() > 0, name


def test_details_carry_every_key_and_prediction_is_positive() -> None:
    model = initialised()
    pred = model.predict(GemmBatch.from_dims(m=[1, 4096], n=[4096, 50257], k=[4096, 768],
                                             dtype="bfloat16"), "h100_sxm5_80gb")
    for key in DETAIL_KEYS:
        assert key in pred.details and pred.details[key].shape == (2,), key
    assert (pred.time_ms > 0).all()
    assert ((pred.details["util"] > 0) & (pred.details["util"] <= 1)).all()
    assert ((pred.details["h2"] >= 0) & (pred.details["h2"] <= 1)).all()


def test_zero_size_costs_nothing_and_huge_is_finite() -> None:
    model = initialised()
    zero = model.predict(GemmBatch.from_dims(m=[0, 8, 8], n=[8, 0, 8], k=[8, 8, 0],
                                             dtype="float16"), "a100_sxm4_80gb")
    assert zero.time_ms.tolist() == [0.0, 0.0, 0.0]
    huge = model.predict(GemmBatch.from_dims(m=[2 ** 20], n=[2 ** 16], k=[2 ** 16],
                                             batch=[4096], dtype="float16"), "a100_sxm4_80gb")
    assert torch.isfinite(huge.time_ms).all() and huge.time_ms.item() > 0
    for value in huge.details.values():
        assert torch.isfinite(value.double()).all()


def _shipped_or_init() -> list[HybridPredictor]:
    from torch_gemm_cost.predict import default_predictor

    models = [initialised()]
    shipped = default_predictor()
    if isinstance(shipped, HybridPredictor):
        models.append(shipped)
    return models


MODELS = _shipped_or_init()
DEVICES = [d for d in list_devices() if not math.isnan(d.dram_bw_bytes_per_s)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(MODELS) - 1),
    dev=st.sampled_from(DEVICES),
    dtype=st.sampled_from(sorted(DTYPES)),
    dims=st.lists(st.integers(1, 2 ** 15), min_size=3, max_size=3),
    batch=st.integers(1, 512),
)
def test_never_below_the_physical_floor(which, dev, dtype, dims, batch) -> None:
    if not dev.supports(dtype) and DTYPES[dtype].peak_key in ("fp8", "int8"):
        return
    try:
        peak = dev.peak_flops_per_s(dtype)
    except ValueError:
        return
    m, n, k = dims
    g = GemmBatch.from_dims(m=[m], n=[n], k=[k], batch=[batch], dtype=dtype)
    floor_ms = max(float(g.flops[0]) / peak,
                   float(g.compulsory_bytes[0]) / dev.dram_bw_bytes_per_s) * 1e3
    # the model's own physics in float64, before predict's guard against float32 rounding:
    # no clamp anywhere keeps it above the floor, only the roofline's construction does;
    # the same for the training-time soft-min over candidates
    model = MODELS[which]
    rows = RowInputs.gather(g, DeviceTable.build([dev]), torch.zeros(1, dtype=torch.long),
                            torch.zeros(1, dtype=torch.long))
    for soft in (False, True):
        t = float(model._forward(rows, torch.tensor([-1]), soft=soft)["time_ms"][0])
        assert math.isfinite(t) and t >= floor_ms * (1 - 1e-12), (soft, t, floor_ms)


def test_unsupported_dtype_names_it() -> None:
    with pytest.raises(ValueError, match="float8"):
        initialised().predict(GemmBatch.from_dims(m=[8], n=[8], k=[8], dtype="float8_e4m3fn"),
                              "tesla_v100_sxm2")


def test_save_load_round_trip(tmp_path) -> None:
    model = initialised(hidden=8)
    path = model.save(tmp_path / "w.json", metadata={"note": "x"})
    back = HybridPredictor.load(path)
    g = GemmBatch.from_dims(m=[100, 4096], n=[300, 4096], k=[50, 4096], dtype="float32")
    assert torch.equal(model.predict(g, "tesla_t4").time_ms, back.predict(g, "tesla_t4").time_ms)
    assert back.metadata_ == {"note": "x"} and back.hidden == 8


def test_set_params_checks_what_it_is_given_and_keeps_the_weights() -> None:
    model = initialised(steps=10)
    weights = model.params_
    assert model.set_params(steps=3, default_timing="event") is model
    assert (model.steps, model.default_timing, model.get_params()["seed"]) == (3, "event", 0)
    assert model.params_ is weights
    with pytest.raises(ValueError, match=r"unknown hyperparameter\(s\) 'step' of HybridPredictor"):
        model.set_params(step=3)
    with pytest.raises(ValueError,
                       match=r"^unknown default_timing 'wall'; one of 'kernel', 'event', 'table'\.$"):
        model.set_params(default_timing="wall")
    assert model.default_timing == "event"  # a refused change changes nothing
    # 'evnt' is 'event' less one letter: 2·4/9 = 0.89; 'kernel' and 'table' fall under 0.6
    with pytest.raises(ValueError, match=r"^unknown timing 'evnt'; did you mean 'event'\?$"):
        model.predict(GemmBatch.from_dims(m=[8], n=[8], k=[8], dtype="float32"), "tesla_t4",
                      timing="evnt")


@pytest.mark.parametrize(
    "content",
    ["{not json", json.dumps({"format": "other"}), json.dumps([1, 2]), "\x00\x01"],
)
def test_corrupt_weights_name_the_file(tmp_path, content: str) -> None:
    path = tmp_path / "broken_weights.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="broken_weights.json"):
        HybridPredictor.load(path)


def test_mismatched_shapes_name_the_file_and_parameter(tmp_path) -> None:
    doc = initialised().to_dict()
    doc["params"]["mlp_w1"] = [[0.0]]
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"shapes.json.*mlp_w1"):
        HybridPredictor.load(path)


def test_older_weights_name_the_file_and_both_versions(tmp_path) -> None:
    doc = initialised().to_dict()
    doc["version"] = "10"  # before tiles moved only the bytes of rows and columns that exist
    path = tmp_path / "v10.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"v10.json.*version 10 weights.*reads version 15"):
        HybridPredictor.load(path)


def test_fit_is_seeded_and_lowers_the_loss() -> None:
    rows = measured(COVERING_ROWS)
    a = HybridPredictor(steps=30, seed=3).fit(rows)
    b = HybridPredictor(steps=30, seed=3).fit(rows)
    for name in a.params_:
        assert torch.equal(a.params_[name], b.params_[name]), name
    assert a.loss_history_[-1][1] < a.loss_history_[0][1]
    # warm start continues from the fitted weights
    before = {k: v.clone() for k, v in a.params_.items()}
    a.set_params(steps=5).fit(rows, warm_start=True)
    assert any(not torch.equal(before[k], a.params_[k]) for k in before)


def test_ablations_are_the_same_call_and_each_switch_does_what_it_says() -> None:
    from torch_gemm_cost.predict.gemm.hybrid import variants

    g = GemmBatch.from_dims(m=[1000, 64], n=[1000, 4096], k=[1000, 4096], dtype="bfloat16")
    params = initialised()._init_params()
    # the same weights everywhere (the MLP's first layer away from zero, so util ≠ 1 anywhere)
    params["mlp_b3"] = params["mlp_b3"] - 1.0
    out = {}
    for name, model in variants().items():
        model.params_ = {k: v.clone() for k, v in params.items()}
        assert model.name == name
        out[name] = {dev: model.predict(g, dev) for dev in ("a40", "mi300x")}
    hybrid = out["hybrid"]["a40"].details
    # no_cache: no L1 or L2 hit, every byte at the sustained DRAM bandwidth
    for key in ("h1", "h2"):
        assert torch.all(out["no_cache"]["a40"].details[key] == 0.0)
        assert torch.all(out["neusight_style"]["a40"].details[key] == 0.0)
        assert torch.all(hybrid[key] > 0.0)
    # no_instr: no instruction bytes in the intensity, so it is higher than the hybrid's
    assert torch.all(out["no_instr"]["a40"].details["intensity_flops_per_byte"]
                     > hybrid["intensity_flops_per_byte"])
    # no_mlp: util is exactly 1; the hybrid's is not
    assert torch.all(out["no_mlp"]["a40"].details["util"] == 1.0)
    assert torch.all(hybrid["util"] < 1.0)
    # plain_mse changes only the fit's loss: the same weights predict the same times
    assert torch.equal(out["plain_mse"]["a40"].time_ms, out["hybrid"]["a40"].time_ms)
    # no_family: AMD's bf16 takes NVIDIA's shared efficiency (here 0.8 both, at the prior) and
    # nothing changes on NVIDIA
    assert torch.equal(out["no_family"]["a40"].time_ms, out["hybrid"]["a40"].time_ms)
    model = variants()["no_family"]
    model.params_ = {k: v.clone() for k, v in params.items()}
    model.params_["peak_eff"][PEAK_KEYS.index("amd_half")] = -3.0  # sigmoid: 0.047
    amd = model.predict(g, "mi300x").details["peak_sustained_flops_per_s"]
    assert torch.equal(amd, out["no_family"]["mi300x"].details["peak_sustained_flops_per_s"])


def test_float32_inference_matches_float64() -> None:
    model = _shipped_or_init()[-1]
    g = GemmBatch.from_dims(m=[1, 8, 4096, 50257], n=[4096, 4096, 4096, 768],
                            k=[4096, 4096, 4096, 768], dtype="float16")
    fast = model.predict(g, "a100_sxm4_80gb")
    rows, source = model._rows_of(MeasuredGemms(
        gemms=g, gpu=("a100_sxm4_80gb",) * 4, source=("",) * 4, timing=("kernel",) * 4,
        latency_ms=torch.ones(4, dtype=torch.float64)))
    with torch.no_grad():
        exact = model._forward(rows, source, soft=False)
    assert torch.allclose(fast.time_ms, exact["time_ms"], rtol=1e-4)
    # the time is never below either side of the roofline it came from
    assert (fast.time_ms >= torch.maximum(fast.details["compute_ms"],
                                          fast.details["memory_ms"]) * (1 - 1e-5)).all()


def test_power_cap_by_hand() -> None:
    need = torch.tensor([35.0, 70.0, 140.0, 140.0, 140.0])
    board = torch.tensor([70.0, 70.0, 70.0, 70.0, float("nan")])
    alpha = torch.tensor([1.0, 1.0, 1.0, 1.0 / 3.0, 1.0])
    cap = power_cap(need, board, q=8.0, alpha=alpha)
    # half the power needed: (1 + 0.5^8)^(-1/8) = 1.00390^(-0.125) = 0.99951
    # exactly the power: 2^(-1/8) = 0.91700 (the soft knee)
    # twice the power, clock ∝ power: (1 + 2^8)^(-1/8) = 257^(-0.125) = 0.49976
    # twice the power, clock ∝ power^(1/3): (1 + 2^(8/3))^(-1/8) = 7.3496^(-0.125) = 0.77932
    # unknown board power: no cap
    assert cap.tolist() == pytest.approx([0.99951, 0.91700, 0.49976, 0.77932, 1.0], abs=1e-5)


def test_power_cap_nan_board_keeps_gradients_finite() -> None:
    need = torch.tensor([100.0, 100.0], requires_grad=True)
    power_cap(need, torch.tensor([float("nan"), 50.0]), q=8.0, alpha=1.0).sum().backward()
    assert need.grad is not None and torch.isfinite(need.grad).all()
    assert need.grad[0] == 0 and need.grad[1] < 0


def test_a_power_capped_board_slows_large_gemms_not_small_ones() -> None:
    # shipped weights: a T4 (70 W) keeps less of its fp32 peak on an 8192³ GEMM than on one
    # 128x128 output tile; the 300 W A100-PCIe-80GB keeps more than the 250 W 40GB card on the
    # same chip and GEMM
    from torch_gemm_cost.predict import default_predictor

    model = default_predictor()
    gemms = GemmBatch.from_dims(m=[128, 8192], n=[128, 8192], k=[128, 8192], dtype="float32")
    t4 = model.predict(gemms, "tesla_t4").details["peak_sustained_flops_per_s"]
    peak = get_device("tesla_t4").peak_flops_per_s(DTYPES["float32"])
    assert t4[1] / peak < 0.9 * t4[0] / peak
    big = GemmBatch.from_dims(m=[8192], n=[8192], k=[8192], dtype="float32")
    a40 = model.predict(big, "a100_pcie_40gb").details["peak_sustained_flops_per_s"]
    a80 = model.predict(big, "a100_pcie_80gb").details["peak_sustained_flops_per_s"]
    assert float(a80[0]) > float(a40[0])


def test_shipped_weights_pick_cublas_tile_for_a100_fp32_bmm() -> None:
    # cuBLAS runs ampere_sgemm_128x128_nn for 16,588 of NeuSight's 16,660 A100-40GB fp32 bmm
    # rows, whatever the shape; the Ampere family preference carries that habit, and a held-out
    # A100-80GB (same family) gets it too
    from torch_gemm_cost.predict import default_predictor

    model = default_predictor()
    gemms = GemmBatch.from_dims(batch=[51, 19, 947, 342], m=[32, 20, 395, 736],
                                n=[28, 87, 203, 5], k=[74, 337, 278, 160], dtype="float32")
    for gpu in ("a100_pcie_40gb", "a100_pcie_80gb"):
        d = model.predict(gemms, gpu).details
        assert d["tile_m"].tolist() == [128.0] * 4 and d["tile_n"].tolist() == [128.0] * 4, gpu


def test_library_families() -> None:
    from torch_gemm_cost.predict.gemm.features import FAMILIES, library_family

    expect = {"tesla_p4": "pascal", "tesla_p100_pcie_16gb": "pascal",
              "tesla_v100_pcie_32gb": "volta", "tesla_t4": "volta", "a100_pcie_40gb": "ampere",
              "l4": "ampere", "h100_sxm5_80gb": "hopper", "b200": "blackwell", "mi210": "cdna",
              "mi300x": "cdna"}
    assert {g: library_family(get_device(g)) for g in expect} == expect
    assert all(library_family(d) in FAMILIES for d in list_devices())


def test_simt_wave_overhead_by_hand() -> None:
    # fp32 bmm on an A100 (108 SMs, 1410 MHz), tile forced to 128x128 and no MLP:
    # 216 tiles of 128x128 in 108 one-tile-per-SM slots = 2 waves. A fixed 3000 cycles per wave
    # adds 2 · 3000 / 1.41e9 s = 4.2553 µs to the compute time, against (almost) none at all.
    cands = [(tm, tn, s) for tm, tn in TILES["simt"] for s in SPLITS]
    gemms = GemmBatch.from_dims(batch=[216], m=[128], n=[128], k=[64], dtype="float32")

    def compute_ms(wave_kcycles: float) -> tuple[float, float]:
        model = initialised(use_mlp=False)
        model.params_["tile_pref"][ENGINES.index("simt"), :, cands.index((128, 128, 1))] = 50.0
        model.params_["simt_wave_kcycles"][0] = wave_kcycles
        d = model.predict(gemms, "a100_pcie_40gb").details
        return float(d["compute_ms"][0]), float(d["waves"][0])

    with_overhead, waves = compute_ms(math.log(math.expm1(3.0)))  # softplus⁻¹(3) -> 3000 cycles
    without, _ = compute_ms(-40.0)  # softplus(-40)·1000 ≈ 4e-15 cycles
    assert waves == 2
    assert with_overhead - without == pytest.approx(2 * 3000 / 1.41e9 * 1e3, rel=1e-4)


def _load_issue_ms(gemms: GemmBatch, device: str, cycles: float, **kw) -> tuple[float, dict]:
    model = initialised(use_mlp=False, **kw)
    model.params_["misaligned_load_cycles"][0] = math.log(math.expm1(cycles))  # softplus⁻¹
    pred = model.predict(gemms, device)
    return float(pred.details["load_issue_ms"][0]), {k: float(v[0]) for k, v in
                                                     pred.details.items()}


def test_misaligned_load_roof_by_hand() -> None:
    # bf16, m = k = 4096, n = 4095 on an A100-SXM4 (108 SMs, 1410 MHz), the 128x128 tile forced
    # by the learned preference: C's rows are 8190 bytes, so the kernel copies 2 bytes a lane.
    # A is read once per column of tiles and B once per row of tiles:
    # A 4096·4096·⌈4095/128⌉ = 536,870,912 and B 4095·4096·⌈4096/128⌉ = 536,739,840 elements,
    # 1,073,610,752 · 2 B / 2 B / 32 lanes = 33,550,336 warp loads; 1024 tiles keep all 108 SMs
    # busy. At 16 cycles a load: 33,550,336 · 16 / (108 · 1.41e9) s = 3.52512 ms.
    gemms = GemmBatch.from_dims(m=[4096], n=[4095], k=[4096], dtype="bfloat16")
    model = initialised(use_mlp=False)
    cands = [(tm, tn, s) for tm, tn in TILES["mma"] for s in SPLITS]
    model.params_["tile_pref"][ENGINES.index("mma"), :, cands.index((128, 128, 1))] = 50.0
    model.params_["misaligned_load_cycles"][0] = math.log(math.expm1(16.0))  # softplus⁻¹
    d = {k: float(v[0]) for k, v in model.predict(gemms, "a100_sxm4_80gb").details.items()}
    assert (d["tile_m"], d["tile_n"], d["split_k"]) == (128.0, 128.0, 1.0)
    assert d["load_issue_ms"] == pytest.approx(3.52512, rel=1e-5)
    # whatever tile the model picks, the same count over that tile (H200: 132 SMs, 1980 MHz)
    ms, h = _load_issue_ms(gemms, "h200_sxm_141gb", 16.0)
    tm, tn = h["tile_m"], h["tile_n"]
    loads = (4096 * 4096 * math.ceil(4095 / tn) + 4095 * 4096 * math.ceil(4096 / tm)) / 32
    tiles = math.ceil(4096 / tm) * math.ceil(4095 / tn) * h["split_k"]
    assert ms == pytest.approx(16 * loads / (min(tiles, 132) * 1.98e9) * 1e3, rel=1e-5)
    # it is a roof: the predicted time is at least the load time, and above the aligned one
    aligned = GemmBatch.from_dims(m=[4096], n=[4096], k=[4096], dtype="bfloat16")
    t_mis = float(model.predict(gemms, "h200_sxm_141gb").time_ms[0])
    t_ali = float(model.predict(aligned, "h200_sxm_141gb").time_ms[0])
    assert t_mis >= ms and t_mis > 2 * t_ali
    assert h["compute_ms"] >= ms  # counted on the compute side


@pytest.mark.parametrize(("dims", "dtype", "device"), [
    ((4096, 4096, 4096), "bfloat16", "h200_sxm_141gb"),  # aligned: cp.async / TMA copies
    ((4096, 4095, 4096), "float32", "h200_sxm_141gb"),  # SIMT: no matrix kernel to fall from
    ((1, 4095, 4096), "bfloat16", "h200_sxm_141gb"),  # m = 1: a GEMV kernel peels the rows
    ((4096, 4095, 4096), "bfloat16", "mi300x"),  # AMD's libraries: not these kernels
])
def test_misaligned_load_roof_spares(dims, dtype, device) -> None:
    m, n, k = dims
    ms, _ = _load_issue_ms(GemmBatch.from_dims(m=[m], n=[n], k=[k], dtype=dtype), device, 16.0)
    assert ms == 0.0


def test_dram_roof_by_hand() -> None:
    # bf16 GEMV, m = 1, n = k = 8192, on an H100 SXM (3.35 TB/s): A, B and C hold
    # (1·8192 + 8192·8192 + 1·8192) · 2 B = 134,250,496 bytes. At the prior η = 0.8:
    # 134,250,496 / (0.8 · 3.35e12) s = 0.0500935 ms, whatever the caches serve.
    model = initialised(use_mlp=False)  # util = 1
    gemv = GemmBatch.from_dims(m=[1], n=[8192], k=[8192], dtype="bfloat16")
    pred = model.predict(gemv, "h100_sxm5_80gb")
    dram_ms = float(pred.details["dram_ms"][0])
    assert dram_ms == pytest.approx(0.0500935, rel=1e-5)
    # a roof: the time and the memory side are at least the DRAM time
    assert float(pred.time_ms[0]) >= dram_ms
    assert float(pred.details["memory_ms"][0]) >= dram_ms
    # the bandwidth is the sustained one: at η = 0.4 the roof doubles, and sets the time
    model.params_["eta_dram"][0] = math.log(0.4 / 0.6)
    slow = model.predict(gemv, "h100_sxm5_80gb")
    assert float(slow.details["dram_ms"][0]) == pytest.approx(2 * dram_ms, rel=1e-5)
    assert float(slow.time_ms[0]) >= 2 * dram_ms > float(pred.time_ms[0])


def test_fp8_cast_by_hand() -> None:
    # vLLM's fp8 Linear on a B200 (148 SMs, 7.7 TB/s) casts its 4096 x 8192 bf16 input first:
    # 4096 rows, one CTA each and one at a time per SM, ⌈4096 / 148⌉ = 28 deep on every SM;
    # ⌈8192 / 2048⌉ = 4 passes a row. At the measured 0.92 µs a row and 0.51 µs a further pass:
    # 28 · (0.92 + 3 · 0.51) = 68.6 µs; its 3 bytes an element at the prior η = 0.8:
    # 3 · 33,554,432 / (0.8 · 7.7e12) s = 16.34144 µs; with its own launch (the prior kernel
    # floor, 6,000 clocks at the B200's 1965 MHz: 0.0030534351 ms): 0.0879948751 ms on top of
    # the GEMM.
    model = initialised(use_mlp=False)
    floor = 6000 / 1965e6 * 1e3  # ms

    def priced(m: int, k: int) -> tuple[float, Prediction]:
        gemms = GemmBatch.from_dims(m=[m], n=[4096], k=[k], dtype="float8_e4m3fn")
        cast = dataclasses.replace(gemms, quantized_elements=torch.tensor([float(m * k)]),
                                   fp8_kernel=torch.tensor([1]))
        plain = dataclasses.replace(gemms, fp8_kernel=torch.tensor([1]))
        pred = model.predict(cast, "b200")
        return float(pred.time_ms[0] - model.predict(plain, "b200").time_ms[0]), pred

    cast_ms, pred = priced(4096, 8192)
    assert cast_ms == pytest.approx(0.0879948751, rel=1e-5)
    # explain's parts: rows an SM works through, passes, latency and bytes
    assert float(pred.details["cast_rows_per_sm"][0]) == 28.0
    assert float(pred.details["cast_passes"][0]) == 4.0
    assert float(pred.details["cast_latency_ms"][0]) == pytest.approx(0.0686, rel=1e-6)
    assert float(pred.details["cast_bytes_ms"][0]) == pytest.approx(0.01634144, rel=1e-5)
    # one pass (K = 2048): 28 · 0.92 µs + 3 · 8,388,608 / 6.16e12 s (4.08536 µs) + the floor
    assert priced(4096, 2048)[0] == pytest.approx(0.02576 + 0.00408536 + floor, rel=1e-5)
    # one row: a single CTA deep, whatever the SMs
    assert priced(1, 2048)[0] == pytest.approx(0.00092 + 3 * 2048 / 6.16e12 * 1e3 + floor,
                                               rel=1e-5)
    # no cast: none of its parts
    plain = model.predict(GemmBatch.from_dims(m=[64], n=[64], k=[64], dtype="float8_e4m3fn"),
                          "b200")
    assert float(plain.details["cast_ms"][0]) == 0.0


def test_fp8_kernel_has_its_own_level() -> None:
    # the same fp8 GEMM under each kernel: at an efficiency of 0.5 for vLLM's CUTLASS against
    # 1.0 (a large logit) for torch._scaled_mm, a compute-bound 8192³ takes about twice as
    # long; on an MI300X (vLLM calls torch._scaled_mm on ROCm) the two are the same
    model = initialised(use_mlp=False)
    model.params_["fp8_kernel_eff"][:] = torch.tensor([20.0, 0.0])  # sigmoid: 1.0, 0.5
    gemms = GemmBatch.from_dims(m=[8192], n=[8192], k=[8192], dtype="float8_e4m3fn")
    cutlass = dataclasses.replace(gemms, fp8_kernel=torch.tensor([1]))
    blas_ms = float(model.predict(gemms, "h200_sxm_141gb").time_ms[0])
    cutlass_ms = float(model.predict(cutlass, "h200_sxm_141gb").time_ms[0])
    assert 1.6 < cutlass_ms / blas_ms <= 2.0 + 1e-9
    fnuz = GemmBatch.from_dims(m=[8192], n=[8192], k=[8192], dtype="float8_e4m3fnuz")
    amd = [float(model.predict(g, "mi300x").time_ms[0])
           for g in (fnuz, dataclasses.replace(fnuz, fp8_kernel=torch.tensor([1])))]
    assert amd[0] == amd[1]


def test_kernel_floor_is_a_count_of_clocks() -> None:
    # the prior kernel floor is 0.004 ms at 1.5 GHz, 6,000 SM clocks: 6000 / 1410 MHz =
    # 4.2553191 µs on an A100 SXM4, 6000 / 2520 MHz = 2.3809524 µs on an L40S; a host-timed
    # (event) floor is the host's, the prior 0.02 ms on both
    model = initialised(use_mlp=False)
    empty_ish = GemmBatch.from_dims(m=[1], n=[8], k=[8], dtype="bfloat16")
    for gpu, kernel_us in (("a100_sxm4_80gb", 4.2553191), ("l40s", 2.3809524)):
        pred = model.predict(empty_ish, gpu)
        assert float(pred.details["launch_ms"][0]) * 1e3 == pytest.approx(kernel_us, rel=1e-6)
        event = model.predict(empty_ish, gpu, timing="event")
        assert float(event.details["launch_ms"][0]) == pytest.approx(0.02, rel=1e-6)
    assert model.physical_constants()["kernel_floor_clocks"] == pytest.approx(6000.0, rel=1e-9)


def test_large_tile_engine_takes_the_fastest_tile() -> None:
    # the learned tile preference moves the choice on Volta..Ada matrix units, never on the
    # large-tile engine (Hopper on), whose only training rows are the B200's tables
    model = initialised(use_mlp=False)
    gemms = GemmBatch.from_dims(m=[1, 15, 4096], n=[32000, 6528, 4096], k=[4096, 4800, 4096],
                                dtype="bfloat16")
    before = {gpu: model.predict(gemms, gpu) for gpu in ("h200_sxm_141gb", "a100_sxm4_80gb")}
    width = model.params_["tile_pref"].shape[-1]
    for engine in ("mma", "mma_large"):  # favour the last candidates (the widest tiles) by e^6
        model.params_["tile_pref"][ENGINES.index(engine)] = torch.linspace(-3.0, 3.0, width)
    after = {gpu: model.predict(gemms, gpu) for gpu in before}
    h200_0, h200_1 = before["h200_sxm_141gb"], after["h200_sxm_141gb"]
    assert torch.equal(h200_0.time_ms, h200_1.time_ms)
    assert torch.equal(h200_0.details["tile_m"], h200_1.details["tile_m"])
    assert float(h200_1.details["tile_m"][0]) == 64.0  # a GEMV runs the shortest tile
    a100_0, a100_1 = before["a100_sxm4_80gb"], after["a100_sxm4_80gb"]
    assert not torch.equal(a100_0.details["tile_m"] * a100_0.details["tile_n"],
                           a100_1.details["tile_m"] * a100_1.details["tile_n"])


def test_half_precisions_share_one_efficiency() -> None:
    # fp16 and bf16 run the same tensor-core path at the same datasheet rate (H100 SXM: 989
    # TFLOP/s each; MI300X: 1307), with the same bytes per element, so no shape may tell them
    # apart; on NVIDIA, tf32 and fp8 also keep the share of their own peaks that fp16 keeps
    m, n, k = [1, 128, 4096, 8192], [4096, 50257, 4096, 8192], [4096, 768, 11008, 8192]
    for dev in ("h100_sxm5_80gb", "a100_sxm4_80gb", "mi300x"):
        fp16 = predict_gemm_ms(dev, m=m, n=n, k=k, dtype="fp16")
        bf16 = predict_gemm_ms(dev, m=m, n=n, k=k, dtype="bf16")
        assert torch.equal(torch.as_tensor(fp16), torch.as_tensor(bf16)), dev
    table = DeviceTable.build([get_device("h100_sxm5_80gb"), get_device("mi300x")])
    keys = [[PEAK_KEYS[int(table.peak_key[d, DTYPE_NAMES.index(t)])]
             for t in ("tf32", "float16", "bfloat16", "float8_e4m3fn")] for d in (0, 1)]
    assert keys == [["tensor_float"] * 4, ["amd_tf32", "amd_half", "amd_half", "amd_fp8"]]


def test_vector_units_price_other_precisions_at_the_fp32_share() -> None:
    # a device spec without matrix units that still lists tf32, bf16 and fp8 peaks (a user's
    # own spec, say): bf16 runs like packed fp16 on the vector units, tf32 and fp8 at the fp32
    # share of their own peaks, and the table builds
    p100 = get_device("tesla_p100_pcie_16gb")
    peaks = {**dict(p100.peak_flops), "tf32": 9.3e12, "bf16": 18.7e12, "fp8": 37.4e12}
    spec = dataclasses.replace(p100, peak_flops=tuple(sorted(peaks.items())))
    table = DeviceTable.build([spec])
    keys = [PEAK_KEYS[int(table.peak_key[0, DTYPE_NAMES.index(t)])]
            for t in ("tf32", "bfloat16", "float16_fp32math", "float8_e4m3fn")]
    assert keys == ["fp32", "fp16_simt", "fp16_simt", "fp32"]
    assert set(table.engine[0].tolist()) == {ENGINES.index("simt")}
