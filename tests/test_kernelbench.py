"""KernelBench's programs estimate end to end: a handful, one for each way the 250 used to fail
(an op without a cost model, an einsum, an RNN, a constructor that reads values, CUDA inputs),
each priced with no unmodelled op. Skipped without the data (DATA.md, data/kernelbench)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import DATA_DIR
from torch import nn

import torch_gemm_cost as tgc
from torch_gemm_cost.measured.kernelbench import build, programs
from torch_gemm_cost.predict.host import HostCosts

PROBLEMS = DATA_DIR / "kernelbench" / "problems"
V0, V01 = "v0_0228e57", "v0.1_48eb3a0"
# (tree, level, number): why it is here
SMOKE = {
    (V0, 1, 12): "torch.diag: aten.diag_embed",
    (V0, 1, 96): "HuberLoss: aten.smooth_l1_loss",
    (V0, 2, 69): "HardSwish: aten.hardswish",
    (V0, 3, 28): "ViT's patches: Tensor.unfold, a view",
    (V0, 3, 29): "Swin's constructor reads .item(): built on the CPU",
    (V0, 3, 33): "nn.RNN: one cuDNN call",
    (V0, 3, 48): "Mamba-2: four-operand einsums",
    (V01, 1, 97): "inputs made with device='cuda', in fp16",
}


@pytest.fixture(scope="module")
def problems() -> Path:
    if not PROBLEMS.is_dir():
        pytest.skip(f"KernelBench programs not found at {PROBLEMS.resolve()} "
                    "(set TORCH_GEMM_COST_DATA)")
    return PROBLEMS


def test_every_tree_holds_250_programs(problems: Path) -> None:
    for tree in (V0, V01):
        found = programs(problems / tree)
        assert [sum(p.level == lv for p in found) for lv in (1, 2, 3)] == [100, 100, 50]


@pytest.mark.parametrize("key", list(SMOKE), ids=[f"{t}-l{lv}-{n}" for t, lv, n in SMOKE])
def test_program_estimates_with_every_op_priced(problems: Path, key: tuple) -> None:
    tree, level, number = key
    (program,) = [p for p in programs(problems / tree, (level,)) if p.number == number]
    built = build(program)
    assert built.device == ("cpu" if number == 29 and level == 3 else "meta"), built.meta_error
    report = tgc.estimate(built.model, built.inputs, device="a100_sxm4_80gb")
    assert report.unmodelled == (), SMOKE[key]
    assert report.total_ms > 0 and all(o.time_ms is not None for o in report.others)
    if tree == V01:  # the fp16 inputs of a model without parameters set the dtype
        assert report.dtype == "float16"


class Attention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def test_a_model_without_parameters_takes_its_inputs_dtype() -> None:
    with torch.device("meta"):
        qkv = [torch.ones(2, 4, 64, 32, dtype=torch.float16) for _ in range(3)]
    assert tgc.estimate(Attention(), tuple(qkv), device="a100_sxm4_80gb").dtype == "float16"


def test_every_kernelbench_gpu_resolves_by_its_driver_name(problems: Path) -> None:
    import csv
    import gzip

    with gzip.open(problems.parent / "timings.csv.gz", "rt") as f:
        pairs = {(row["gpu"], row["gpu_name"]) for row in csv.DictReader(f)}
    resolved = {name: tgc.get_device(name).id for _, name in pairs}
    # where the data names the catalog id, the driver's name resolves to it
    assert all(resolved[name] == gpu for gpu, name in pairs if gpu), pairs
    # the boards the catalog gained for KernelBench (the data leaves their id empty)
    assert resolved["NVIDIA A10G"] == "a10g" and resolved["NVIDIA RTX A6000"] == "rtx_a6000"


_spec = importlib.util.spec_from_file_location(
    "kernelbench_accuracy", Path(__file__).resolve().parents[1] / "benchmarks"
    / "kernelbench_accuracy.py")
kernelbench_accuracy = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = kernelbench_accuracy  # its dataclasses look their module up
_spec.loader.exec_module(kernelbench_accuracy)  # type: ignore[union-attr]


@pytest.mark.parametrize("level, number", [(1, 33), (2, 66)],
                         ids=["l1-33-BatchNorm", "l2-66-Matmul_Dropout_Softmax"])
def test_the_benchmark_prices_a_program_as_a_user_does(problems: Path, level: int,
                                                       number: int) -> None:
    # KernelBench builds Model(*init_inputs) and times model(*inputs) under no_grad without
    # .eval(): its batch norm computes batch statistics, its dropout draws a mask
    (program,) = [p for p in programs(problems / V01, (level,)) if p.number == number]
    built = build(program)
    assert built.model.training
    spec = tgc.get_device("l40s")
    (bench,) = kernelbench_accuracy.estimate_program(built.model, built.inputs, [spec],
                                                     compiled=False, timing="event")
    with torch.no_grad():  # the user's run, priced as it runs
        user = tgc.estimate(built.model, built.inputs, device=spec, mode="forward")
    assert bench.to_dict() == user.to_dict()
    eval_mode = tgc.estimate(built.model, built.inputs, device=spec, mode="inference")
    for report, train in ((bench, True), (eval_mode, False)):
        stats = [o.op.computes_stats for o in report.others if o.op.op_class == "norm"]
        masks = [o for o in report.others if o.op.op == "aten.bernoulli_" and o.time_ms]
        assert (stats, len(masks)) == (([train], 0) if level == 1 else ([], int(train)))


def test_the_benchmark_prices_a_calibrated_host_as_a_user_does(problems: Path) -> None:
    # the host-calibrated column: a program's call as the benchmark priced it, re-timed with one
    # host's costs, equals the user's estimate(host=HostCosts(...)) of the same program
    (program,) = [p for p in programs(problems / V0, (2,)) if p.number == 66]
    built = build(program)
    spec = tgc.get_device("a10g")
    costs = HostCosts(eager_call_ms=0.009, eager_op_ms=0.021, eager_view_ms=0.002,
                      compiled_call_ms=0.042, compiled_kernel_ms=0.038, graph_call_ms=0.1)
    for compiled, timing in ((False, "event"), (True, "event"), (False, "graph")):
        (bench,) = kernelbench_accuracy.estimate_program(built.model, built.inputs, [spec],
                                                         compiled=compiled, timing=timing)
        with torch.no_grad():
            user = tgc.estimate(built.model, built.inputs, device=spec, mode="forward",
                                compiled=compiled, timing=timing, host=costs)
        assert bench.call is not None and bench.total_ms != user.total_ms  # the prior's, not ours
        assert kernelbench_accuracy.calibrated_ms(bench.call, costs, spec) == user.total_ms
    # a cost the fit lacks is the default prior's: the compiled call with no compiled costs
    eager_only = HostCosts(0.009, 0.021, 0.002)
    (bench,) = kernelbench_accuracy.estimate_program(built.model, built.inputs, [spec],
                                                     compiled=True, timing="event")
    filled = replace(eager_only, compiled_call_ms=bench.call.prior.mid.compiled_call_ms,
                     compiled_kernel_ms=bench.call.prior.mid.compiled_kernel_ms,
                     graph_call_ms=bench.call.prior.mid.graph_call_ms)
    with torch.no_grad():
        user = tgc.estimate(built.model, built.inputs, device=spec, mode="forward",
                            compiled=True, timing="event", host=filled)
    assert kernelbench_accuracy.calibrated_ms(bench.call, eager_only, spec) == user.total_ms


def test_the_host_cross_fit_splits_programs_by_number_parity() -> None:
    # 33 is odd, 66 even: each fold is priced with the costs fitted on the other
    assert kernelbench_accuracy.fold("33_BatchNorm.py") == 1
    assert kernelbench_accuracy.fold("66_Matmul_Dropout_Softmax.py") == 0


def test_each_fold_is_priced_with_costs_fitted_on_the_other() -> None:
    from torch_gemm_cost.predict.call import KernelSequence
    from torch_gemm_cost.train.host import HostRow

    # 40 host-bound programs of n = 1..20 ops, 1 ns of GPU each: each times 0.01 + n * op ms
    # (event_time_ms: call + n issues + the last kernel), op = 0.01 ms for the odd programs
    # and 0.04 ms for the even ones; a fold's fit sees only the other fold's op
    rows = []
    for number in range(1, 41):
        n, op = 1 + number % 20, (0.01 if number % 2 else 0.04)
        seq = KernelSequence(torch.full((n,), 1e-6, dtype=torch.float64),
                             torch.zeros(n, dtype=torch.long), 0, False)
        rows.append(HostRow("X", "X", "v0", "2025-01-01", "a10g", "GA102", "eager",
                            f"{number}_p.py", 0.01 + n * op, seq, 0.0))
    fits = kernelbench_accuracy.cross_fit_hosts(rows)
    assert fits["X", 1].eager_op_ms == pytest.approx(0.04, rel=0.05)  # odd, priced by even
    assert fits["X", 0].eager_op_ms == pytest.approx(0.01, rel=0.05)
    assert fits["X", 1].compiled_call_ms is None  # no compiled rows: the prior's, when priced


def test_the_calibrated_column_takes_compiled_costs_as_calibrate_host_writes_them() -> None:
    # calibrate --host measures the eager costs only and scales the fitted hosts' compiled and
    # replay costs by its eager op: twice the eager op, twice those costs (to 5 decimals)
    one = kernelbench_accuracy.as_calibrated(HostCosts(0.01, 0.02, 0.002), "GA102")
    two = kernelbench_accuracy.as_calibrated(HostCosts(0.01, 0.04, 0.002), "GA102")
    assert (one.eager_call_ms, one.eager_op_ms, one.eager_view_ms) == (0.01, 0.02, 0.002)
    for name in ("compiled_call_ms", "compiled_kernel_ms", "graph_call_ms"):
        assert getattr(two, name) == pytest.approx(2 * getattr(one, name), abs=2e-5), name
