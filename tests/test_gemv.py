"""GEMVs in fp32 and tf32 (n = 1 or m = 1) are priced as the DRAM stream of their operands, by
hand; 16-bit GEMVs and skinny GEMMs stay with the tile model."""

from __future__ import annotations

import pytest
import torch

from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.predict.gemm.gemv import gemv_rows, gemv_seconds
from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor
from torch_gemm_cost.records.types import GemmBatch


def initialised() -> HybridPredictor:
    """A hybrid at its initial parameters: η = 0.8, a kernel floor of 0.004 ms at 1.5 GHz, and
    launch ⊕ GEMM a p-norm of p = 1.5."""
    model = HybridPredictor()
    model.params_ = model._init_params()
    return model


def test_matrix_vector_product_is_its_stream_by_hand() -> None:
    # KernelBench's 4_Matrix_vector_multiplication_ (v0.1): (2048, 2^20) @ (2^20, 1), fp32, on
    # an L40S (864e9 B/s of DRAM, 2520 MHz boost).
    # bytes = (2048·1048576 + 1048576·1 + 2048·1) · 4 = 2,148,534,272 · 4 = 8,594,137,088 B
    # stream = 8,594,137,088 / (0.8 · 864e9) s = 12.4336474 ms
    # launch = 0.004 ms · 1.5 GHz / 2.52 GHz = 0.00238 ms;
    # launch ⊕ stream = 12.4336474 · (1 + (0.00238 / 12.4336)^1.5)^(1/1.5) = 12.4336474 + 2e-5 ms
    pred = initialised().predict(
        GemmBatch.from_dims(m=2048, n=1, k=1048576, dtype="float32"), "l40s")
    assert pred.time_ms.item() == pytest.approx(12.4336474 + 2e-5, rel=2e-6)
    d = pred.details
    assert d["memory_ms"].item() == pytest.approx(12.4336474, rel=1e-6)
    # 2·2048·2^20 FLOPs = 4.295e9 at 91.6 TFLOP/s = 0.047 ms, 0.059 ms at η_peak = 0.8 and a
    # little more for the SIMT issue share: under 1% of the stream
    assert 0.059 < d["compute_ms"].item() < 0.01 * 12.4336474
    assert pred.bound == ("memory",)
    # no tile runs: no tile, split or waves, and no utilization below 1
    assert [d[k].item() for k in ("tile_m", "tile_n", "split_k", "waves", "util")] == \
        [0.0, 0.0, 0.0, 0.0, 1.0]


def test_dot_and_batched_gemv_count_every_operand_by_hand() -> None:
    # on an A100-SXM4-80GB (2.039e12 B/s), η = 0.8: η·BW = 1.6312e12 B/s
    # dot of two 2^26-vectors, fp32: (2^26 + 2^26 + 1) · 4 = 536,870,916 B -> 0.3291264 ms
    # bmm (64, 4096, 4096) @ (64, 4096, 1): 64 · (4096·4096 + 4096 + 4096) · 4
    #   = 64 · 16,785,408 · 4 = 4,297,064,448 B -> 2.6342965 ms
    model = initialised()
    bw = 0.8 * 2.039e12
    pred = model.predict(GemmBatch.from_dims(m=[1, 4096], n=[1, 1], k=[2 ** 26, 4096],
                                             batch=[1, 64], dtype="float32"), "a100_sxm4_80gb")
    expected = torch.tensor([536870916.0, 4297064448.0], dtype=torch.float64) / bw * 1e3
    assert torch.allclose(pred.details["memory_ms"], expected, rtol=1e-6)
    assert expected.tolist() == pytest.approx([0.3291264, 2.6342965], rel=1e-6)


def test_tf32_gemv_runs_the_fp32_kernel() -> None:
    # cuBLAS's gemv kernels ignore the TF32 math mode: the same stream, the same time
    model = initialised()
    dims = {"m": [1, 4096, 8192], "n": [4096, 1, 1], "k": [4096, 8192, 512]}
    fp32 = model.predict(GemmBatch.from_dims(**dims, dtype="float32"), "h100_sxm5_80gb")
    tf32 = model.predict(GemmBatch.from_dims(**dims, dtype="tf32"), "h100_sxm5_80gb")
    assert torch.allclose(fp32.time_ms, tf32.time_ms, rtol=1e-6)


def test_half_precision_gemvs_and_skinny_gemms_keep_their_tiles() -> None:
    # a bf16 GEMV runs narrow tensor-core tiles; an fp32 GEMM with n = 2 runs an SGEMM tile
    model = initialised()
    half = model.predict(GemmBatch.from_dims(m=1, n=4096, k=4096, dtype="bfloat16"),
                         "a100_sxm4_80gb")
    skinny = model.predict(GemmBatch.from_dims(m=4096, n=2, k=4096, dtype="float32"),
                           "a100_sxm4_80gb")
    for pred in (half, skinny):
        assert pred.details["tile_m"].item() > 0 and pred.details["tile_n"].item() > 0


def test_gemv_rows_and_seconds_by_hand() -> None:
    t = lambda *v: torch.tensor(v, dtype=torch.float64)
    core = torch.tensor([True, True, True, False, True])
    # (m, n): (1, 8) and (8, 1) and (1, 1) are GEMVs; (1, 8) off the CUDA cores is not, nor (2, 8)
    rows = gemv_rows(t(1, 8, 1, 1, 2), t(8, 1, 1, 8, 8), core)
    assert rows.tolist() == [True, True, True, False, False]
    # 4e9 B at 1e12 B/s = 4 ms of stream against 1e9 FLOPs at 1e12 FLOP/s = 1 ms: the stream;
    # a vector unit of 1e11 FLOP/s takes 10 ms: the FLOPs
    s = gemv_seconds(t(4e9, 4e9), t(1e12, 1e12), t(1e9, 1e9), t(1e12, 1e11))
    assert s.tolist() == pytest.approx([4e-3, 1e-2])


def test_shipped_weights_price_a_gemv_at_their_own_dram_share() -> None:
    from torch_gemm_cost.predict import default_predictor

    model = default_predictor()
    if not isinstance(model, HybridPredictor):
        pytest.skip("no shipped hybrid weights in this installation")
    dev = get_device("tesla_t4")
    eta = model.physical_constants()["eta_dram"]
    gemms = GemmBatch.from_dims(m=256, n=1, k=131072, dtype="float32")
    pred = model.predict(gemms, dev)
    # (256·131072 + 131072 + 256) · 4 B at η · 320e9 B/s
    stream_ms = (256 * 131072 + 131072 + 256) * 4 / (eta * dev.dram_bw_bytes_per_s) * 1e3
    assert pred.details["memory_ms"].item() == pytest.approx(stream_ms, rel=1e-6)
    assert stream_ms <= pred.time_ms.item() <= stream_ms + pred.details["launch_ms"].item()


def test_an_empty_gemv_costs_nothing_with_finite_details() -> None:
    pred = initialised().predict(GemmBatch.from_dims(m=[1, 4], n=[1, 1], k=[0, 0], batch=[0, 1],
                                                     dtype="float32"), "a100_sxm4_80gb")
    assert pred.time_ms.tolist() == [0.0, 0.0]
    assert all(torch.isfinite(v.double()).all() for v in pred.details.values())
