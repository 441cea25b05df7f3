"""Passes over memory of the ops that reduce before they write: softmax and layer norm rows,
and norms that compute their statistics. Pure functions of a record and a device; ``ops``
applies them to the bytes and the bandwidth of its memory-bound time.

A record counts each tensor once (the input read, the output written: two passes). What
PyTorch's CUDA kernels run:

- softmax and log-softmax (``aten/src/ATen/native/cuda/SoftMax.cu``): a row whose bytes fit in
  a block's shared memory (48 KiB, ``SMEM_ROW_BYTES``) is read once, kept on chip and written;
  a longer row is read three times (its max, the sum of exponentials, then the output) and
  written once: four passes, twice the record's bytes.
- layer norm (``layer_norm_kernel.cu``): one block per row computes the row's mean and
  variance (Welford) and then normalizes it, reading the row again. A short row is re-read from
  the block's cache; a row longer than ``SMEM_ROW_BYTES`` comes from DRAM again: three passes,
  1.5 times the record's bytes.
- batch, instance and group norm that compute their statistics (``Normalization.cuh``,
  ``group_norm_kernel.cu``): one kernel reads the input for the per-channel (per-group) moments,
  a second reads it again and writes the output: three passes in two kernels, streaming
  kernels priced at the elementwise class's share of the bandwidth, not the layer norm's that
  the ``norm`` class was fitted on (KernelBench's ``34_InstanceNorm`` and ``35_GroupNorm_``
  of 7.5 GB at v0.1 sizes: 32.8 and 32.7 ms on an RTX A6000, 36.7 and 33.6 on an L40S; three
  passes at the elementwise rate predict 29.6 and 28.2, at the norm class's 42 and 45).

- a pointwise loss reduced to its mean or sum (``Loss.cpp``: ``mse_loss``, ``smooth_l1_loss``,
  ``huber_loss``) writes the elementwise loss to a tensor of the input's size, then reduces it
  in a kernel of its own: the record's two inputs read, plus that tensor written and read
  again, twice the record's bytes in two kernels. KernelBench's ``96_HuberLoss`` on two
  (32768, 32768) fp32 tensors: 25.0 ms on an L40S, 24.9 on an RTX A6000; its
  ``94_MSELoss`` on the same, written as sub, pow and mean (six passes), 37.9 and 37.4: 6.3
  ms a pass in both, so four passes for the loss.

A row-wise kernel runs one block per row, so with fewer rows than SMs only that many SMs
stream, each at the rate its loads in flight allow (Little's law): ``IN_FLIGHT_BYTES`` per
block over the loaded DRAM latency ``DRAM_LATENCY_S``. NB: both are round figures assumed for
PyTorch's 256-thread blocks with one 16-byte load in flight per thread and for GDDR6/HBM
latency under load (400-600 ns in published microbenchmarks), not datasheet values.

A norm's statistics kernel is such a kernel too, one block per channel
(``batch_norm_collect_statistics_kernel``: a grid of C blocks) or per group
(``RowwiseMomentsCUDAKernel``: N·G), while its normalizing kernel spreads over every SM: only
the statistics pass, the input read once (``limited_bytes``), streams at its blocks' rate.
KernelBench's ``33_BatchNorm`` (16, 64, 256, 256) fp32, 64 channels, in training mode: 1.32 ms
on an A100 80GB (108 SMs) and 0.74 on a B200 (148), 3.3 and 7.1 times its three passes at
their DRAM bandwidth, where an RTX A6000 and an L40S, whose narrower DRAM the 64 blocks keep
busier, take 1.29 and 1.28 ms (1.2 and 1.4 times); its 1024-channel ``34_InstanceNorm`` of the
same bytes takes 0.78 ms on the A100. NB: an fp32 NCHW batch norm may run cuDNN's kernel
instead, whose grid is not published; a batch norm of (N, C) rows runs PyTorch's channels-last
statistics kernel, which tiles both dims, so none is bounded so (``records.op_classes``).
"""

from __future__ import annotations

import math

from ..hardware.catalog import DeviceSpec
from ..records.types import OtherOp

__all__ = ["DRAM_LATENCY_S", "IN_FLIGHT_BYTES", "SMEM_ROW_BYTES", "limited_bytes",
           "pass_factor", "row_bandwidth_bytes_per_s"]

SMEM_ROW_BYTES = 48 * 1024  # the shared memory one block may use without opting in
IN_FLIGHT_BYTES = 256 * 16  # a 256-thread block, one 16-byte load in flight per thread
DRAM_LATENCY_S = 500e-9  # loaded DRAM latency (NB: assumed, see the module's docstring)

_SOFTMAX = frozenset({"softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax"})
_LAYER_NORM = frozenset({"native_layer_norm", "layer_norm"})
_POINTWISE_LOSSES = frozenset({"mse_loss", "smooth_l1_loss", "huber_loss"})


def _row_bytes(op: OtherOp, elem_bytes: int) -> int:
    return op.row_elems * elem_bytes


def pass_factor(op: OtherOp, base: str, elem_bytes: int) -> tuple[float, int]:
    """(bytes as a multiple of the record's, kernels) of forward op ``op`` (ATen name ``base``,
    elements of ``elem_bytes``): what the passes above add to a record that reads its input
    and writes its output once.

    >>> from dataclasses import replace
    >>> row = OtherOp("", "", "aten._softmax", "n", "forward", "softmax", "float32", 8, 64,
    ...               row_elems=393_216)
    >>> pass_factor(row, "_softmax", 4)   # 1.5 MiB rows: 3 reads + 1 write against 2 passes
    (2.0, 1)
    >>> pass_factor(replace(row, row_elems=4096), "_softmax", 4)   # 16 KiB fits: 2 passes
    (1.0, 1)
    """
    if op.computes_stats:
        return 1.5, 2  # statistics read; normalize read and write
    if base in _POINTWISE_LOSSES and op.numel == 1:  # reduced: the loss tensor out and back
        return 2.0, 2
    if op.row_elems and _row_bytes(op, elem_bytes) > SMEM_ROW_BYTES:
        if base in _SOFTMAX:
            return 2.0, 1
        if base in _LAYER_NORM:
            return 1.5, 1
    return 1.0, 1


def limited_bytes(op: OtherOp, priced_bytes: float, elem_bytes: int) -> float:
    """Of forward op ``op``'s ``priced_bytes`` (its record's, times ``pass_factor``), those its
    row-wise blocks stream (at ``row_bandwidth_bytes_per_s``): a row-wise op's all, a norm's
    statistics pass alone (its input read once), none for any other op.

    >>> bn = OtherOp("", "", "aten.native_batch_norm", "n", "forward", "norm", "float32",
    ...              1000, 8000, row_elems=100, computes_stats=True)
    >>> limited_bytes(bn, 12000.0, 4)   # x read for the statistics: 1000·4 of 1.5·8000
    4000.0
    """
    if not op.row_elems:
        return 0.0
    return float(op.numel * elem_bytes) if op.computes_stats else priced_bytes


def row_bandwidth_bytes_per_s(op: OtherOp, device: DeviceSpec) -> float:
    """The most a row-wise kernel of ``op`` (a norm's statistics kernel) streams when its rows
    (channels, groups) are fewer than the SMs: each row's block alone on an SM at
    ``IN_FLIGHT_BYTES / DRAM_LATENCY_S``; inf where every SM has a row (the DRAM bound
    applies).

    >>> from torch_gemm_cost.hardware.catalog import get_device
    >>> ln = OtherOp("", "", "aten.native_layer_norm", "n", "forward", "norm", "float32",
    ...              16 * 4_194_304, 0, row_elems=4_194_304)
    >>> round(row_bandwidth_bytes_per_s(ln, get_device("l40s")) / 1e9, 1)   # 16·4096 B/500 ns
    131.1
    """
    if not op.row_elems or not op.numel:
        return math.inf
    rows = op.numel // op.row_elems
    if rows >= device.sm_count:
        return math.inf
    return max(rows, 1) * IN_FLIGHT_BYTES / DRAM_LATENCY_S
