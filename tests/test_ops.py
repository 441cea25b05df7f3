"""Memory-bound op costs: hand-worked times, backward and optimizer traffic, attention both ways,
and the fitter on synthetic and measured ops."""

from __future__ import annotations

import json
import math
from importlib import resources

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torch_gemm_cost import get_device
from torch_gemm_cost.api import estimate
from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.hardware.host import host_cpu
from torch_gemm_cost.predict.attention.sdpa import sdpa_times_ms
from torch_gemm_cost.predict.ops import (
    OP_CLASSES,
    OpBatch,
    OpCostModel,
    l2_bandwidth_bytes_per_s,
    load_op_costs,
    memory_time_ms,
    resident_l2_hit,
)
from torch_gemm_cost.records import OtherOp, adamw_ops, extract, optimizer_ops
from torch_gemm_cost.report import CostReport
from torch_gemm_cost.train.ops import VecRow, fit_class, load_vec, shared_eta

V100 = get_device("tesla_v100_pcie_32gb")  # 900 GB/s DRAM, 14 TFLOP/s fp32


def op_times(ops: list[OtherOp], table: OpCostModel) -> list[float | None]:
    """Each op's time on the V100 by ``table``, None where unmodelled."""
    return table.predict(OpBatch(tuple(ops)), V100).times_or_none()

def streamed_ms(report: CostReport, nbytes: int, eta: float, launch_ms: float) -> float:
    """One kernel moving ``nbytes`` at ``eta`` of the V100's DRAM, inside ``report``'s call:
    the share of its bytes that the call's L2-resident working set serves comes from the L2
    (``resident_l2_hit``: all of a small model's) at its rate."""
    hit = resident_l2_hit(report.memory.peak_bytes, V100)
    return launch_ms + (nbytes * (1 - hit) / (eta * 900e9)
                        + nbytes * hit / l2_bandwidth_bytes_per_s(V100)) * 1e3


# round constants, so the arithmetic below is checkable by hand
TABLE = OpCostModel.from_dict(
    {
        "classes": {
            c: {"eta": 0.9, "floor_ms": 0.03} for c in OP_CLASSES if c not in ("view", "other")
        }
        | {"norm": {"eta": 0.5, "floor_ms": 0.045}},
        "launch_ms": 0.005,
    }
)


def op(
    name: str,
    cls: str,
    numel: int,
    dram_bytes: int,
    phase: str = "forward",
    node: str = "n0",
    flops: int = 0,
) -> OtherOp:
    return OtherOp(
        module="m",
        module_type="M",
        op=name,
        node=node,
        phase=phase,
        op_class=cls,
        dtype="float32",
        numel=numel,
        dram_bytes=dram_bytes,
        flops=flops,
    )


def test_a_call_that_fits_in_l2_reads_it_from_there_hand_worked():
    # an add moving 8,000,000 B on the V100 (η 0.9 of 900 GB/s, 6 MiB of L2, 80 SMs at
    # 1,380 MHz): alone, 8e6 / (0.9·900e9) = 9.877 µs + a 5 µs launch = 0.014877 ms.
    # In a call whose every byte (3 MiB, half the L2) stays there between back-to-back calls,
    # the warm-L2 hit is 1 / (1 + (3 MiB / (0.5·6 MiB))^4) = 0.5: half the bytes from DRAM,
    # 4.938 µs, and half from the L2 at 80 · 5,120/108 B · 1.38e9 /s = 5.234e12 B/s, 0.764 µs:
    # 0.010703 ms. A call of 6 MiB or more (weights a model streams) evicts what it reads
    # before reading it again: none from the L2, the time alone to the bit
    add = op("aten.add", "elementwise", 1_000_000, 8_000_000)
    alone, half, full = (TABLE.predict(OpBatch((add,), resident_bytes=r), V100).time_ms[0]
                         for r in (None, 3 * 2**20, 6 * 2**20))
    assert float(alone) == pytest.approx(0.014877, rel=1e-4)
    assert float(half) == pytest.approx(0.010703, rel=1e-4)
    assert float(full) == float(alone)


def test_layer_norm_hand_worked():
    # LayerNorm over (8, 512, 1024) fp32 = 4096 rows of 1024:
    #   x read 16,777,216 B + y written 16,777,216 B + mean, rstd 2·4096·4 = 32,768 B
    #   + weight, bias 2·1024·4 = 8,192 B -> 33,595,392 B
    # 33,595,392 / (0.5 · 900e9 B/s) = 74.656 µs, plus one launch of 5 µs -> 0.079656 ms
    ln = op("aten.native_layer_norm", "norm", 4096 * 1024, 33_595_392)
    (t,) = op_times([ln], TABLE)
    assert t == pytest.approx(0.079656, rel=1e-5)
    # backward: dx (reads dy, x; writes dx) and dγ/dβ (reads dy, x): 2.5x the bytes, 2 kernels
    # 2.5 · 33,595,392 = 83,988,480 B / 450e9 = 186.641 µs + 2 · 5 µs -> 0.196641 ms
    (tb,) = op_times(
        [ln, op("aten.native_layer_norm", "norm", 4096 * 1024, 67_190_784, "backward")], TABLE
    )[1:]
    assert tb == pytest.approx(0.196641, rel=1e-5)


def test_layer_norm_through_estimate_uses_shipped_constants():
    with torch.device("meta"):
        ln = nn.LayerNorm(1024)
    report = estimate(ln, (torch.ones(8, 512, 1024, device="meta"),), device=V100)
    (rec,) = [o for o in report.others if o.op.op_class == "norm"]
    assert rec.op.dram_bytes == 33_595_392  # as worked out above
    table = load_op_costs()
    eta = table.eta_on(V100)[OP_CLASSES.index("norm")]  # Volta's own: a V100 was measured
    assert eta == table.eta_by_architecture["Volta"][OP_CLASSES.index("norm")]
    # the call's 32 MiB are more than the V100's 6 MiB of L2 holds: all from DRAM
    assert rec.time_ms == pytest.approx(table.launch_ms + 33_595_392 / (eta * 900e9) * 1e3)


def test_gelu_hand_worked():
    # GELU on (4096, 4096) fp32: read 67,108,864 B, write 67,108,864 B = 134,217,728 B
    # 134,217,728 / (0.9 · 900e9) = 165.701 µs + 5 µs launch -> 0.170701 ms
    # backward reads dy and x, writes dx: 1.5x = 201,326,592 B -> 248.551 µs + 5 µs
    fwd = op("aten.gelu", "elementwise", 4096 * 4096, 134_217_728)
    bwd = op("aten.gelu", "elementwise", 4096 * 4096, 268_435_456, "backward")
    t_fwd, t_bwd = op_times([fwd, bwd], TABLE)
    assert t_fwd == pytest.approx(0.170701, rel=1e-5)
    assert t_bwd == pytest.approx(0.253551, rel=1e-5)


def test_views_free_unmodelled_none_and_counted():
    view = op("aten.view", "view", 1 << 20, 0)
    odd = op("aten.my_custom_op", "other", 1 << 20, 8 << 20, node="n1")
    assert op_times([view, odd], TABLE) == [0.0, None]
    with torch.device("meta"):
        lin = nn.Linear(16, 16)
    report = estimate(lin, (torch.ones(4, 16, device="meta"),), device=V100)
    assert all(o.time_ms is not None for o in report.others)
    assert report.unmodelled == ()


class TwoBranches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(16, 16, bias=False)
        self.k = nn.Linear(16, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.q(x) + self.k(x)


def test_gradients_are_summed_where_a_tensor_forks_and_adds_pass_them_through():
    x = torch.ones(8, 16, requires_grad=True)
    report = estimate(TwoBranches(), (x,), device=V100, mode="train")
    back = [o for o in report.others if o.op.phase == "backward"]
    sums = [o for o in back if o.op.node.endswith(".grad_sum")]
    # x feeds q, k and the residual add: 3 uses, 2 sums of its 8·16·4 = 512 B gradient, each
    # reading two and writing one: 1,536 B in one elementwise kernel
    assert [o.op.dram_bytes for o in sums] == [1_536, 1_536]
    assert all(o.op.op_class == "elementwise" and o.time_ms > 0 for o in sums)
    table = load_op_costs()
    eta = table.eta_on(V100)[OP_CLASSES.index("elementwise")]
    assert sums[0].time_ms == pytest.approx(streamed_ms(report, 1_536, eta, table.launch_ms))
    # the two adds joining the branches pass dy through: no kernel
    joins = [o for o in back if o.op.op == "aten.add" and o not in sums]
    assert len(joins) == 2 and all(o.time_ms == 0.0 for o in joins)


def test_two_layer_mlp_train_op_counts():
    with torch.device("meta"):
        mlp = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10))
    opt = torch.optim.AdamW(mlp.parameters())
    report = estimate(
        mlp, (torch.ones(32, 64, device="meta"),), device=V100, mode="train", optimizer=opt
    )
    phases = [g.site.phase for g in report.gemms]
    # 2 forward GEMMs; backward: layer 2 needs dX and dW, layer 1 only dW (x needs no grad)
    assert phases.count("forward") == 2
    assert phases.count("backward_dx") == 1
    assert phases.count("backward_dw") == 2
    by_phase = {
        p: [o for o in report.others if o.op.phase == p]
        for p in ("forward", "backward", "optimizer")
    }
    assert [o.op.op for o in by_phase["forward"]] == ["aten.gelu"]
    # backward, last layer first: its bias gradient, GELU's, then layer 1's bias gradient.
    # A bias gradient sums dY (32, n) over the batch: reads 32·n, writes n fp32 elements:
    # layer 2: (320 + 10)·4 = 1,320 B; layer 1: (4,096 + 128)·4 = 16,896 B
    backward = by_phase["backward"]
    assert [o.op.op for o in backward] == ["aten.sum", "aten.gelu", "aten.sum"]
    assert [o.op.dram_bytes for o in backward if o.op.op == "aten.sum"] == [1_320, 16_896]
    assert {o.op.op_class for o in backward if o.op.op == "aten.sum"} == {"reduction"}
    # AdamW over 64·128 + 128 + 128·10 + 10 = 9,610 parameters in 4 tensors: 8 foreach kernels
    # moving 2+3+2+3+2+2+2+4 = 20 passes · 4 B = 80 B per parameter = 768,800 B
    adam = by_phase["optimizer"]
    assert len(adam) == 8
    assert sum(o.op.dram_bytes for o in adam) == 768_800
    assert all(o.time_ms and o.time_ms > 0 for o in report.others if o.op.op_class != "view")
    assert report.unmodelled == ()


def test_optimizer_boundary_errors():
    with torch.device("meta"):
        lin = nn.Linear(8, 8)
    x = torch.ones(2, 8, device="meta")
    with pytest.raises(ValueError, match="mode='train'"):
        estimate(lin, (x,), device=V100, optimizer=torch.optim.AdamW(lin.parameters()))
    with pytest.raises(ValueError, match="AdamW"):
        estimate(
            lin,
            (x,),
            device=V100,
            mode="train",
            optimizer=torch.optim.RMSprop(lin.parameters(), lr=0.1),
        )
    with pytest.raises(ValueError, match="n_params"):
        adamw_ops(-1, 1)
    with pytest.raises(ValueError, match="needs the model's parameters"):
        optimizer_ops("adamw")


def test_optimizer_by_name_counts_trained_parameters():
    with torch.device("meta"):
        lin = nn.Linear(100, 10)  # 1,000 weights + 10 biases
    lin.bias.requires_grad_(False)
    ops = optimizer_ops("adamw", lin.parameters())
    # 1,000 trained elements · 20 passes · 4 B = 80,000 B over the 8 foreach kernels
    assert sum(o.dram_bytes for o in ops) == 80_000
    assert {o.numel for o in ops} == {1000}


def test_adamw_ops_split_over_launches():
    ops = adamw_ops(1000, 220)  # 220 tensors: 2 launches of at most 110 per foreach op
    assert len(ops) == 16
    assert sum(o.numel for o in ops) == 8 * 1000


def test_dropout_priced_as_the_fused_gpu_kernel():
    report = estimate(
        nn.Dropout(0.1), (torch.ones(64, 256, requires_grad=True),), device=V100, mode="train"
    )
    kernels = [o for o in report.others if o.time_ms]
    # 16,384 elements: native_dropout reads x (4 B), writes y (4 B) and a bool mask (1 B):
    # 147,456 B; its backward reads dy and the mask, writes dx: the same 147,456 B
    assert [o.op.phase for o in kernels] == ["forward", "backward"]
    eta = load_op_costs().eta_on(V100)[OP_CLASSES.index("elementwise")]
    expected = streamed_ms(report, 147_456, eta, load_op_costs().launch_ms)
    assert [o.time_ms for o in kernels] == pytest.approx([expected, expected])


class _Attention(nn.Module):
    def __init__(self, sdpa: bool) -> None:
        super().__init__()
        self.sdpa = sdpa

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v)
        scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5  # (B, H, S, S)
        return torch.softmax(scores, dim=-1) @ v


def test_attention_eager_vs_sdpa():
    q = torch.ones(2, 4, 128, 32)  # (B, H, S, d): 8 heads of 128x128 scores
    eager = estimate(_Attention(False), (q, q, q), device=V100)
    fused = estimate(_Attention(True), (q, q, q), device=V100)
    assert [g.site.op for g in eager.gemms] == ["matmul", "matmul"]
    assert [g.site.op for g in fused.gemms] == ["sdpa_qk", "sdpa_pv"]
    table = load_op_costs()
    eta = table.eta_on(V100)[OP_CLASSES.index("softmax")]
    # eager: the scores are materialized; softmax reads and writes 8·128·128·4 B = 524,288 B each
    (soft,) = [o for o in eager.others if o.op.op_class == "softmax"]
    assert soft.time_ms == pytest.approx(streamed_ms(eager, 1_048_576, eta, table.launch_ms))
    # SDPA on a GPU: one flash attention kernel, priced by the attention model on its record;
    # its two GEMMs keep their FLOPs and are marked fused, with no time of their own
    (inner,) = [o for o in fused.others if o.op.op_class == "softmax"]
    assert inner.op.dram_bytes == 0 and inner.kernel == "flash_attention_torch_fa2_0"
    assert inner.time_ms == pytest.approx(sdpa_times_ms([inner.op], V100)[0][0])
    assert [(g.bound, g.time_ms) for g in fused.gemms] == [("fused", 0.0), ("fused", 0.0)]
    assert fused.gpu_ms == pytest.approx(inner.time_ms)
    # on a CPU the scores' softmax stays inside the two GEMMs: no launch and no score traffic,
    # 5 FLOPs per score on the vector units, 5 · 131,072 = 655,360 FLOPs
    cpu = host_cpu()
    on_cpu = estimate(_Attention(True), (q, q, q), device=cpu)
    (inner,) = [o for o in on_cpu.others if o.op.op_class == "softmax"]
    vector_flops = cpu.peak("fp32") or cpu.peak_flops_per_s("float32")
    assert inner.time_ms == pytest.approx(655_360 / vector_flops * 1e3)
    assert [g.bound for g in on_cpu.gemms] != ["fused", "fused"]


def test_memory_time_is_batched_and_nan_for_unmodelled():
    t = memory_time_ms(
        torch.tensor([9e8, 9e8]),
        torch.tensor([1.0, 0.0]),
        torch.tensor([0.5, float("nan")]),
        0.005,
        900e9,
    )
    # 9e8 B / (0.5 · 900e9) = 2 ms, + 5 µs
    assert t[0].item() == pytest.approx(2.005)
    assert math.isnan(t[1].item())


def test_shipped_table_credits_neusight_and_covers_every_class():
    doc = json.loads(resources.files("torch_gemm_cost").joinpath("data/op_costs.json").read_text())
    assert "NeuSight" in doc["provenance"]["data"] and "MIT" in doc["provenance"]["data"]
    table = load_op_costs()
    for c, eta in zip(OP_CLASSES, table.eta):
        if c == "other":
            assert math.isnan(eta)
        else:
            assert 0.2 < eta <= 1.0, c
    assert 0 < table.launch_ms < table.floor_ms[OP_CLASSES.index("elementwise")]


def test_fit_class_recovers_known_constants():
    # synthetic rows from one floor (0.02 ms) and two architectures' η on a 900 GB/s part,
    # 1 KB .. 1 GB each: a Volta board at η = 0.8 and a Pascal board at η = 0.6
    rows = []
    for gpu, eta in (("tesla_v100_pcie_32gb", 0.8), ("tesla_p100_pcie_16gb", 0.6)):
        for i in range(40):
            dram = 1e3 * 10 ** (6 * i / 39)
            rows.append(VecRow(gpu, "s", "add", "elementwise", 1, 1, dram, 900e9,
                               0.02 + dram / (eta * 900e9) * 1e3))
    by_arch, floor = fit_class(rows, steps=1500, lr=0.05)
    assert by_arch == pytest.approx({"Volta": 0.8, "Pascal": 0.6}, rel=0.02)
    assert floor == pytest.approx(0.02, rel=0.02)
    # an architecture nobody measured: the geometric mean, sqrt(0.8 · 0.6) = 0.69282
    assert shared_eta({"Volta": 0.8, "Pascal": 0.6}) == pytest.approx(0.69282, rel=1e-5)


def test_a_device_takes_its_architectures_eta_else_the_shared_one():
    table = OpCostModel.from_dict({
        "classes": {c: {"eta": 0.7, "floor_ms": 0.03, "eta_by_architecture": {"Volta": 0.9}}
                    for c in OP_CLASSES if c not in ("view", "other")},
        "launch_ms": 0.005,
    })
    i = OP_CLASSES.index("elementwise")
    assert table.eta_on(V100)[i] == 0.9
    assert table.eta_on(get_device("b200"))[i] == 0.7  # Blackwell: no vec rows measured
    # 9e8 B on the V100 (900 GB/s) at 0.9: 1.1111 ms + 5 µs launch
    big = op("aten.add", "elementwise", 1, 900_000_000)
    assert op_times([big], table)[0] == pytest.approx(1.0 / 0.9 + 0.005, rel=1e-9)


def test_fit_on_measured_layer_norm_leaving_a_gpu_out(data_dir):
    rows = [r for r in load_vec(data_dir) if r.op_class == "norm"]
    train = [r for r in rows if r.gpu not in ("tesla_t4", "a100_pcie_80gb")][::4]
    by_arch, floor = fit_class(train, steps=300)
    assert "Turing" not in by_arch  # the T4 is Turing's only board: held out, it is unseen
    eta = shared_eta(by_arch)
    held = [r for r in rows if r.gpu == "tesla_t4"]
    pred = [floor + r.dram_bytes / (eta * r.bw_bytes_per_s) * 1e3 for r in held]
    mape = sum(abs(p - r.latency_ms) / r.latency_ms for p, r in zip(pred, held)) / len(held)
    assert 0.3 < eta < 0.8 and 0.02 < floor < 0.08
    assert mape < 0.2  # 12.0% in train/ops.py's evaluation (fitted on every other chip)


def test_backward_op_without_forward_twin_moves_its_own_bytes():
    # e.g. a bias gradient: column sums of a (4096, 1024) fp32 output gradient
    # 4096·1024·4 + 1024·4 = 16,781,312 B / (0.9 · 900e9) = 20.7177 µs + 5 µs -> 0.0257177 ms
    bias_grad = op("aten.sum", "reduction", 1024, 16_781_312, "backward", node="bias0")
    (t,) = op_times([bias_grad], TABLE)
    assert t == pytest.approx(0.0257177, rel=1e-5)


def test_fitter_script_writes_a_loadable_table(data_dir, tmp_path, capsys):
    from torch_gemm_cost.train.ops import main

    out = tmp_path / "op_costs.json"
    assert main(["--data", str(data_dir), "--out", str(out), "--steps", "3"]) == 0
    table = OpCostModel.load(out)
    assert len(table.eta) == len(OP_CLASSES)
    doc = json.loads(out.read_text())
    # every measured GPU is scored with its chip held out, the H200 included
    assert set(doc["leave_chip_out"]["norm"]) >= {"a100_pcie_80gb", "tesla_t4", "h200_sxm_141gb"}
    assert "h200_sxm_141gb" in doc["provenance"]["train_gpus"]
    assert "tesla_t4" in capsys.readouterr().out


def test_estimate_prices_adamw_by_name_over_the_models_parameters():
    with torch.device("meta"):
        mlp = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10))
    x = torch.ones(32, 64, device="meta")
    by_name = estimate(mlp, (x,), device=V100, mode="train", optimizer="adamw")
    by_instance = estimate(
        mlp, (x,), device=V100, mode="train", optimizer=torch.optim.AdamW(mlp.parameters())
    )
    # 9,610 parameters · 80 B, as in test_two_layer_mlp_train_op_counts
    for report in (by_name, by_instance):
        assert sum(o.op.dram_bytes for o in report.others if o.op.phase == "optimizer") == 768_800
    assert by_name.total_ms == pytest.approx(by_instance.total_ms)


def test_fused_op_hand_worked_on_an_a40():
    from torch_gemm_cost.predict.ops import FusedOpCost, fused_op_bytes, fused_time_ms

    a40 = get_device("a40")  # 696 GB/s, 84 SMs at 1.74 GHz
    # a fused RMSNorm over 2048 tokens of 4096 fp16: x read and y written, 2 · 2048·4096·2 B,
    # and the weight, 4096·2 B: 33,562,624 B in one kernel
    nbytes, kernels = fused_op_bytes("rms_norm_fused", 2048, 4096, 2)
    assert (nbytes, kernels) == (33_562_624, 1)
    # DRAM: 33,562,624 / (0.8 · 696e9) = 60.278 µs; SMs: 33,562,624 / (4 · 84 · 1.74e9) =
    # 57.407 µs; with p = 1 the two add: 117.685 µs, and a launch of 5 µs
    cost = FusedOpCost(sm_bytes_per_cycle=4.0, floor_ms=0.004)
    t = fused_time_ms(torch.tensor([float(nbytes)]), torch.ones(1), cost, 0.8, a40, 0.005, 1.0)
    assert t.item() == pytest.approx(0.122685, rel=1e-5)
    # vidur's add3 is two adds of three passes each
    assert fused_op_bytes("add3", 10, 10, 2) == (1_200, 2)
    with pytest.raises(ValueError, match="unknown fused op 'rms'"):
        fused_op_bytes("rms", 1, 1, 2)


def test_fit_fused_ops_recovers_known_constants():
    from torch_gemm_cost.predict.ops import fused_time_ms_of
    from torch_gemm_cost.train.ops import FusedRows, fit_fused_ops, predict_fused

    # an op at η 0.8 and 6 B per SM-cycle on two GPUs unlike each other, 64 KB .. 512 MB
    sizes = torch.logspace(math.log10(6.4e4), math.log10(5.12e8), 30, dtype=torch.float64)
    gpus = ("a100_sxm4_80gb", "a40")
    bw = {g: get_device(g).dram_bw_bytes_per_s for g in gpus}
    smc = {g: get_device(g).sm_count * get_device(g).boost_clock_mhz * 1e6 for g in gpus}
    b = torch.cat([sizes, sizes])
    gpu = tuple(g for g in gpus for _ in sizes)
    rows = FusedRows(gpu=gpu, op=("gelu",) * len(b), measured_op=("gelu",) * len(b),
                     dram_bytes=b, kernels=torch.ones_like(b),
                     dram_bw_bytes_per_s=torch.tensor([bw[g] for g in gpu]),
                     sm_cycles_per_s=torch.tensor([smc[g] for g in gpu]),
                     l2_bytes=torch.full_like(b, 1.0),  # no warm L2 to speak of
                     latency_ms=torch.zeros_like(b))
    y = fused_time_ms_of(b, rows.kernels, torch.tensor(0.8), torch.tensor(6.0),
                         rows.dram_bw_bytes_per_s, rows.sm_cycles_per_s, 0.0, 2.0, 0.0, 0.003)
    rows = FusedRows(**{**rows.__dict__, "latency_ms": y})
    costs, eta, p = fit_fused_ops(rows, steps=1500)
    pred = predict_fused(rows, costs, eta, p)
    assert ((pred - y).abs() / y).max() < 0.03
    assert eta == pytest.approx(0.8, rel=0.1)
    assert costs["gelu"].sm_bytes_per_cycle == pytest.approx(6.0, rel=0.15)


@pytest.mark.data
def test_shipped_fused_ops_are_scored_with_each_chip_held_out():
    doc = json.loads(resources.files("torch_gemm_cost").joinpath("data/op_costs.json").read_text())
    fused = doc["fused_ops"]
    assert set(fused["ops"]) == {"rms_norm_fused", "layer_norm", "silu_and_mul_fused",
                                 "rope_fused", "gelu", "add", "embedding"}
    assert "vidur" in fused["data"] and "MIT" in fused["data"]
    for op, per_gpu in fused["leave_chip_out"].items():
        assert set(per_gpu) == {"a100_sxm4_80gb", "a40"}, op
    assert set(load_op_costs().fused) == set(fused["ops"])


def test_fused_ops_refuse_a_table_with_a_share_per_op():
    # the DRAM share is the memory system's, one for every fused op; a table written with one
    # per op (format 1) is refused with what to do, not read with an arbitrary op's η
    old = {"classes": {c: {"eta": 0.9, "floor_ms": 0.03} for c in OP_CLASSES
                       if c not in ("view", "other")},
           "launch_ms": 0.005,
           "fused_ops": {"roof_p": 4.0, "ops": {
               "gelu": {"eta": 0.8, "sm_bytes_per_cycle": 6.0, "floor_ms": 0.003}}}}
    with pytest.raises(ValueError, match="fused_ops lack 'eta'.*train.ops"):
        OpCostModel.from_dict(old)


class KernelBenchOps(nn.Module):
    """Ops KernelBench's programs run that had no cost model: HardSwish, HuberLoss, torch.diag
    of a vector, ViT's patch unfold and an RNN cell's unsafe_split."""

    def forward(self, x: torch.Tensor, t: torch.Tensor, d: torch.Tensor) -> tuple:
        return (F.hardswish(x), F.smooth_l1_loss(x, t), torch.diag(d), x.unfold(1, 4, 4),
                x.unsafe_split(4096, dim=1))


def test_kernelbench_ops_hand_worked():
    with torch.device("meta"):
        inputs = (torch.ones(128, 16384), torch.ones(128, 16384), torch.ones(4096))
    others = extract(capture(KernelBenchOps(), inputs), torch.float32)[1]
    got = {o.op: (o.op_class, o.dram_bytes) for o in others}
    # x is 128·16384 = 2,097,152 fp32 elements = 8,388,608 B
    assert got == {
        "aten.hardswish": ("elementwise", 16_777_216),  # x read, y written: 2·8,388,608 B
        "aten.smooth_l1_loss": ("reduction", 16_777_220),  # x and t read, the mean written: + 4 B
        "aten.diag_embed": ("copy", 67_125_248),  # 4096·4 B read, the 4096² matrix written
        "aten.unfold": ("view", 0),  # a strided window over x: a view moves nothing
        "aten.unsafe_split": ("view", 0),  # split without alias checks: views of x
    }
    # 16,777,216 / (0.9 · 900e9) = 20.7126 µs + 5 µs launch -> 0.0257126 ms
    # the loss: its elementwise loss tensor written and read back by the mean (predict/rows.py),
    # 2·16,777,220 = 33,554,440 B / 810e9 = 41.4252 µs + 2 launches of 5 µs -> 0.0514252 ms
    # 67,125,248 / 810e9 = 82.8707 µs + 5 µs -> 0.0878707 ms; views: 0
    times = dict(zip(got, op_times(list(others), TABLE)))
    assert times["aten.hardswish"] == pytest.approx(0.0257126, rel=1e-5)
    assert times["aten.smooth_l1_loss"] == pytest.approx(0.0514252, rel=1e-5)
    assert times["aten.diag_embed"] == pytest.approx(0.0878707, rel=1e-5)
    assert times["aten.unfold"] == 0.0 and times["aten.unsafe_split"] == 0.0
