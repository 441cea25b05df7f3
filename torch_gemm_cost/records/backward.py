"""The backward records autograd runs for a forward one: a GEMM's gradient GEMMs, a fused
bias's gradient, a non-GEMM op's backward, and the sums of a tensor's gradients."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch

from ..hardware.dtypes import DTYPES
from .handlers import ForwardGemm, unique_numel
from .nodes import _module_of
from .sizing import _Ctx, _gemm_bytes
from .types import GemmSite, OtherOp, alignment_bytes


def _backward_sites(f: ForwardGemm, fwd: GemmSite) -> list[GemmSite]:
    """dA = dC·Bᵀ and dB = Aᵀ·dC (for a Linear weight, dW = dYᵀ·X), as autograd runs them."""
    # dC is a contiguous (m, n) gradient; fused attention's backward keeps dS (QKᵀ's dC) and
    # dP (PV's dA) on chip, as the forward keeps S and P: their alignment costs nothing
    dc_align = 16 if fwd.op == "sdpa_qk" else alignment_bytes(fwd.n, DTYPES[fwd.dtype].in_bytes)
    out: list[GemmSite] = []
    if f.grad_a:  # dA (m, k) = dC (m, n) · Bᵀ (n, k)
        out.append(_backward_site(f, fwd, "backward_dx", fwd.m, fwd.k, fwd.n, (False, dc_align),
                                  (not fwd.b_transposed, fwd.b_align_bytes)))
    if f.grad_b and f.weight_b:  # dW (n, k) = dYᵀ (n, m) · X (m, k)
        out.append(_backward_site(f, fwd, "backward_dw", fwd.n, fwd.k, fwd.m, (True, dc_align),
                                  (fwd.a_transposed, fwd.a_align_bytes)))
    elif f.grad_b:  # dB (k, n) = Aᵀ (k, m) · dC (m, n)
        out.append(_backward_site(f, fwd, "backward_dw", fwd.k, fwd.n, fwd.m,
                                  (not fwd.a_transposed, fwd.a_align_bytes), (False, dc_align)))
    return out


def _backward_site(f: ForwardGemm, fwd: GemmSite, phase: str, m: int, n: int, k: int,
                   a: tuple[bool, int], b: tuple[bool, int]) -> GemmSite:
    """One gradient GEMM of ``fwd``: its dims, and A's and B's (transposed, alignment bytes)."""
    cd = DTYPES[fwd.dtype]
    dense = 2 * fwd.batch * m * n * k
    # the needed share of what runs: kept scores under a causal mask, a strided transposed
    # convolution's non-zero products
    flops = dense * fwd.flops // fwd.dense_flops if fwd.flops != fwd.dense_flops else dense
    dram = _gemm_bytes(fwd.batch, m, n, k, cd)
    if f.tensor_elems is not None:  # dX reads dY and W, writes dX; dW reads X and dY
        x, w, y = f.tensor_elems
        read, written = (y + w, x) if phase == "backward_dx" else (x + y, w)
        dram = read * cd.in_bytes + written * cd.out_bytes
    if fwd.op == "sdpa_pv" and phase == "backward_dx":  # dP, on chip
        c_align = 16
    elif fwd.op == "sdpa_qk" and phase == "backward_dw":  # dKᵀ, stored as dK's (kv, d) rows
        c_align = alignment_bytes(fwd.k, cd.out_bytes)
    else:
        c_align = alignment_bytes(n, cd.out_bytes)
    return replace(fwd, phase=phase, m=m, n=n, k=k, a_transposed=a[0], b_transposed=b[0],
                   a_align_bytes=a[1], b_align_bytes=b[1], c_align_bytes=c_align, bias=False,
                   flops=flops, dram_bytes=dram)


def _gradient_sums(
    node: Any, requires: Mapping[Any, bool], ctx: _Ctx, model_name: str
) -> list[OtherOp]:
    """The adds autograd runs for a tensor that feeds several differentiable ops (a residual
    stream's fork, Q/K/V projections of one hidden state, a weight tied to two layers): one
    per extra use, reading two gradients and writing their sum."""
    t = node.meta.get("val")
    if not requires.get(node) or not isinstance(t, torch.Tensor):
        return []
    uses = sum(1 for user in node.users if requires.get(user))
    if uses < 2:
        return []
    module, module_type = _module_of(node, model_name)
    size = ctx.tensor_bytes(t)
    return [
        OtherOp(
            module=module,
            module_type=module_type,
            op="aten.add",
            node=f"{node.name}.grad_sum",
            phase="backward",
            op_class="elementwise",
            dtype=ctx.act_name,
            numel=t.numel(),
            dram_bytes=3 * size,
        )
        for _ in range(uses - 1)
    ]


def _bias_grad(site: GemmSite, elems: int, out: torch.Tensor, ctx: _Ctx) -> OtherOp:
    """dbias = dC summed over its broadcast dims: reads dC once, writes the bias's gradient."""
    elem = ctx.elem_bytes(out.dtype)
    return OtherOp(
        module=site.module,
        module_type=site.module_type,
        op="aten.sum",
        node=site.node,
        phase="backward",
        op_class="reduction",
        dtype=ctx.act_name,
        numel=elems,
        dram_bytes=(unique_numel(out) + elems) * elem,
    )


def _backward_other(op: OtherOp) -> OtherOp:
    return OtherOp(
        module=op.module,
        module_type=op.module_type,
        op=op.op,
        node=op.node,
        phase="backward",
        op_class=op.op_class,
        dtype=op.dtype,
        numel=op.numel,
        dram_bytes=2 * op.dram_bytes,
        flops=2 * op.flops,
    )

