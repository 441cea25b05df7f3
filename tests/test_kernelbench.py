"""KernelBench's programs estimate end to end: a handful, one for each way the 250 used to fail
(an op without a cost model, an einsum, an RNN, a constructor that reads values, CUDA inputs),
each priced with no unmodelled op. Skipped without the data (DATA.md, data/kernelbench)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import DATA_DIR
from torch import nn

import torch_gemm_cost as tgc
from torch_gemm_cost.measured.kernelbench import build, programs

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
