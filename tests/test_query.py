"""predict_gemm_ms and explain: hand-worked roofline numbers, spellings, broadcasting, errors."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_prediction_fixture import REL_TOL

import torch_gemm_cost as tgc
from torch_gemm_cost.hardware.dtypes import DTYPES
from torch_gemm_cost.hardware.target import resolve_target
from torch_gemm_cost.predict import GemmBatch, Prediction, RooflinePredictor
from torch_gemm_cost.predict.query import explain, predict_gemm_ms

ROOF = RooflinePredictor()


def test_compute_bound_roofline_by_hand():
    # H100 SXM5, bf16, m = n = k = 4096:
    #   FLOPs = 2 · 4096³ = 137,438,953,472 -> / 989.4e12 FLOP/s = 1.389114e-4 s = 0.1389114 ms
    #   bytes = (4096² + 4096² + 4096²) · 2 = 100,663,296 -> / 3.35e12 B/s = 0.0300487 ms
    #   compute-bound: 0.1389114 ms
    t = predict_gemm_ms("h100_sxm5_80gb", m=4096, n=4096, k=4096, dtype="bf16", predictor=ROOF)
    assert isinstance(t, float)
    assert t == pytest.approx(137_438_953_472 / 989.4e12 * 1e3, rel=1e-12)
    assert t == pytest.approx(0.1389114, rel=1e-6)


def test_memory_bound_roofline_by_hand_and_batch_scales():
    # A100 PCIe 40GB, fp32, 64³: FLOPs = 524,288 -> / 19.5e12 = 2.689e-5 ms;
    #   bytes = 3 · 64² · 4 = 49,152 -> / 1.555e12 = 3.16090e-5 ms (memory-bound).
    #   batch = 3 triples both terms: 9.48270e-5 ms.
    t1 = predict_gemm_ms("a100_pcie_40gb", m=64, n=64, k=64, predictor=ROOF)
    t3 = predict_gemm_ms("a100_pcie_40gb", m=64, n=64, k=64, batch=3, predictor=ROOF)
    assert t1 == pytest.approx(49_152 / 1.555e12 * 1e3, rel=1e-12)
    assert t3 == pytest.approx(3 * 49_152 / 1.555e12 * 1e3, rel=1e-12)


@pytest.mark.parametrize("spelling", ["bfloat16", "bf16", "BF16", "torch.bfloat16", torch.bfloat16])
def test_dtype_spellings_give_identical_results(spelling):
    # default predictor, whichever it is: every spelling must reach the same compute dtype
    ref = predict_gemm_ms("h100_sxm5_80gb", m=[7, 4096], n=4096, k=1000, dtype="bfloat16")
    got = predict_gemm_ms("h100_sxm5_80gb", m=[7, 4096], n=4096, k=1000, dtype=spelling)
    assert torch.equal(ref, got)


def test_device_spellings_give_identical_results():
    a = predict_gemm_ms("tesla_t4", m=300, n=200, k=100)
    assert predict_gemm_ms("Tesla T4", m=300, n=200, k=100) == a
    assert predict_gemm_ms(resolve_target("T4").spec, m=300, n=200, k=100) == a


def test_arrays_broadcast_and_match_scalar_calls():
    ms = [1, 17, 4096]
    out = predict_gemm_ms("a100_pcie_40gb", m=ms, n=torch.tensor([[128], [1000]]), k=512)
    assert out.dtype == torch.float64 and out.shape == (6,)  # (2, 3) flattened, row-major
    expected = [
        predict_gemm_ms("a100_pcie_40gb", m=m, n=n, k=512) for n in (128, 1000) for m in ms
    ]
    # NB: a float32 predictor is batch-invariant only to float32 rounding: a batch of 6 and a
    # batch of 1 may run other matmul and vector kernels, as two CPUs do (REL_TOL's derivation)
    assert out.tolist() == pytest.approx(expected, rel=REL_TOL)


def test_numpy_arrays_are_accepted():
    np = pytest.importorskip("numpy")
    out = predict_gemm_ms("l4", m=np.array([64, 128]), n=np.int64(256), k=256.0, dtype="fp16")
    ref = predict_gemm_ms("l4", m=[64, 128], n=256, k=256, dtype="fp16")
    assert torch.equal(out, ref)


def test_single_element_list_stays_a_tensor():
    out = predict_gemm_ms("l4", m=[64], n=64, k=64)
    assert isinstance(out, torch.Tensor) and out.shape == (1,)


def test_zero_size_batch_costs_zero():
    assert predict_gemm_ms("h100_sxm5_80gb", m=4096, n=4096, k=4096, batch=0) == 0.0
    out = predict_gemm_ms("h100_sxm5_80gb", m=64, n=64, k=64, batch=[0, 2, 0])
    assert out[0] == 0.0 and out[2] == 0.0 and out[1] > 0.0


def test_huge_dims_are_finite_and_positive():
    # batch 4096, m = 2^20, n = k = 2^16: FLOPs = 2^65 ≈ 3.7e19, far past int32 and exact in fp64
    t = predict_gemm_ms("b200", m=2**20, n=2**16, k=2**16, batch=4096, dtype="bf16")
    assert math.isfinite(t) and t > 0.0
    assert t >= 2.0**65 / 2.25e15 * 1e3  # never under the bf16 compute floor


def test_same_call_same_number():
    kw = {"m": [3, 333, 3333], "n": 1024, "k": 77, "dtype": "float16"}
    assert torch.equal(predict_gemm_ms("a40", **kw), predict_gemm_ms("a40", **kw))


# ---- errors at the boundary ---------------------------------------------------------------


def test_unknown_device_lists_close_matches():
    with pytest.raises(ValueError, match=r"unknown device 'h100_sxm'.*'h100_sxm5_80gb'"):
        predict_gemm_ms("h100_sxm", m=8, n=8, k=8)


def test_unknown_dtype_names_it_and_the_nearest():
    with pytest.raises(ValueError, match=r"unknown dtype 'bfloat61'.*'bfloat16'"):
        predict_gemm_ms("h100_sxm5_80gb", m=8, n=8, k=8, dtype="bfloat61")


def test_fp8_without_fp8_units_is_an_error_naming_the_nearest_dtype():
    with pytest.raises(ValueError, match=r"'a100_pcie_40gb'.*float8_e4m3fn.*nearest.*'bfloat16'"):
        predict_gemm_ms("a100_pcie_40gb", m=8, n=8, k=8, dtype="fp8")
    with pytest.raises(ValueError, match=r"'tesla_t4'.*nearest.*'float16'.*h100_sxm5_80gb"):
        predict_gemm_ms("tesla_t4", m=8, n=8, k=8, dtype=torch.float8_e4m3fn)


@pytest.mark.parametrize("device", ["tesla_v100_sxm2", "tesla_t4"])
def test_bf16_without_bf16_tensor_cores_warns_and_predicts_the_fp32_path(device):
    # 8192³ bf16 on V100: FLOPs = 2 · 8192³ = 1.0995e12 at the fp32 rate (15.7e12) = 70.03 ms,
    # far above the memory term (3 · 8192² · 2 B / 900e9 = 0.45 ms), so the fp32 rate decides.
    with pytest.warns(UserWarning, match=rf"{device}.*no bf16 tensor cores.*'float16'"):
        t = predict_gemm_ms(device, m=8192, n=8192, k=8192, dtype="bf16", predictor=ROOF)
    fp32_peak = resolve_target(device).spec.peak("fp32")
    assert t == pytest.approx(2 * 8192**3 / fp32_peak * 1e3, rel=1e-12)


def test_bf16_on_a_bf16_device_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predict_gemm_ms("a100_pcie_40gb", m=8, n=8, k=8, dtype="bf16")


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"m": 0}, r"^m = 0: dims must be integers in \[1, 2\*\*53\]; nearest valid value: 1"),
        ({"m": 2**60}, r"^m = 1152921504606846976: .*nearest valid value: 9007199254740992"),
        ({"n": -5}, r"^n = -5: .*nearest valid value: 1"),
        ({"k": 3.5}, r"^k = 3\.5: dims must be integers.*nearest valid value: 4"),
        ({"m": [64, 128, 0]}, r"^m\[2\] = 0: "),
        ({"k": [2.0, float("nan")]}, r"^k\[1\] = nan: "),
        ({"n": float("inf")}, r"^n = inf: .*nearest valid value: 1"),
        ({"batch": -1}, r"^batch = -1: .*in \[0, 2\*\*53\]; nearest valid value: 0"),
        ({"m": "big"}, r"^m must be an integer or an array of integers, got 'big'"),
        ({"m": True}, r"^m must be an integer"),
        ({"m": [1, 2], "n": [1, 2, 3]}, r"do not broadcast.*m\(2,\), n\(3,\)"),
        ({"op": "gemm_XX"},
         r"^unknown op 'gemm_XX'; did you mean 'gemm_TN', 'gemm_NT', 'gemm_NN'\?$"),
    ],
)
def test_bad_dims_and_ops_name_the_value(kw, message):
    args = {"m": 64, "n": 64, "k": 64}
    args.update(kw)
    with pytest.raises(ValueError, match=message):
        predict_gemm_ms("l4", **args)


def test_profile_path_that_does_not_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        predict_gemm_ms(str(tmp_path / "missing.json"), m=8, n=8, k=8)


def test_unreadable_profile_names_the_file(tmp_path):
    # whether or not this installation reads profiles, the error names the file
    path = tmp_path / "profile.json"
    path.write_text('{"format": 3')
    with pytest.raises(ValueError, match="profile.json"):
        predict_gemm_ms(path, m=8, n=8, k=8)


# ---- op layout decides alignment ----------------------------------------------------------


class _Recorder:
    """Predictor that records the batch it was given and reports every explain key."""

    name = "recorder"
    version = "0"

    def __init__(self) -> None:
        self.seen: GemmBatch | None = None

    def predict(self, gemms: GemmBatch, device) -> Prediction:
        self.seen = gemms
        one = torch.ones(len(gemms), dtype=torch.float64)
        return Prediction(
            time_ms=gemms.m * 1e-3,
            bound=tuple("compute" if m > 100 else "memory" for m in gemms.m.tolist()),
            details={"tile_m": 128 * one, "tile_n": 64 * one, "waves": 2 * one, "h2": 0.5 * one},
        )


@pytest.mark.parametrize(
    "op, a, b, c",
    [
        # fp16, m = 8, n = 50257, k = 4096 (2-byte elements):
        # A@B: A's rows hold k (8192 B -> 16), B's rows hold n (100514 B -> 2), C's n (-> 2)
        ("matmul", 16, 2, 2),
        # x@Wᵀ: W is stored (n, k), so B's rows hold k too (-> 16)
        ("linear", 16, 16, 2),
        # BLAS column-major NN: lda = m (16 B -> 16), ldb = k (-> 16), ldc = m (-> 16)
        ("gemm_NN", 16, 16, 16),
    ],
)
def test_op_sets_operand_alignment(op, a, b, c):
    rec = _Recorder()
    predict_gemm_ms("l4", m=8, n=50257, k=4096, dtype="fp16", op=op, predictor=rec)
    assert rec.seen is not None
    assert (rec.seen.a_align_bytes.item(), rec.seen.b_align_bytes.item()) == (a, b)
    assert rec.seen.c_align_bytes.item() == c


def test_bias_flag_reaches_the_predictor():
    rec = _Recorder()
    predict_gemm_ms("l4", m=8, n=8, k=8, op="linear", bias=True, predictor=rec)
    assert rec.seen.bias.tolist() == [1.0]


# ---- explain ------------------------------------------------------------------------------


def test_explain_roofline_reports_only_what_it_computes():
    rows = explain("a100_pcie_40gb", m=[64, 8192], n=[64, 8192], k=[64, 8192], predictor=ROOF)
    assert [r["bound"] for r in rows] == ["memory", "compute"]
    for r in rows:
        assert set(r) == {"batch", "m", "n", "k", "dtype", "compute_ms", "memory_ms", "bound",
                          "time_ms"}
        assert r["time_ms"] == max(r["compute_ms"], r["memory_ms"])
    # 64³ fp32 from the hand-worked test above
    assert rows[0]["time_ms"] == pytest.approx(49_152 / 1.555e12 * 1e3, rel=1e-12)
    assert rows[0]["compute_ms"] == pytest.approx(524_288 / 19.5e12 * 1e3, rel=1e-12)


def test_explain_passes_predictor_details_and_invents_none():
    rows = explain("l4", m=[50, 500], n=8, k=8, batch=[1, 0], predictor=_Recorder())
    assert rows[0] == {
        "batch": 1, "m": 50, "n": 8, "k": 8, "dtype": "float32",
        "tile_m": 128, "tile_n": 64, "waves": 2, "h2": 0.5,
        "bound": "memory", "time_ms": pytest.approx(0.05),
    }
    assert isinstance(rows[0]["tile_m"], int)
    assert rows[1] == {"batch": 0, "m": 500, "n": 8, "k": 8, "dtype": "float32", "time_ms": 0.0}


def test_explain_time_matches_predict_gemm_ms_for_default_predictor():
    kw = {"m": [1, 96, 4096], "n": 4096, "k": 11008, "dtype": "bf16"}
    times = predict_gemm_ms("h100_sxm5_80gb", **kw)
    rows = explain("h100_sxm5_80gb", **kw)
    assert [r["time_ms"] for r in rows] == times.tolist()
    assert all(r["bound"] in ("compute", "memory") for r in rows)


def test_driver_names_with_a_slash_are_devices_not_paths():
    # the name torch gives each GCD of an MI250: one GCD
    a = predict_gemm_ms("AMD Instinct MI250X/MI250", m=64, n=64, k=64)
    assert a == predict_gemm_ms("mi250_gcd", m=64, n=64, k=64)


def test_device_of_the_wrong_type():
    with pytest.raises(TypeError, match="device must be a catalog id.*got 3"):
        predict_gemm_ms(3, m=8, n=8, k=8)


# ---- property: any shape, dtype and device -------------------------------------------------

def _runnable(device, dtype: str) -> bool:
    try:
        device.peak_flops_per_s(dtype)
        return True
    except ValueError:
        return False


_PAIRS = [(d.id, name) for d in tgc.list_devices() for name in DTYPES if _runnable(d, name)]
_DIM = st.integers(min_value=1, max_value=2**17)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=st.sampled_from(_PAIRS), m=_DIM, n=_DIM, k=_DIM,
       batch=st.integers(min_value=0, max_value=512), op=st.sampled_from(["matmul", "linear"]))
def test_any_gemm_is_finite_deterministic_and_above_the_physical_floor(pair, m, n, k, batch, op):
    device, dtype = pair
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bf16/tf32 on devices without them warn, by design
        t = predict_gemm_ms(device, m=m, n=n, k=k, batch=batch, dtype=dtype, op=op)
        again = predict_gemm_ms(device, m=m, n=n, k=k, batch=batch, dtype=dtype, op=op)
    assert t == again
    assert math.isfinite(t) and t >= 0.0
    if batch == 0:
        assert t == 0.0
        return
    spec, cd = tgc.get_device(device), DTYPES[dtype]
    flops = 2.0 * batch * m * n * k
    dram = batch * ((m * k + k * n) * cd.in_bytes + m * n * cd.out_bytes)
    floor_ms = max(flops / spec.peak_flops_per_s(dtype), dram / spec.dram_bw_bytes_per_s) * 1e3
    assert t >= floor_ms * (1 - 1e-9)


def test_threads_get_identical_results():
    from concurrent.futures import ThreadPoolExecutor

    kw = {"m": [1, 77, 4096, 50257], "n": 4096, "k": [4096, 11008, 128, 768], "dtype": "bf16"}
    ref = predict_gemm_ms("h100_sxm5_80gb", **kw)
    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(lambda _: predict_gemm_ms("h100_sxm5_80gb", **kw), range(16)))
    assert all(torch.equal(o, ref) for o in outs)


def test_profile_path_brings_its_device_and_predictor(tmp_path, monkeypatch):
    import json

    from torch_gemm_cost.hardware.catalog import spec_to_record
    from torch_gemm_cost.predict import query

    # the profile's predictor is stubbed: this checks the dispatch, not the calibration format
    rec = _Recorder()
    monkeypatch.setattr(query, "profile_predictor",
                        lambda target: rec if target.profile is not None else None)
    path = tmp_path / "profile.json"  # a profile by its content
    path.write_text(json.dumps({"format": "torch_gemm_cost.profile", "version": 1,
                                "device": spec_to_record(tgc.get_device("l4")),
                                "predictor": {"kind": "recorder"}}))
    # _Recorder predicts m · 1e-3 ms
    assert predict_gemm_ms(str(path), m=50, n=8, k=8) == pytest.approx(0.05)
    assert predict_gemm_ms(path, m=70, n=8, k=8) == pytest.approx(0.07)
    # an explicit predictor wins over the profile's
    assert predict_gemm_ms(path, m=70, n=8, k=8, predictor=ROOF) == predict_gemm_ms(
        "l4", m=70, n=8, k=8, predictor=ROOF)


def test_explain_details_of_the_default_predictor_are_in_range():
    # whichever keys the default predictor reports must hold physically sensible values
    rows = explain("a100_pcie_80gb", m=[1, 64, 8192], n=[768, 50257, 8192], k=[3072, 768, 8192],
                   dtype="fp16")
    checks = {
        "tile_m": lambda v: isinstance(v, int) and v >= 1,
        "tile_n": lambda v: isinstance(v, int) and v >= 1,
        "split_k": lambda v: isinstance(v, int) and v >= 1,
        "waves": lambda v: isinstance(v, int) and v >= 1,
        "last_wave_fill": lambda v: 0.0 < v <= 1.0,
        "h1": lambda v: 0.0 <= v <= 1.0,
        "h2": lambda v: 0.0 <= v <= 1.0,
        "util": lambda v: 0.0 < v <= 1.0,
        "mem_bw_bytes_per_s": lambda v: v > 0.0,
        "intensity_flops_per_byte": lambda v: v > 0.0,
        "compute_ms": lambda v: v >= 0.0,
        "memory_ms": lambda v: v >= 0.0,
    }
    for row in rows:
        assert row["time_ms"] > 0.0 and row["bound"] in ("compute", "memory")
        for key, ok in checks.items():
            if key in row:
                assert ok(row[key]), (key, row[key])


def test_shipped_hybrid_is_the_default_predictor_when_weights_ship() -> None:
    from torch_gemm_cost.predict import HybridPredictor, default_predictor, shipped_hybrid

    shipped = shipped_hybrid()
    assert isinstance(shipped, HybridPredictor)
    assert shipped is default_predictor()


def test_shipped_hybrid_without_weights_names_the_missing_file(monkeypatch) -> None:
    from torch_gemm_cost import predict

    # a checkout without weights: the default falls back to the roofline, and what needs the
    # hybrid itself is refused with the path it looked at
    monkeypatch.setattr(predict, "_shipped", lambda: RooflinePredictor())
    with pytest.raises(FileNotFoundError, match="hybrid_weights.json"):
        predict.shipped_hybrid()


def test_fp8_kernel_is_named_and_vllms_pays_its_cast():
    # the same fp8 GEMM under each kernel: torch._scaled_mm takes fp8 inputs (no cast); vLLM's
    # fp8 Linear casts its 4096 x 4096 bf16 input first, 32 rows deep on 132 SMs, 2 passes a
    # row: explain names the kernel and shows the cast's parts, which sum to its time less the
    # launch
    kw = {"m": 4096, "n": 4096, "k": 4096, "dtype": "fp8", "op": "linear"}
    blas = explain("h200_sxm_141gb", **kw)[0]
    vllm = explain("h200_sxm_141gb", fp8_kernel="vllm_cutlass", **kw)[0]
    assert blas["fp8_kernel"] == "torch_scaled_mm" and blas["cast_ms"] == 0.0
    assert vllm["fp8_kernel"] == "vllm_cutlass"
    assert (vllm["cast_rows_per_sm"], vllm["cast_passes"]) == (32.0, 2.0)
    assert vllm["cast_latency_ms"] == pytest.approx(32 * (0.92 + 0.51) * 1e-3, rel=1e-6)
    assert vllm["cast_ms"] == pytest.approx(
        vllm["cast_latency_ms"] + vllm["cast_bytes_ms"] + vllm["launch_ms"], rel=1e-5)
    assert predict_gemm_ms("h200_sxm_141gb", fp8_kernel="vllm_cutlass", **kw) == vllm["time_ms"]
    # a bf16 row names no fp8 kernel; an unknown kernel names the nearest
    assert "fp8_kernel" not in explain("h200_sxm_141gb", m=64, n=64, k=64, dtype="bf16")[0]
    with pytest.raises(ValueError, match="vllm_cutlass"):
        predict_gemm_ms("h200_sxm_141gb", fp8_kernel="vllm_cutlas", **kw)
