"""One model contract: every model's ``predict(batch, device)`` returns a ``Prediction``; and one
registry of the shipped fitted files, each read through one format-and-version check."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from torch_gemm_cost import get_device
from torch_gemm_cost.predict import GemmBatch, RooflinePredictor, shipped_hybrid
from torch_gemm_cost.predict.attention import AttentionBatch, AttentionCall, AttentionPredictor
from torch_gemm_cost.predict.base import Model, Prediction
from torch_gemm_cost.predict.collectives import CollectiveCall, CollectivePredictor, check_call
from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor
from torch_gemm_cost.predict.intervals import IntervalCalibration
from torch_gemm_cost.predict.ops import OpBatch, OpCostModel, load_op_costs
from torch_gemm_cost.predict.registry import (
    SHIPPED,
    check_format,
    load_file,
    load_shipped,
    shipped_path,
)
from torch_gemm_cost.records import OtherOp


def _op(name: str, cls: str, numel: int, dram_bytes: int) -> OtherOp:
    return OtherOp(module="m", module_type="M", op=name, node="n0", phase="forward",
                   op_class=cls, dtype="float16", numel=numel, dram_bytes=dram_bytes)


def _gemms() -> GemmBatch:
    return GemmBatch.from_dims(m=[1, 128, 4096], n=[4096, 4096, 11008], k=[4096, 4096, 4096],
                               dtype="fp16")


def _attention() -> AttentionBatch:
    return AttentionBatch.from_calls([
        AttentionCall("prefill", batch=2, q_len=2048, kv_len=2048, heads=32, kv_heads=8,
                      head_dim=128),
        AttentionCall("decode", batch=64, q_len=1, kv_len=4096, heads=32, kv_heads=8,
                      head_dim=128)])


def _ops() -> OpBatch:
    # a LayerNorm, a GELU and an add over 4096 x 1024 fp16 elements
    n = 4096 * 1024
    return OpBatch((_op("aten.native_layer_norm", "norm", n, 2 * 2 * n),
                    _op("aten.gelu", "elementwise", n, 2 * 2 * n),
                    _op("aten.add", "elementwise", n, 3 * 2 * n)))


def _collectives() -> list[CollectiveCall]:
    return [check_call(get_device("h100_sxm5_80gb"), "all_reduce", size_bytes=float(1 << 26),
                       num_gpus=8)]


# (model, batch, device, whether the model carries a calibrated interval there)
MODELS: list[Any] = [
    pytest.param(shipped_hybrid, _gemms, "a100_sxm4_80gb", True, id="gemm-hybrid"),
    pytest.param(RooflinePredictor, _gemms, "a100_sxm4_80gb", False, id="gemm-roofline"),
    pytest.param(AttentionPredictor.shipped, _attention, "h200_sxm_141gb", True,
                 id="attention"),
    pytest.param(load_op_costs, _ops, "a100_sxm4_80gb", False, id="ops"),
    pytest.param(lambda: load_shipped("collectives", CollectivePredictor.from_dict),
                 _collectives, "h100_sxm5_80gb", False, id="collectives"),
]


@pytest.mark.parametrize("model, batch, device, has_interval", MODELS)
def test_every_model_returns_one_prediction(model: Callable[[], Any],
                                            batch: Callable[[], Any], device: str,
                                            has_interval: bool) -> None:
    b, m = batch(), model()
    assert isinstance(m, Model)
    pred = m.predict(b, get_device(device))
    assert isinstance(pred, Prediction)
    n = len(b)
    assert pred.time_ms.shape == (n,) and len(pred) == n
    assert bool(torch.isfinite(pred.time_ms).all() and (pred.time_ms > 0).all())
    assert (pred.lo_ms is not None) == has_interval
    if pred.lo_ms is not None and pred.hi_ms is not None:
        assert pred.lo_ms.shape == pred.hi_ms.shape == (n,)
        assert bool((pred.lo_ms <= pred.time_ms).all() and (pred.time_ms <= pred.hi_ms).all())
        assert bool((pred.lo_ms > 0).all())
    assert len(pred.bound) in (0, n) and len(pred.kernel) in (0, n)
    assert all(v.shape == (n,) for v in pred.details.values())


def test_a_gemm_prediction_says_what_bounds_each_gemm() -> None:
    # on an A100 (312 TFLOP/s fp16, 2039 GB/s): m = 1 streams its 32 MiB weight, 2·4096² =
    # 33.5 MFLOP against 33.6 MB (memory); m = 4096, n = 11008 runs 369 GFLOP against 188 MB
    # (compute)
    pred = RooflinePredictor().predict(_gemms(), get_device("a100_sxm4_80gb"))
    assert pred.bound[0] == "memory" and pred.bound[2] == "compute"
    assert pred.kernel == ()


def test_a_prediction_refuses_what_is_not_one_value_per_item() -> None:
    t = torch.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"lo_ms has shape \(3,\); expected \(2,\)"):
        Prediction(t, lo_ms=torch.ones(3), hi_ms=torch.ones(3))
    with pytest.raises(ValueError, match="both lo_ms and hi_ms"):
        Prediction(t, lo_ms=t)
    with pytest.raises(ValueError, match="bound names 1 items; expected 2"):
        Prediction(t, bound=("compute",))
    with pytest.raises(ValueError, match="bound 'fast' is not one of"):
        Prediction(t, bound=("compute", "fast"))
    with pytest.raises(ValueError, match=r"details\['waves'\] has shape \(1,\)"):
        Prediction(t, details={"waves": torch.ones(1)})
    with pytest.raises(ValueError, match=r"shape \(N,\); got shape \(2, 1\)"):
        Prediction(t.reshape(2, 1))
    # an op the model does not price is NaN in the tensor, None in a list
    assert Prediction(torch.tensor([1.5, math.nan])).times_or_none() == [1.5, None]


def test_the_attention_model_takes_its_batch_warm_or_cold() -> None:
    model = AttentionPredictor.shipped()
    cold = _attention()
    warm = AttentionBatch.from_calls([
        AttentionCall("decode", batch=64, q_len=1, kv_len=4096, heads=32, kv_heads=8,
                      head_dim=128)], warm_l2=True)
    # 64·8·4096·128·2·2 B = 1.07 GB of KV cache cannot stay in the H200's 50 MB of L2; only
    # the new tokens' K/V write (64·8·128·2 elements read and written, 0.5 MB) does: warm is a
    # little faster
    warm_ms = model.predict(warm, "h200_sxm_141gb").time_ms.item()
    cold_ms = model.predict(cold.select([1]), "h200_sxm_141gb").time_ms.item()
    assert 0.99 * cold_ms < warm_ms < cold_ms
    assert bool(cold.select([1]).warm_l2 == 0) and bool(warm.select([0]).warm_l2 == 1)
    with pytest.raises(TypeError, match="AttentionBatch.from_calls"):
        model.predict(list(_attention_calls()), "h200_sxm_141gb")


def _attention_calls() -> list[AttentionCall]:
    return [AttentionCall("decode", batch=1, q_len=1, kv_len=16, heads=8, kv_heads=8,
                          head_dim=64)]


# ---------------------------------------------------------------- the registry
READERS: dict[str, Callable[[Any], Any]] = {
    "hybrid": HybridPredictor.from_dict,
    "attention": AttentionPredictor.from_dict,
    "op_costs": OpCostModel.read,
    "gemm_intervals": IntervalCalibration.from_dict,
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_each_shipped_file_names_the_format_the_registry_expects(name: str) -> None:
    doc = json.loads(shipped_path(name).read_text())
    assert doc["format"] == SHIPPED[name].format
    assert "version" in doc


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_shipped_file_is_read_once(name: str) -> None:
    assert load_shipped(name, READERS[name]) is load_shipped(name, READERS[name])


@pytest.mark.parametrize("name", sorted(READERS))
@pytest.mark.parametrize("field", ["format", "version"])
def test_a_tampered_copy_names_the_file_and_what_was_expected(tmp_path: Path, name: str,
                                                              field: str) -> None:
    doc = json.loads(shipped_path(name).read_text())
    expected = str(doc["version"])
    doc[field] = "torch_gemm_cost.other" if field == "format" else "0"
    path = tmp_path / f"tampered_{name}.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as err:
        load_file(name, path, READERS[name])
    message = str(err.value)
    assert f"tampered_{name}.json" in message
    assert f"reads version {expected} of format {SHIPPED[name].format!r}" in message
    assert SHIPPED[name].refit in message
    held = "'torch_gemm_cost.other'" if field == "format" else "version 0"
    assert held in message


def test_check_format_names_what_a_file_holds() -> None:
    check_format({"format": "torch_gemm_cost.attention", "version": "8"}, "attention", "8")
    with pytest.raises(ValueError, match=r"version None weights of format 'list'; this package "
                                         r"reads version 8 of format 'torch_gemm_cost.attention'"):
        check_format([1, 2], "attention", "8")
    with pytest.raises(ValueError, match="no shipped file 'weights'; known: hybrid"):
        check_format({}, "weights", "1")
