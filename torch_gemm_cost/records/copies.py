"""The copies a GEMM's library call makes: operands it cannot read in place, which the op
copies first, and the output a tensor-core convolution writes back to NCHW."""

from __future__ import annotations

from typing import Any

import torch

from ..hardware.dtypes import ComputeDtype
from .handlers import ForwardGemm, op_name

OPERAND_COPY = "operand_copy"  # an OtherOp node name "<gemm node>.operand_copy.<operand node>"
# GEMM ops whose library call reshapes its operands to one batch dim (aten.matmul's
# ``expand(...).reshape(...)``, linear's reshape, bmm's contiguity check); an einsum's copies
# are the ones its replay runs (``records.einsum``)
RESHAPING_GEMMS = frozenset({"matmul", "bmm", "baddbmm", "linear"})


def batch_flattens(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether a (…, m, k) operand's batch dims fold into one stride and its matrix has a unit
    stride, so a batched GEMM reads it in place."""
    if stride[-1] != 1 and stride[-2] != 1:
        return False
    dims = [(n, st) for n, st in zip(shape[:-2], stride[:-2]) if n != 1]
    return all(dims[i][1] == dims[i + 1][1] * dims[i + 1][0] for i in range(len(dims) - 1))


def operand_copies(node: Any) -> list[tuple[Any, torch.Tensor]]:
    """Operands of GEMM ``node`` that its library call cannot read in place, each with its value:
    3-D or more, with batch dims that do not fold into one stride (attention's permuted heads),
    so the op copies them first, eagerly (``reshape`` → ``clone``) as compiled."""
    if op_name(node.target) not in RESHAPING_GEMMS:
        return []
    out = []
    for arg in node.all_input_nodes:
        val = arg.meta.get("val")
        if (isinstance(val, torch.Tensor) and val.dim() >= 3
                and not batch_flattens(tuple(val.shape), tuple(val.stride()))):
            out.append((arg, val))
    return out


# an OtherOp node name "<conv node>.nchw_layout": the transform of a convolution's output
NCHW_LAYOUT = "nchw_layout"
_CONV_OPS = frozenset({"convolution", "conv_transpose"})


def nchw_output_elems(f: ForwardGemm, cd: ComputeDtype, out: torch.Tensor) -> int:
    """Elements of a convolution's output that a kernel of its own transposes from NHWC to
    NCHW after the convolution (0 where none does).

    cuDNN's tensor-core implicit GEMMs (``cd`` a tensor-core dtype: TF32, fp16, bf16) hold a
    tile of output positions × output channels, which they store channels-last; on a
    channels-first (NCHW, NCL, NCDHW) output cuDNN runs an NHWC-to-NCHW transform after the
    convolution, reading and writing the whole output once more. The input needs no transform:
    the implicit GEMM gathers it, whatever its layout. No transform where the output is
    channels-last already (``torch.channels_last`` models), for a 1x1 kernel (over NCHW it is
    the GEMM W·X of each image, which writes NCHW rows directly), and in fp32 without TF32 (the
    SIMT kernels write NCHW).

    NB: the transform is inferred from KernelBench's timings, not read from cuDNN's documents:
    a convolution that writes far more than it reads runs about as long as its output's
    extra pass (``69_Conv2d_HardSwish_ReLU``, 8 to 64 channels: 5.8 ms on an L40S and an RTX
    A6000, 3.6 predicted without it, 5.2 with it); of no transform, one of the input, one of
    the output and both, on the L40S's and RTX A6000's rows, the output alone was the one that
    made no level worse.
    """
    if f.op not in _CONV_OPS or f.taps == 1 or not cd.tensor_core or out.dim() < 3:
        return 0
    if out.dim() in (4, 5):
        last = torch.channels_last if out.dim() == 4 else torch.channels_last_3d
        if out.is_contiguous(memory_format=last) and not out.is_contiguous():
            return 0
    return int(out.numel())
