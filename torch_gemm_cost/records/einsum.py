"""An einsum as PyTorch runs it: ``torch.einsum`` replayed on meta tensors of the operands'
shapes, strides and grad flags, and the kernels the replay runs.

torch contracts the operands pairwise, left to right or along the path ``opt_einsum`` picks
when it is installed and enabled (``torch.backends.opt_einsum``); the replay takes whichever
path this process's torch takes. Each pair becomes a ``bmm`` on operands permuted and reshaped
to (batch, m, k) and (batch, k, n), copied first (``clone``) where a reshape cannot view them;
letters no pair sums are an elementwise ``mul``; letters only one operand has are summed away
first (``sum``). So Mamba-2's ``"bclhn,bcshn,bhcls,bcshp->bclhp"`` runs two bmm calls with a
``mul`` between them, not three contractions.

The GEMMs are the ``bmm`` calls (op ``einsum``, read by the ``bmm`` handler: dims, layouts and
grad flags as the replay's operands have them); the other kernels become ``OtherOp`` records of
the einsum's node (``einsum_other_ops``). Views cost nothing and are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .handlers import ForwardGemm, HandlerContext, gemm_handler, op_name, register_gemm_handler
from .nodes import _qualified
from .op_classes import op_class_of
from .sizing import _Ctx
from .types import OtherOp

__all__ = ["EINSUM_KERNEL", "EinsumKernel", "einsum_gemms", "einsum_kernels", "einsum_other_ops"]

EINSUM_KERNEL = "einsum_kernel"  # an OtherOp node name "<einsum node>.einsum_kernel.<i>.<op>"
_GEMM_OPS = ("bmm", "mm")


@dataclass(frozen=True)
class EinsumKernel:
    """One kernel the replay ran: the ATen op, its tensor inputs and outputs (meta tensors with
    the grad flags autograd gave them)."""

    op: Any  # the OpOverload
    inputs: tuple[torch.Tensor, ...]
    outputs: tuple[torch.Tensor, ...]

    @property
    def name(self) -> str:
        return op_name(self.op)


# (shape, stride, storage offset, dtype, requires grad) of one operand
_Operand = tuple[tuple[int, ...], tuple[int, ...], int, torch.dtype, bool]


class _Kernels(TorchDispatchMode):
    """Records every ATen op below autograd (views included; callers skip them)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Any, tuple, Any]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        out = func(*args, **(kwargs or {}))
        self.seen.append((func, args, out))
        return out


def _tensors(x: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(x, torch.Tensor):
        return (x,)
    if isinstance(x, (list, tuple)):
        return tuple(t for v in x for t in _tensors(v))
    return ()


@lru_cache(maxsize=1024)
def _replay(equation: str, operands: tuple[_Operand, ...]) -> tuple[EinsumKernel, ...]:
    metas = []
    for shape, stride, offset, dtype, grad in operands:
        extent = offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride) if n > 0)
        base = torch.empty(extent if all(shape) else 0, dtype=dtype, device="meta")
        if grad and dtype.is_floating_point:
            base.requires_grad_(True)
        metas.append(base.as_strided(shape, stride, offset if all(shape) else 0))
    mode = _Kernels()
    with torch.enable_grad(), mode:
        torch.einsum(equation, *metas)
    return tuple(EinsumKernel(func, _tensors(args), _tensors(out)) for func, args, out in mode.seen)


def einsum_kernels(equation: str, operands: Sequence[torch.Tensor],
                   requires_grad: Sequence[bool] | None = None) -> tuple[EinsumKernel, ...]:
    """Every ATen op ``torch.einsum(equation, *operands)`` runs, in order, replayed on meta
    tensors of the operands' shapes, strides, offsets and dtypes; ``requires_grad`` (default:
    the operands' own flags) marks which need grad, so each kernel's tensors carry theirs."""
    grads = [t.requires_grad for t in operands] if requires_grad is None else list(requires_grad)
    key = tuple((tuple(int(n) for n in t.shape), tuple(int(s) for s in t.stride()),
                 int(t.storage_offset()), t.dtype, bool(g)) for t, g in zip(operands, grads))
    return _replay(equation.replace(" ", ""), key)


def _is_view(k: EinsumKernel) -> bool:
    return bool(getattr(k.op, "is_view", False)) or k.name in ("_unsafe_view",)


def einsum_gemms(equation: str, shapes: Sequence[Sequence[int]]) -> list[tuple[int, int, int, int]]:
    """The (batch, m, n, k) of each GEMM ``torch.einsum`` runs on contiguous operands of
    ``shapes``, in order: its ``bmm`` calls.

    >>> einsum_gemms("bik,kj->bij", [(2, 4, 8), (8, 16)])   # b, i fold into m
    [(1, 8, 16, 8)]
    >>> einsum_gemms("bhqd,bhkd->bhqk", [(2, 3, 5, 7), (2, 3, 6, 7)])
    [(6, 5, 6, 7)]
    >>> einsum_gemms("i,j->ij", [(3,), (5,)])   # nothing summed: a broadcast mul, no GEMM
    []
    """
    operands = [torch.empty(tuple(s), device="meta") for s in shapes]
    out = []
    for k in einsum_kernels(equation, operands):
        if k.name in _GEMM_OPS:
            a, b = k.inputs[:2]
            batch = int(a.shape[0]) if a.dim() == 3 else 1
            out.append((batch, int(a.shape[-2]), int(b.shape[-1]), int(a.shape[-1])))
    return out


def _gemm_einsum(args: Mapping[str, Any], ctx: HandlerContext) -> list[ForwardGemm]:
    """The GEMMs of an einsum: the ``bmm`` calls its replay runs, as the bmm handler reads them
    (layouts from the replay's strides; grad flags as autograd propagates them)."""
    operands = [ctx.tensor(t) for t in args["tensors"]]
    kernels = einsum_kernels(args["equation"], operands,
                             [ctx.requires_grad(t) for t in args["tensors"]])
    inner = HandlerContext(lambda t: t, lambda t: bool(getattr(t, "requires_grad", False)),
                           ctx.elem_bytes, ctx.causal_module)
    out: list[ForwardGemm] = []
    for k in kernels:
        handler = gemm_handler(k.name) if k.name in _GEMM_OPS else None
        if handler is not None:
            bound = {"self": k.inputs[0], "mat2": k.inputs[1]}
            out.extend(replace(f, op="einsum") for f in handler(bound, inner))
    return out


register_gemm_handler("einsum", _gemm_einsum)


class _KernelNode:
    """What ``op_class_of`` reads off a node: its target."""

    def __init__(self, op: Any) -> None:
        self.target = op


def einsum_other_ops(node: Any, ctx: _Ctx, module: str, module_type: str) -> list[OtherOp]:
    """The kernels besides its GEMMs that einsum ``node`` runs (copies that lay operands out
    for bmm, elementwise products, sums), each an ``OtherOp`` moving its inputs once and its
    output; views are free and left out. NB: their backward is not recorded."""
    args = node.args
    equation, operands = args[0], list(args[1])
    vals = [o.meta["val"] for o in operands]
    grads = [False] * len(vals)
    out: list[OtherOp] = []
    for i, k in enumerate(einsum_kernels(equation, vals, grads)):
        if k.name in _GEMM_OPS or _is_view(k) or not k.outputs:
            continue
        base = k.name.rstrip("_")
        op_class = op_class_of(_KernelNode(k.op), base, list(k.inputs), list(k.outputs))
        ins = {id(t): t for t in k.inputs}
        dram = sum(ctx.tensor_bytes(t) for t in ins.values())
        dram += sum(ctx.tensor_bytes(t) for t in k.outputs)
        out.append(OtherOp(module=module, module_type=module_type, op=_qualified(k.op),
                           node=f"{node.name}.{EINSUM_KERNEL}.{i}.{base}", phase="forward",
                           op_class=op_class, dtype=ctx.act_name,
                           numel=max(t.numel() for t in k.outputs), dram_bytes=int(dram)))
    return out
