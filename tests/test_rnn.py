"""Recurrent layers as the one cuDNN call a GPU runs: hand-worked GEMMs and cell kernels, FLOPs
against FlopCounterMode, and a KernelBench-sized LSTM captured as one node."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_gemm_cost import get_device
from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.predict import default_predictor
from torch_gemm_cost.predict.base import predict_distinct
from torch_gemm_cost.records import GemmBatch, extract


def meta_lstm(*args, **kwargs) -> tuple[nn.Module, torch.Tensor]:
    with torch.device("meta"):
        return nn.LSTM(*args, **kwargs), torch.ones(3, 5, 8)


@pytest.mark.parametrize("method", ["dispatch", "export"])
def test_lstm_hand_worked(method: str) -> None:
    model, x = meta_lstm(8, 16, 2, batch_first=True)  # x: B = 3, T = 5, 8 features
    captured = capture(model, (x,), method=method)
    calls = [n for n in captured.graph_module.graph.nodes if n.op == "call_function"
             and str(n.target).startswith("aten.lstm")]
    assert len(calls) == 1  # one call, not 5 steps × 2 layers of cell ops
    sites, others = extract(captured, torch.float32)
    # per layer: the input projection of all T·B = 15 rows to 4 gates · 16 = 64 (k = 8, then
    # k = 16 for layer 1, which reads layer 0's h), then T = 5 steps of (B = 3, 16) · W_hhᵀ
    one_layer = [("rnn_input", 15, 64)] + [("rnn_hidden", 3, 64, 16)] * 5
    got = [(s.op, s.m, s.n) if s.op == "rnn_input" else (s.op, s.m, s.n, s.k) for s in sites]
    assert got == one_layer + one_layer
    assert [s.k for s in sites if s.op == "rnn_input"] == [8, 16]
    assert all(s.b_transposed and not s.a_transposed for s in sites)  # x · Wᵀ
    assert [s.bias for s in sites if s.op == "rnn_input"] == [True, True]
    cells = [o for o in others if o.op == "aten.lstm"]
    # a cell per layer and step: 10; each reads both (3, 64) pre-activations and c, writes h
    # and c: 3·16 units · 4 B · (2·4 + 1 + 2) = 2,112 B
    assert len(cells) == 10
    assert {(c.op_class, c.numel, c.dram_bytes) for c in cells} == {("elementwise", 48, 2112)}


@pytest.mark.parametrize("kind,kwargs", [
    (nn.LSTM, {}), (nn.GRU, {}), (nn.RNN, {}), (nn.RNN, {"nonlinearity": "relu"}),
    (nn.LSTM, {"proj_size": 4}), (nn.GRU, {"bidirectional": True}),
    (nn.LSTM, {"bidirectional": True, "bias": False}),
])
def test_rnn_flops_as_flop_counter_counts_them(kind: type[nn.Module], kwargs: dict) -> None:
    with torch.device("meta"):
        model, x = kind(8, 16, 2, batch_first=True, **kwargs), torch.ones(3, 5, 8)
    sites, _ = extract(capture(model, (x,)), torch.float32)
    with FlopCounterMode(display=False) as counter:  # the oracle: torch's own step by step
        model(x)
    assert sum(s.flops for s in sites) == counter.get_total_flops() > 0


def test_kernelbench_sized_lstm_is_one_node_of_3072_steps() -> None:
    # KernelBench's 35_LTSM: 6 layers of 256 over 512 steps of a batch of 10
    with torch.device("meta"):
        model, x = nn.LSTM(128, 256, 6, batch_first=True), torch.ones(10, 512, 128)
    captured = capture(model, (x,))
    assert len(captured.graph_module.graph.nodes) < 40  # the weights, zeros for h0/c0, the call
    sites, others = extract(captured, torch.float32)
    assert sum(s.op == "rnn_hidden" for s in sites) == 6 * 512
    assert sum(o.op == "aten.lstm" for o in others) == 6 * 512


def test_repeated_steps_predicted_once_give_every_step_its_time() -> None:
    model, x = meta_lstm(8, 16, 2, batch_first=True)
    sites, _ = extract(capture(model, (x,)), torch.float32)
    batch, spec, predictor = GemmBatch.from_sites(sites), get_device("a100_sxm4_80gb"), \
        default_predictor()
    whole, distinct = predictor.predict(batch, spec), predict_distinct(predictor, batch, spec)
    # 12 GEMMs, 3 distinct (two input projections, one recurrent step): the same answer
    assert len(distinct) == 12 and distinct.bound == whole.bound
    assert torch.equal(distinct.time_ms, whole.time_ms)
    assert distinct.details.keys() == whole.details.keys()
    assert all(torch.equal(distinct.details[k], whole.details[k]) for k in whole.details)


def test_a_training_step_adds_each_cell_backward() -> None:
    model, x = meta_lstm(8, 16, 2, batch_first=True)
    sites, others = extract(capture(model, (x,), train=True), torch.float32, mode="train")
    cells = [o for o in others if o.op == "aten.lstm"]
    # 10 cells forward (2,112 B each), then 10 backward, recorded at extract's 2x rule of thumb
    assert [(o.phase, o.dram_bytes) for o in cells] == [("forward", 2112)] * 10 + [
        ("backward", 4224)] * 10
    # the weights need grad: per GEMM a dW, and a dx wherever its input needs grad (not x)
    assert sum(s.phase == "backward_dw" for s in sites) == 12
    assert sum(s.phase == "backward_dx" for s in sites) == 11  # all but layer 0's projection


def test_cell_kernels_cost_their_kernel_time_not_an_eager_launch() -> None:
    # cuDNN issues a recurrence's steps from C++, faster than they run: each cell kernel costs
    # its kernel time, the fused elementwise kernel's (vidur's `add`), with no per-kernel share
    # of an eager stream. The LSTM(8, 16, 2) above on a V100: a cell moves 3·16·4 B · (2·4
    # gates + 1 read + 2 written) = 2,112 B: 2,112 / (η 0.8825 · 900e9) = 2.7 ns of DRAM and
    # 2,112 / (17.59 B · 80 SMs · 1.38e9) = 1.1 ns at the SMs, so the kernel's floor (2.47 µs)
    # is its time, to 1e-4: under half of an eager kernel's 5 µs launch
    from torch_gemm_cost import estimate
    from torch_gemm_cost.predict.ops import load_op_costs

    model, x = meta_lstm(8, 16, 2, batch_first=True)
    report = estimate(model, (x,), device="tesla_v100_pcie_32gb", mode="forward")
    cells = [o for o in report.others if o.op.op == "aten.lstm"]
    table = load_op_costs()
    floor = table.fused["add"].floor_ms
    assert len(cells) == 10 and {o.op.dram_bytes for o in cells} == {2_112}
    assert all(o.time_ms == pytest.approx(floor, rel=1e-4) for o in cells)
    assert floor < table.launch_ms / 2
