"""Training: the ``train`` command, weights metadata, scores and leave-one-chip-out."""

from __future__ import annotations

import gzip
import json
import math

import pytest
import torch

from torch_gemm_cost.cli import main
from torch_gemm_cost.measured.gemm import MeasuredGemms, load_gemms
from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor
from torch_gemm_cost.records.types import GemmBatch
from torch_gemm_cost.train.gemm import (
    CREDITS,
    GroupScore,
    leave_one_chip_out,
    overall,
    score_groups,
)

HEADER = "gpu,gpu_name,source,timing,op,dtype,batch,m,n,k,bias,layout,latency_ms\n"


def small_data(tmp_path):
    """Three GPUs, two sources: a few shapes each, latency from a crude 70%-of-peak model."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    peaks = {"tesla_t4": (8.1e12, 320e9), "tesla_v100_pcie_32gb": (14e12, 900e9),
             "a100_pcie_40gb": (19.5e12, 1555e9)}
    lines = [HEADER]
    for gpu, (peak, bw) in peaks.items():
        for m, n, k in ((64, 64, 64), (512, 512, 512), (2048, 1024, 4096), (4096, 4096, 4096)):
            t = max(2 * m * n * k / (0.7 * peak), 4 * (m * k + k * n + m * n) / (0.8 * bw))
            lines.append(f"{gpu},x,neusight,event,bmm,float32,1,{m},{n},{k},0,A@B,"
                         f"{t * 1e3 + 0.02:.6f}\n")
            lines.append(f"{gpu},x,vidur,kernel,linear,float32,1,{m},{n},{k},0,x@W^T,"
                         f"{t * 1e3 + 0.003:.6f}\n")
    (tmp_path / "gemm").mkdir()
    with gzip.open(tmp_path / "gemm" / "small.csv.gz", "wt") as fh:
        fh.write("".join(lines))
    return tmp_path


def test_scores_by_hand() -> None:
    d = load_gemms_from_rows()
    # measured 1.0, 2.0, 4.0; predicted 1.05 (5%), 2.4 (20%), 2.0 (50%)
    scores = score_groups(d, torch.tensor([1.05, 2.4, 2.0], dtype=torch.float64))
    (s,) = scores
    assert isinstance(s, GroupScore) and s.rows == 3
    assert s.mape == pytest.approx((0.05 + 0.2 + 0.5) / 3)
    assert s.median_ape == pytest.approx(0.2)
    assert s.within_10 == pytest.approx(1 / 3) and s.within_25 == pytest.approx(2 / 3)
    assert overall(scores) == pytest.approx(s.mape)


def load_gemms_from_rows():
    from torch_gemm_cost.measured.gemm import MeasuredGemms, gemm_batch_from_columns

    g = gemm_batch_from_columns(op=["bmm"] * 3, dtype=["float32"] * 3, batch=[1] * 3,
                                m=[8] * 3, n=[8] * 3, k=[8] * 3)
    return MeasuredGemms(gemms=g, gpu=("tesla_t4",) * 3, source=("neusight",) * 3,
                         timing=("event",) * 3,
                         latency_ms=torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))


def test_train_command_writes_loadable_weights_with_provenance(tmp_path) -> None:
    data = small_data(tmp_path)
    out = tmp_path / "w.json"
    rc = main(["train", "--data", str(data), "--own-data", "none", "--out", str(out),
               "--steps", "20", "--skip-ops"])
    assert rc == 0
    doc = json.loads(out.read_text())
    meta = doc["metadata"]
    assert meta["data_sources"] == list(CREDITS)
    assert {c["license"] for c in meta["data_sources"]} == {"MIT", "Apache-2.0", "BSD-3-Clause"}
    assert meta["training_command"].startswith("torch-gemm-cost ")
    assert meta["trained_rows"] == 24
    assert math.isfinite(meta["metrics"]["overall_group_mape"])
    assert len(meta["metrics"]["groups"]) == 6  # 3 GPUs × 2 sources, one dtype
    model = HybridPredictor.load(out)
    assert model.steps == 20
    # fine-tuning from those weights
    out2 = tmp_path / "w2.json"
    assert main(["train", "--data", str(data), "--own-data", "none", "--out", str(out2),
                 "--steps", "3", "--warm-start", str(out), "--skip-ops"]) == 0
    assert json.loads(out2.read_text())["metadata"]["warm_start_from"] == str(out)


def test_train_command_rejects_bad_data(tmp_path, capsys) -> None:
    assert main(["train", "--data", str(tmp_path), "--out", str(tmp_path / "w.json")]) == 2
    assert "no gemm/ directory" in capsys.readouterr().err
    (tmp_path / "gemm").mkdir()
    (tmp_path / "gemm" / "bad.csv").write_text(HEADER + "tesla_t4,x,s,event,bmm,float99,1,8,8,8,0,"
                                               "A@B,0.1\n")
    assert main(["train", "--data", str(tmp_path), "--out", str(tmp_path / "w.json")]) == 2
    assert "bad.csv line 2, column 'dtype'" in capsys.readouterr().err


def test_leave_one_chip_out_never_trains_on_the_held_chip(tmp_path) -> None:
    d = load_gemms(small_data(tmp_path))
    seen: list[set[str]] = []

    class Spy(HybridPredictor):
        def fit(self, measured, **kw):
            seen.append(set(measured.gpu))
            return super().fit(measured, **kw)

    pred = leave_one_chip_out(d, lambda seed: Spy(steps=5, seed=seed), chips=["TU104", "GA100"])
    # chips in sorted order: GA100 first, then TU104
    assert seen == [{"tesla_v100_pcie_32gb", "tesla_t4"},
                    {"tesla_v100_pcie_32gb", "a100_pcie_40gb"}]
    v100 = d.mask(gpu="tesla_v100_pcie_32gb")
    assert torch.isnan(pred[v100]).all() and torch.isfinite(pred[~v100]).all()


def test_boards_of_one_chip_leave_together() -> None:
    # three A100 boards and an A40: holding out GA100 fits on the A40 alone
    g = GemmBatch.from_dims(m=[64] * 4, n=[64] * 4, k=[64] * 4, dtype="float16")
    gpus = ("a100_pcie_40gb", "a100_sxm4_80gb", "a100_pcie_80gb", "a40")
    d = MeasuredGemms(gemms=g, gpu=gpus, source=("vidur",) * 4, timing=("kernel",) * 4,
                      latency_ms=torch.full((4,), 0.01, dtype=torch.float64))
    seen: list[set[str]] = []

    class Spy(HybridPredictor):
        def fit(self, measured, **kw):
            seen.append(set(measured.gpu))
            return super().fit(measured, **kw)

    pred = leave_one_chip_out(d, lambda seed: Spy(steps=2, seed=seed), chips=["GA100"])
    assert seen == [{"a40"}]
    assert torch.isfinite(pred[:3]).all() and torch.isnan(pred[3])


def test_shipped_weights_carry_credit_and_metrics() -> None:
    from torch_gemm_cost.predict import default_predictor, shipped_weights_path

    if not shipped_weights_path().is_file():
        pytest.skip("no shipped weights in this checkout")
    model = default_predictor()
    assert isinstance(model, HybridPredictor)
    meta = model.metadata_
    assert meta["data_sources"] == list(CREDITS)
    assert "train" in meta["training_command"]
    assert meta["metrics"]["groups"]


def test_train_takes_own_data_beside_the_shared_data(tmp_path) -> None:
    data = small_data(tmp_path / "main")
    own = tmp_path / "own"
    (own / "gemm").mkdir(parents=True)
    # aligned and one-off Linear layers measured on an H200: the one-off ones run 3x longer
    lines = [HEADER]
    for m in (512, 2048):
        t = 2 * m * 4096 * 4096 / 500e12 * 1e3
        lines.append(f"h200_sxm_141gb,x,tgc-align,event,linear,bfloat16,1,{m},4096,4096,0,"
                     f"x@W^T,{t:.6f}\n")
        lines.append(f"h200_sxm_141gb,x,tgc-align,event,linear,bfloat16,1,{m},4095,4096,0,"
                     f"x@W^T,{3 * t:.6f}\n")
    (own / "gemm" / "tgc-align.csv").write_text("".join(lines))
    out = tmp_path / "w.json"
    assert main(["train", "--data", str(data), "--own-data", str(own), "--out",
                 str(out), "--steps", "10", "--skip-ops"]) == 0
    meta = json.loads(out.read_text())["metadata"]
    assert "h200_sxm_141gb" in meta["trained_gpus"] and meta["measured_rows"] == 24 + 4
    assert main(["train", "--data", str(data), "--own-data", "none", "--out",
                 str(out), "--steps", "2", "--skip-ops"]) == 0
    assert "h200_sxm_141gb" not in json.loads(out.read_text())["metadata"]["trained_gpus"]


def test_train_rejects_own_data_without_gemms(tmp_path, capsys) -> None:
    data = small_data(tmp_path / "main")
    assert main(["train", "--data", str(data), "--own-data", str(tmp_path / "nowhere"),
                 "--out", str(tmp_path / "w.json"), "--skip-ops"]) == 2
    assert "--own-data" in capsys.readouterr().err
