"""The label-consistency benchmark: measurement against measurement, no predictor."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from torch_gemm_cost.measured.gemm import load_gemms

_spec = importlib.util.spec_from_file_location(
    "label_consistency", Path(__file__).resolve().parents[1] / "benchmarks" / "label_consistency.py"
)
lc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lc)

LABELS = (
    "gpu,gpu_name,model,mode,seq_len,batch,option,num_layer,measured_total_ms,measured_fw_ms,"
    "measured_bwall_ms,neusight_pred_ms,neusight_err_pct\n"
    "t4,T4,bert_large,train,512,2,,24,160,60,100,150,6\n"
    "t4,T4,bert_large,train,512,8,,24,190,90,100,150,6\n"
    "t4,T4,bert_large,train,512,8,fusion,24,190,95,95,150,6\n"
    "t4,T4,bert_large,inf,512,8,,24,50,50,0,50,1\n"
)


def test_training_split_flags_forwards_above_0_7_of_the_backward(tmp_path):
    (tmp_path / "e2e").mkdir()
    (tmp_path / "e2e" / "neusight_labels.csv").write_text(LABELS)
    lines = lc.training_split(tmp_path)
    # two plain training rows (the fusion and inference rows are left out):
    # 60 / 100 = 0.60 is a normal split, 90 / 100 = 0.90 is flagged
    assert lines[0] == "2 training rows; 1 have a forward above 0.7 of the backward."
    table = lines[2]
    assert "0.6 " in table and "0.9 " in table
    assert table.count("above 0.7") == 1


def test_two_boards_pairs_identical_shapes(data_dir):
    data = load_gemms(data_dir, sources=["neusight-test"])
    a40 = lc._by_shape(data, "a100_pcie_40gb", "neusight-test")
    a80 = lc._by_shape(data, "a100_pcie_80gb", "neusight-test")
    common = set(a40) & set(a80)
    lines = lc.two_boards(data)
    assert lines[0].startswith(f"{len(common)} fp32 shapes")
    # the bins cover every common shape exactly once
    counts = [int(row.split("|")[2]) for row in lines[2].splitlines()[2:]]
    assert sum(counts) == len(common)


def test_event_floor_is_the_median_of_the_small_gemms(data_dir):
    data = load_gemms(data_dir, sources=["neusight"])
    g = data.gemms
    small = data.mask(gpu="tesla_t4", source="neusight") & (2.0 * g.batch * g.m * g.n * g.k < 1e7)
    row = next(r for r in lc.event_floor(data)[2].splitlines() if "tesla_t4" in r)
    assert f"{float(torch.median(data.latency_ms[small])):.4f}" in row
