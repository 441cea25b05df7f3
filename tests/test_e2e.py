"""The end-to-end benchmark: rows rebuilt as DATA.md says, whole-model records, MAPE tables."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from torch_gemm_cost.api import estimate
from torch_gemm_cost.predict import RooflinePredictor

_spec = importlib.util.spec_from_file_location(
    "e2e_bench", Path(__file__).resolve().parents[1] / "benchmarks" / "e2e.py"
)
e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e2e)


def test_rows_leave_out_options_and_switch(data_dir):
    rows = e2e.load_rows(data_dir)
    # 73 NeuSight labels - 7 with an option - 8 more switch-transformer rows, then the 18 H200
    # rows this project measured (benchmarks/data/h200/e2e), which carry no NeuSight prediction
    assert len(rows) == 58 + 18
    assert not any(r["option"] for r in rows)
    assert "switchxl4" not in {r["model"] for r in rows}
    assert {r["gpu"] for r in rows} == {
        "a100_pcie_40gb",
        "a100_pcie_80gb",
        "h200_sxm_141gb",
        "mi210",
        "tesla_p100_pcie_16gb",
        "tesla_p4",
        "tesla_t4",
        "tesla_v100_pcie_32gb",
    }
    assert {r["neusight_pred_ms"] for r in rows if r["gpu"] == "h200_sxm_141gb"} == {""}
    assert len(e2e.load_rows(data_dir, own_dirs=())) == 58


def test_build_follows_data_md(data_dir):
    net, args, kwargs = e2e.build(data_dir, "bert_large", 2, 128, "inference")
    assert type(net).__name__ == "BertForSequenceClassification"
    assert net.config._attn_implementation == "eager"
    assert all(p.is_meta and p.dtype == torch.float32 for p in net.parameters())
    (ids,) = args
    assert ids.shape == (2, 128) and ids.dtype == torch.int64
    net, _, kwargs = e2e.build(data_dir, "bert_large", 2, 128, "train")
    assert type(net).__name__ == "BertForPreTraining"
    assert set(kwargs) == {"attention_mask", "labels", "next_sentence_label"}
    net, _, kwargs = e2e.build(data_dir, "gpt2_large", 1, 64, "train")
    assert type(net).__name__ == "GPT2LMHeadModel" and set(kwargs) == {"labels", "use_cache"}


def test_bert_large_inference_records(data_dir):
    net, args, kwargs = e2e.build(data_dir, "bert_large", 8, 512, "inference")
    rep = estimate(net, args, kwargs, device="tesla_v100_pcie_32gb", predictor=RooflinePredictor())
    # per layer: q, k, v, out, ffn in, ffn out (6 linear) + QKᵀ, PV (2 matmul); 24 layers,
    # plus the pooler and the classifier: 24·8 + 2 = 194 GEMMs
    assert len(rep.gemms) == 194
    # eager attention materializes the (8, 16, 512, 512) scores: per layer one scale, one mask
    # add and one softmax over 33,554,432 elements
    big = [o for o in rep.others if o.op.numel == 8 * 16 * 512 * 512 and o.op.op_class != "view"]
    assert sorted({o.op.op for o in big}) == ["aten._softmax", "aten.add", "aten.mul"]
    assert len(big) == 3 * 24
    assert rep.unmodelled == ()
    assert rep.gpu_ms == pytest.approx(rep.gemm_ms + rep.other_ms)


def test_train_row_prices_backward_and_fused_dropout(data_dir):
    net, args, kwargs = e2e.build(data_dir, "bert_large", 2, 128, "train")
    rep = estimate(
        net, args, kwargs, device="a100_pcie_80gb", mode="train", predictor=RooflinePredictor()
    )
    phases = {g.site.phase for g in rep.gemms}
    assert phases == {"forward", "backward_dx", "backward_dw"}
    back = [o for o in rep.others if o.op.phase == "backward" and o.time_ms]
    assert back and sum(o.time_ms for o in back) > 0
    # dropout captured off-GPU as bernoulli_/div_/mul: one fused kernel, so div_ costs nothing
    divs = [o for o in rep.others if o.op.op == "aten.div_"]
    assert divs and all(o.time_ms == 0.0 for o in divs)
    assert rep.unmodelled == ()


def _result(gpu: str, mode: str, meas: float, ours: float, ns: float,
            fwd_share: float = 1 / 3) -> dict:
    """One rendered row; the measured forward is ``fwd_share`` of the measured total."""
    return {
        "gpu": gpu,
        "model": "m",
        "mode": mode,
        "seq": 1,
        "batch": 1,
        "measured_ms": meas,
        "ours_ms": ours,
        "gemm_ms": ours * 0.75,
        "other_ms": ours * 0.25,
        "unmodelled": 0,
        "gemm_cover_pct": 100.0,
        "meas_gemm_total_ms": meas,
        "neusight_ms": ns,
        "n_gemms": 1,
        "n_others": 1,
        "matched_pred_ms": 0.75 * ours,
        "matched_meas_ms": 0.75 * meas,
        "fwd_ms": ours / 3,
        "bwd_ms": ours * 2 / 3,
        "measured_fwd_ms": meas * fwd_share,
        "measured_bwd_ms": meas * (1 - fwd_share),
    }


def test_render_mape_hand_worked():
    results = [
        _result("tesla_t4", "inf", 100.0, 90.0, 105.0),  # ours 10% low, NeuSight 5% high
        _result("tesla_t4", "inf", 200.0, 230.0, 190.0),  # ours 15% high, NeuSight 5% low
        _result("a100_pcie_40gb", "inf", 100.0, 50.0, 100.0),
        _result("h200_sxm_141gb", "inf", 100.0, 80.0, float("nan")),  # no NeuSight prediction
    ]
    text = e2e.render(results, RooflinePredictor(), 1.0, "cmd")
    # t4: MAPE (10 + 15) / 2 = 12.5, bias (-10 + 15) / 2 = 2.5, NeuSight (5 + 5) / 2 = 5.0
    # GEMM pred/meas: 0.75·(90 + 230) / (0.75·(100 + 200)) = 320 / 300 = 1.07
    assert re.search(
        r"\| tesla_t4 +\| +inf +\| +2 \| +12\.5 \| +2\.5 \| +5\.0 \| +25\.0 \| +1\.07 \| +0\.0 \|",
        text,
    )
    # A100-40GB counts in the pooled line: (10 + 15 + 50) / 3 = 25.0, bias (-10 + 15 - 50) / 3
    # = -15.0; NeuSight (5 + 5 + 0) / 3 = 3.3. The H200 rows pool apart (no NeuSight figure).
    assert re.search(r"\| all NeuSight labels +\| +inf +\| +3 \| +25\.0 \| +-15\.0 \| +3\.3 \|",
                     text)
    assert re.search(r"\| this project's H200 +\| +inf +\| +1 \| +20\.0 \| +-20\.0 \| +nan +\|",
                     text)
    missed = text.split("target is")[1].split("##")[0]
    assert "a100_pcie_40gb inf: 50.0% (NeuSight 0.0%), mean signed error -50.0%" in missed
    assert "tesla_t4 inf: 12.5% (NeuSight 5.0%), mean signed error +2.5%" in missed
    assert "this project's H200 inf: 20.0%, mean signed error -20.0%" in missed

def test_a_miss_without_matched_gemms_names_the_level_of_its_own_gemms():
    # no NeuSight GEMM matches (matched sums 0: the GEMM pred/meas is NaN), so the bullet
    # carries what own_gemm_levels measured on the GPU's own fp32 GEMMs
    row = _result("h200_sxm_141gb", "inf", 100.0, 88.0, float("nan"))
    row.update(matched_pred_ms=0.0, matched_meas_ms=0.0)
    levels = {"h200_sxm_141gb": {"rows": 440.0, "ratio": 0.91, "r": 0.094, "share": 0.914}}
    missed = e2e.render([row], RooflinePredictor(), 1.0, "cmd", levels).split("target is")[1]
    assert ("h200_sxm_141gb inf: 12.0%, mean signed error -12.0%; no measured GEMM matches "
            "these models' shapes; on its own measured fp32 GEMMs of 1e10 FLOPs or more (440) "
            "our times are 0.91x the measured ones, with fp32 on its CUDA cores at an issue "
            "share of 0.91 (r = 0.094") in missed
    # without levels the bullet stops at the missing match
    plain = e2e.render([row], RooflinePredictor(), 1.0, "cmd").split("target is")[1]
    assert "shapes." in plain and "own measured" not in plain


class _Scaled:
    """A predictor that returns each row's measured time times a factor set by its m."""

    def __init__(self, factors: dict[int, float], r: float) -> None:
        self.factors, self.r = factors, r

    def predict_measured(self, rows: Any) -> torch.Tensor:
        f = torch.tensor([self.factors[int(m)] for m in rows.gemms.m], dtype=torch.float64)
        return rows.latency_ms * f

    def physical_constants(self) -> dict[str, float]:
        return {"simt_overhead_per_fma": self.r}


def test_own_gemm_levels_by_hand(tmp_path: Path) -> None:
    import gzip

    head = "gpu,gpu_name,source,timing,op,dtype,batch,m,n,k,bias,layout,latency_ms\n"
    # T4 fp32: three GEMMs of 1e10 FLOPs or more (2·2048·2048·2048 = 1.7e10 and up, each
    # slower than FLOPs / 8.1 TFLOP/s) and one of 2·64³ = 5.2e5, left out
    body = "".join(f"tesla_t4,Tesla T4,t,event,mm,float32,1,{m},2048,2048,0,A@B,{ms}\n"
                   for m, ms in ((2048, 5.0), (3072, 8.0), (4096, 10.0)))
    body += "tesla_t4,Tesla T4,t,event,mm,float32,1,64,64,64,0,A@B,0.02\n"
    (tmp_path / "gemm").mkdir()
    with gzip.open(tmp_path / "gemm" / "t.csv.gz", "wt") as f:
        f.write(head + body)
    model = _Scaled({2048: 0.8, 3072: 0.9, 4096: 1.1, 64: 5.0}, r=0.3)
    (level,) = e2e.own_gemm_levels(tmp_path, model, {"tesla_t4"}).values()
    # median of 0.8, 0.9, 1.1 = 0.9 over 3 rows; a T4 issues 128 lanes for its 64 FP32 lanes,
    # so min(1, 2 / (1 + 0.3)) = 1: no issue limit on Turing
    assert level == {"rows": 3.0, "ratio": pytest.approx(0.9), "r": 0.3, "share": 1.0}
    # a GPU with no fp32 rows of that size gets no entry
    assert e2e.own_gemm_levels(tmp_path, model, {"a40"}) == {}


def test_training_miss_reports_the_rows_whose_forward_label_is_consistent():
    results = [
        _result("a100_pcie_80gb", "train", 100.0, 95.0, 100.0),  # forward 1/3: consistent
        # forward 90 of 200 ms, backward 110: 90 / 110 = 0.82 > 0.7, a forward no kernel explains
        _result("a100_pcie_80gb", "train", 200.0, 140.0, 190.0, fwd_share=0.45),
    ]
    text = e2e.render(results, RooflinePredictor(), 1.0, "cmd")
    missed = text.split("target is")[1].split("##")[0]
    # all rows: (5 + 30) / 2 = 17.5%, bias (-5 - 30) / 2 = -17.5%, NeuSight (0 + 5) / 2 = 2.5%;
    # the consistent row alone: ours |95 - 100| / 100 = 5.0%, NeuSight 0.0%
    assert "a100_pcie_80gb train: 17.5% (NeuSight 2.5%), mean signed error -17.5%" in missed
    assert "on its 1 of 2 rows whose measured forward is at most 0.7 of the backward: " \
        "5.0% (NeuSight 0.0%)" in missed
    # the summary carries the same filter beside the headline
    assert re.search(r"\| a100_pcie_80gb +\| +train +\| +2 \| +17\.5 \|.*\| 1: 5\.0 +\|", text)
