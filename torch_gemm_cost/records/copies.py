"""The operand copies of a GEMM: operands its library call cannot read in place, which the op
copies first."""

from __future__ import annotations

from typing import Any

import torch

from .handlers import op_name

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
