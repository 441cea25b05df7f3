"""Depthwise convolutions as PyTorch's own CUDA kernels run them: bound by the instructions each
output element's thread issues, not by the bytes they move.

PyTorch sends a depthwise convolution (``records.DepthwiseShape``) to cuDNN only for a
channels-last input or some fp16 shapes (``Convolution.cpp``: ``use_cudnn_depthwise``); fp32
and bf16 ones run ``aten/src/ATen/native/cuda/DepthwiseConv2d.cu`` (``DepthwiseConv3d.cu`` for
3D). Its ``conv_depthwise2d_forward_kernel`` runs one thread per output element: it splits the
element's linear index into (n, c, h, w) with three 32-bit divisions by runtime sizes, then
loops over the kernel's taps, loading a weight and an input (L1 serves the neighbours' shared
inputs) and adding their product. Its 3×3, 5×5 and 1×1 instances unroll the taps and test each
against the input's bounds; any other shape runs ``conv_depthwise2d_forward_kernel_generic``,
which computes the window's bounds first and loops over the taps inside them.

``instructions_per_output`` counts what one thread issues, from that source (SASS-level
operations, a division as ``DIVISION_INSTRUCTIONS``):

- every instance (``PROLOGUE_INSTRUCTIONS``, 25, plus three divisions): the thread's index and
  the grid-stride loop's test (5), the remainders h, w and c (3), the channel-multiplier test
  (2), the weight offset, the input plane's offset and the window's first row and column (7),
  the bias test (2), the output's address and store (3), the loop's step (3). A channel
  multiplier other than 1 divides twice more (``inputChannel /= depthwiseMultiplier``).
- an unrolled instance: per tap 6 (the bounds predicate, the input offset, its address, two
  loads, the FMA); per kernel row 4 (the row index, two bounds tests, the row's offset); per
  kernel column 3 (the column index, two bounds tests).
- the generic instance: 16 for the window's bounds (four tests with their branches, the loop
  limits); per kernel row 7 (row index and offset, the inner loop's setup, the outer loop's
  step); per tap 8 (column index, offset, two addresses, two loads, the FMA, and the loop step
  that nvcc's four-fold unrolling leaves).
- a 3D convolution (``conv_depthwise3d_cuda_kernel``): six divisions (four for the index, the
  channel multiplier and the input channel) and 25 more instructions, then the generic loop's
  per-row and per-tap counts over its T·H rows. NB: its specialised instances are not told
  apart, and no 3D depthwise convolution was measured.

The kernel keeps each load's latency on its critical path (a thread's taps feed one sum), so
it issues at a share of the SMs' issue slots, ``ISSUE_SHARE``, and its time is the soft
maximum (``OpCostModel.roof_p``) of that and its bytes' DRAM time, plus its launch:

    issue time = outputs · instructions / (share · SMs · issue lanes per SM · boost clock)

NB: its backward kernels (input gradient, one thread per input element; weight gradient, a
block reduction per tap) keep their class's memory-bound pricing, and so does an fp16
depthwise convolution (cuDNN's where its heuristic takes it). Under ``torch.compile`` inductor
calls the same ATen convolution as an extern kernel and it is priced the same; NB: where its
layout optimization lays the model out channels last (``compiled.fusion``), PyTorch sends the
convolution to cuDNN instead, which is not told apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..hardware.catalog import DeviceSpec
from ..records.types import DepthwiseShape, OtherOp

__all__ = ["DIVISION_INSTRUCTIONS", "ISSUE_SHARE", "NATIVE_DTYPES", "PROLOGUE_INSTRUCTIONS",
           "UNROLLED_KERNELS", "depthwise_time_ms", "instructions_per_output", "issue_time_s",
           "runs_native"]

# a signed 32-bit division by a runtime divisor: nvcc's float reciprocal, its conversion back,
# a multiply-high, two corrections and the sign
DIVISION_INSTRUCTIONS = 20
PROLOGUE_INSTRUCTIONS = 25  # every 2D instance, its three divisions apart (module docstring)
UNROLLED_KERNELS = frozenset({(1, 1), (3, 3), (5, 5)})  # the 2D kernel's unrolled instances
NATIVE_DTYPES = frozenset({"float32", "bfloat16"})  # fp16 may go to cuDNN: not priced here
# (per tap, per kernel row, per kernel column) of the unrolled and the generic instances
_UNROLLED = (6, 4, 3)
_GENERIC = (8, 7, 0)
_GENERIC_BOUNDS = 16  # the generic instance's window bounds
_PROLOGUE_3D = 25  # the 3D kernel's instructions besides its six divisions

# The share of the issue slots the kernel keeps busy, fitted on KernelBench's eager
# ``82``-``85_conv_depthwise_2D`` programs (fp32; v0 sizes, 3 channels, on an A100 40GB and
# 80GB, A10G, RTX A6000, B200, L40S and T4; v0.1 sizes, 8-128 channels, on the RTX A6000 and
# L40S), the 36 timings of 0.05 ms or more, everything else in each call priced as shipped: the
# share minimizing the mean |log(predicted / measured)| on a 0.01 grid, over all chips. Fitted
# on the other chips' timings alone, each chip held out in turn (GA100, GA102, AD102, GB100,
# TU104), it came out 0.39-0.40; the v0.1 timings alone, 0.40. NB: a T4 runs these kernels
# about twice as long as this predicts; a 70 W board, its clock under load is likely well
# below the boost clock taken here.
ISSUE_SHARE = 0.40


def instructions_per_output(shape: DepthwiseShape) -> int:
    """Instructions one thread issues for one output element of depthwise convolution
    ``shape`` (the module docstring's counts).

    >>> instructions_per_output(DepthwiseShape((3, 3)))   # 25 + 3·20 + 9·6 + 3·4 + 3·3
    160
    >>> instructions_per_output(DepthwiseShape((3, 7)))   # 25 + 3·20 + 16 + 3·7 + 21·8
    290
    """
    kernel = shape.kernel
    taps = math.prod(kernel)
    if len(kernel) == 3:
        rows = kernel[0] * kernel[1]
        return (_PROLOGUE_3D + 6 * DIVISION_INSTRUCTIONS + _GENERIC_BOUNDS
                + _GENERIC[1] * rows + _GENERIC[0] * taps)
    divisions = 3 + (2 if shape.channel_multiplier != 1 else 0)
    base = PROLOGUE_INSTRUCTIONS + divisions * DIVISION_INSTRUCTIONS
    rows, cols = kernel[0], kernel[-1]
    if tuple(kernel) in UNROLLED_KERNELS:
        per_tap, per_row, per_col = _UNROLLED
        return base + per_tap * taps + per_row * rows + per_col * cols
    per_tap, per_row, _ = _GENERIC
    return base + _GENERIC_BOUNDS + per_tap * taps + per_row * rows


def runs_native(op: OtherOp, device: DeviceSpec) -> bool:
    """Whether ``op`` is a forward depthwise convolution that ``device`` runs in PyTorch's own
    kernel and that this module prices: an NVIDIA GPU whose issue lanes are known, fp32 or
    bf16 (``NATIVE_DTYPES``)."""
    return (op.depthwise is not None and op.phase == "forward" and op.dtype in NATIVE_DTYPES
            and device.vendor == "NVIDIA" and bool(device.issue_lanes_per_sm)
            and bool(device.boost_clock_mhz))


def issue_time_s(outputs: torch.Tensor, instructions: torch.Tensor, device: DeviceSpec,
                 share: float = ISSUE_SHARE) -> torch.Tensor:
    """outputs · instructions / (share · SMs · issue lanes per SM · boost clock), (N,) in s."""
    lanes_per_s = (device.sm_count * (device.issue_lanes_per_sm or 0)
                   * (device.boost_clock_mhz or 0.0) * 1e6)
    return outputs * instructions / (share * lanes_per_s)


def depthwise_time_ms(ops: Sequence[OtherOp], memory_ms: torch.Tensor, device: DeviceSpec,
                      roof_p: float, share: float = ISSUE_SHARE) -> torch.Tensor:
    """The kernel time (no launch) of each depthwise convolution of ``ops`` (``runs_native``;
    any other op issues nothing here), (N,): the soft maximum of exponent ``roof_p`` of its
    bytes' time ``memory_ms`` (N,) and its issue time."""
    outputs = torch.tensor([float(op.numel) for op in ops], dtype=torch.float64)  # (N,)
    instructions = torch.tensor([float(instructions_per_output(op.depthwise)) if op.depthwise
                                 else 0.0 for op in ops], dtype=torch.float64)  # (N,)
    issue_ms = issue_time_s(outputs, instructions, device, share) * 1e3  # (N,)
    hi = torch.maximum(memory_ms, issue_ms).clamp(min=1e-30)
    return hi * ((memory_ms / hi) ** roof_p + (issue_ms / hi) ** roof_p) ** (1.0 / roof_p)
