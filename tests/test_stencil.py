"""Depthwise convolutions in PyTorch's own CUDA kernel: which convolutions are recorded as one,
their instruction counts and a hand-worked time, and what keeps its memory-bound pricing."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from torch_gemm_cost import get_device
from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.predict.ops import OP_CLASSES, OpBatch, OpCostModel
from torch_gemm_cost.predict.stencil import ISSUE_SHARE, instructions_per_output
from torch_gemm_cost.records import OtherOp, extract
from torch_gemm_cost.records.types import DepthwiseShape

A6000 = get_device("rtx_a6000")  # 84 SMs of 128 issue lanes at 1,800 MHz, 768 GB/s of DRAM

# round constants, so the arithmetic below is checkable by hand
TABLE = OpCostModel.from_dict({
    "classes": {c: {"eta": 0.9, "floor_ms": 0.03} for c in OP_CLASSES
                if c not in ("view", "other")},
    "launch_ms": 0.005,
})


def conv_record(module: nn.Module, x: torch.Tensor) -> OtherOp | None:
    """The convolution's OtherOp, None where it is a GEMM."""
    sites, others = extract(capture(module, (x,)), "float32")
    convs = [o for o in others if o.op == "aten.convolution"]
    assert len(convs) + len(sites) == 1
    return convs[0] if convs else None


@pytest.mark.parametrize(("module", "shape", "want"), [
    (nn.Conv2d(8, 8, 3, groups=8), (2, 8, 16, 16), DepthwiseShape((3, 3))),
    # each input channel feeds two output channels: the kernel divides twice more
    (nn.Conv2d(8, 16, (3, 5), groups=8), (2, 8, 16, 16), DepthwiseShape((3, 5), 2)),
    # a 1D convolution runs as 2D over (1, L): one kernel row
    (nn.Conv1d(8, 8, 7, groups=8), (2, 8, 32), DepthwiseShape((1, 7))),
    (nn.Conv3d(4, 4, 3, groups=4), (1, 4, 8, 8, 8), DepthwiseShape((3, 3, 3))),
], ids=["2d", "multiplier", "1d", "3d"])
def test_depthwise_convolutions_are_recorded_with_their_kernel(
        module: nn.Module, shape: tuple[int, ...], want: DepthwiseShape) -> None:
    rec = conv_record(module, torch.ones(shape))
    assert rec is not None and rec.depthwise == want


def test_what_pytorch_runs_elsewhere_is_no_depthwise_record() -> None:
    x = torch.ones(2, 8, 16, 16)
    # two input channels a group: an implicit GEMM (cuDNN's)
    assert conv_record(nn.Conv2d(8, 8, 3, groups=4), x) is None
    # a transposed one: cuDNN's, whatever its groups
    rec = conv_record(nn.ConvTranspose2d(8, 8, 3, groups=8), x)
    assert rec is not None and rec.depthwise is None
    # channels last: use_cudnn_depthwise sends it to cuDNN
    last = nn.Conv2d(8, 8, 3, groups=8).to(memory_format=torch.channels_last)
    rec = conv_record(last, x.contiguous(memory_format=torch.channels_last))
    assert rec is not None and rec.depthwise is None


def test_instruction_counts_by_hand() -> None:
    # 25 + 3 divisions·20 = 85 for the index, then per instance (predict/stencil.py):
    # 3×3 unrolled: 9 taps·6 + 3 rows·4 + 3 columns·3 = 75 -> 160
    # 5×5 unrolled: 25·6 + 5·4 + 5·3 = 185 -> 270
    # (3, 1) generic: 16 + 3 rows·7 + 3 taps·8 = 61 -> 146
    # (3, 1) generic, channel multiplier 2: two divisions more -> 186
    # 3D 3×3×3: 25 + 6·20 + 16 + 9 rows·7 + 27 taps·8 = 440
    assert instructions_per_output(DepthwiseShape((3, 3))) == 160
    assert instructions_per_output(DepthwiseShape((5, 5))) == 270
    assert instructions_per_output(DepthwiseShape((3, 1))) == 146
    assert instructions_per_output(DepthwiseShape((3, 1), 2)) == 186
    assert instructions_per_output(DepthwiseShape((3, 3, 3))) == 440


def depthwise_op(dtype: str = "float32", phase: str = "forward") -> OtherOp:
    # KernelBench's 82_conv_depthwise_2D at v0.1 sizes: (16, 64, 512, 512) fp32 through a 3×3
    # kernel, no padding: (16, 64, 510, 510) = 266,342,400 outputs.
    # bytes: the input 1,073,741,824 + the output 1,065,369,600 + the weight 2,304
    return OtherOp(module="conv", module_type="Conv2d", op="aten.convolution", node="c",
                   phase=phase, op_class="elementwise", dtype=dtype, numel=266_342_400,
                   dram_bytes=2_139_113_728, depthwise=DepthwiseShape((3, 3)))


def test_depthwise_time_hand_worked_on_an_rtx_a6000() -> None:
    # DRAM: 2,139,113,728 B / (0.9 · 768e9 B/s) = 3.094783 ms
    # issue: 266,342,400 outputs · 160 instructions = 42,614,784,000 over
    #   0.40 · 84 SMs · 128 lanes · 1.8e9 /s = 7.74144e12 /s -> 5.504762 ms
    # soft maximum, p = 4: 5.504762 · (1 + (3.094783 / 5.504762)^4)^(1/4) = 5.637374 ms
    # plus one 5 µs launch: 5.642374 ms (KernelBench measured 5.79 ms on an RTX A6000)
    assert ISSUE_SHARE == 0.40
    (t,) = TABLE.predict(OpBatch((depthwise_op(),)), A6000).times_or_none()
    assert t == pytest.approx(5.642374, rel=1e-5)
    # bf16 runs the same kernel: half the bytes, the same instructions
    half = replace(depthwise_op("bfloat16"), dram_bytes=2_139_113_728 // 2)
    (tb,) = TABLE.predict(OpBatch((half,)), A6000).times_or_none()
    assert tb == pytest.approx(0.005 + 5.504762 * (1 + (1.547391 / 5.504762) ** 4) ** 0.25,
                               rel=1e-5)


def test_what_keeps_its_memory_bound_pricing() -> None:
    memory_ms = 0.005 + 3.094783  # the bytes at the elementwise class's share, one launch
    # fp16 may run cuDNN's depthwise kernel; the backward kernels are not modelled so
    fp16 = depthwise_op("float16")
    (t16,) = TABLE.predict(OpBatch((fp16,)), A6000).times_or_none()
    assert t16 == pytest.approx(memory_ms, rel=1e-5)
    # an AMD GPU runs MIOpen's
    (tamd,) = TABLE.predict(OpBatch((depthwise_op(),)), get_device("mi300x")).times_or_none()
    (tplain,) = TABLE.predict(OpBatch((replace(depthwise_op(), depthwise=None),)),
                              get_device("mi300x")).times_or_none()
    assert tamd == tplain
