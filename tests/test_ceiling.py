"""The ceiling benchmark's three estimators, on hand-built rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from torch_gemm_cost.measured.gemm import MeasuredGemms, gemm_batch_from_columns

_spec = importlib.util.spec_from_file_location(
    "ceiling", Path(__file__).resolve().parents[1] / "benchmarks" / "ceiling.py"
)
ceiling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ceiling)


def _rows(gpu: list[str], dtype: list[str], m: list[int], latency_ms: list[float],
          source: str = "neusight-test") -> MeasuredGemms:
    n = len(gpu)
    g = gemm_batch_from_columns(op=["matmul"] * n, dtype=dtype, batch=[1] * n, m=m,
                                n=[64] * n, k=[64] * n)
    return MeasuredGemms(gemms=g, gpu=tuple(gpu), source=(source,) * n, timing=("event",) * n,
                         latency_ms=torch.tensor(latency_ms, dtype=torch.float64))


def test_oracle_levels_divide_out_each_gpu_and_dtype_median():
    data = _rows(["a"] * 3 + ["b"] * 2, ["float32"] * 3 + ["float16"] * 2,
                 [64, 128, 256, 64, 128], [1.0, 1.0, 1.0, 2.0, 2.0])
    pred = torch.tensor([2.0, 2.0, 3.0, 1.0, 1.0], dtype=torch.float64)
    out = ceiling.oracle_levels(data, pred)
    # gpu a: ratios 2, 2, 3, median 2 -> 1, 1, 1.5; gpu b: ratios 0.5, 0.5 -> 2, 2
    assert out.tolist() == pytest.approx([1.0, 1.0, 1.5, 2.0, 2.0])
    # MAPE on a: (0 + 0 + 0.5) / 3; on b: 0
    assert ceiling.per_gpu(data, out) == pytest.approx({"a": 0.5 / 3, "b": 0.0})


def test_knn_own_rows_recovers_a_constant_rate_and_keeps_dtypes_apart():
    # 20 fp32 rows at 1 GFLOP per ms and 20 fp16 rows at 10 on one GPU, interleaved in m
    m = [64 * (i + 1) for i in range(20)]
    flops = [2.0 * x * 64 * 64 for x in m]
    data = _rows(["a"] * 40, ["float32"] * 20 + ["float16"] * 20, m + m,
                 [f / 1e9 for f in flops] + [f / 1e10 for f in flops])
    pred = ceiling.knn_own_rows(data)
    # every neighbour of a row has its dtype's rate, so each time comes back exactly
    assert pred.tolist() == pytest.approx(data.latency_ms.tolist(), rel=1e-9)


def test_residual_correlation_pairs_shapes_both_gpus_timed():
    m = [64 * (i + 1) for i in range(60)]
    both = _rows(["a"] * 60 + ["b"] * 60, ["float32"] * 120, m + m, [1.0] * 120)
    # b's log errors are a's doubled: correlation +1
    wobble = torch.tensor([0.1 * ((i * 7) % 5 - 2) for i in range(60)], dtype=torch.float64)
    pred = torch.exp(torch.cat([wobble, 2 * wobble]))
    gpus, table = ceiling.residual_correlation(both, pred)
    assert gpus == ["a", "b"]
    assert table == [["a", "-", "+1.00"], ["b", "+1.00", "-"]]
    # fewer than 50 shared shapes: no figure
    few = _rows(["a"] * 40 + ["b"] * 40, ["float32"] * 80, m[:40] + m[:40], [1.0] * 80)
    _, table = ceiling.residual_correlation(few, torch.ones(80, dtype=torch.float64))
    assert table == [["a", "-", "-"], ["b", "-", "-"]]
