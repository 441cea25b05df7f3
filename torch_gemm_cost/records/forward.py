"""The forward records of one node: a GEMM's ``GemmSite``, a fused attention call's softmax,
and a non-GEMM op's ``OtherOp`` with the bytes it moves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .handlers import ForwardGemm, HandlerContext, attention_shape, bind_arguments
from .nodes import _qualified, _tensors
from .op_classes import CONVOLUTIONS, computes_stats, depthwise_shape, op_class_of, row_elems_of
from .sizing import _Ctx, _gemm_bytes, math_dtype
from .types import GemmSite, OtherOp, alignment_bytes


def _site(f: ForwardGemm, ctx: _Ctx, module: str, module_type: str, node: str) -> GemmSite:
    cd = math_dtype(f.op, ctx.cd)  # fp32 runs TF32 where PyTorch's flags allow it
    dense = 2 * f.batch * f.m * f.n * f.k
    if f.kept is None:  # a strided transposed convolution needs fewer than it runs
        flops = dense if f.needed_flops is None else f.needed_flops
    else:  # kept scores of the (q_len, kv_len) matrix: qk is (m=q, n=kv), pv is (m=q, k=kv)
        kv = f.n if f.op == "sdpa_qk" else f.k
        flops = dense // (f.m * kv) * f.kept
    if f.io_elems is not None:  # elements read, elements written
        dram = f.io_elems[0] * cd.in_bytes + f.io_elems[1] * cd.out_bytes
    elif f.tensor_elems is not None:  # A's and B's tensors read, C's written
        a, b, c = f.tensor_elems
        dram = (a + b) * cd.in_bytes + c * cd.out_bytes
    else:
        dram = _gemm_bytes(f.batch, f.m, f.n, f.k, cd)
    op = "conv1d" if module_type == "Conv1D" and f.op == "addmm" else f.op
    return GemmSite(
        module=module,
        module_type=module_type,
        op=op,
        node=node,
        phase="forward",
        batch=f.batch,
        m=f.m,
        n=f.n,
        k=f.k,
        dtype=cd.name,
        out_dtype=ctx.out_name,
        a_transposed=f.a[0],
        b_transposed=f.b[0],
        a_align_bytes=f.a[1],
        b_align_bytes=f.b[1],
        # the scores of a fused attention kernel stay on chip: no row of them is stored
        c_align_bytes=16 if f.op == "sdpa_qk" else alignment_bytes(f.n, cd.out_bytes),
        bias=f.bias,
        flops=flops,
        dram_bytes=dram,
        causal=f.kept is not None,
        taps=f.taps,
    )


def _sdpa_softmax(node: Any, f: ForwardGemm, ctx: _Ctx, module: str, module_type: str,
                  handler_ctx: HandlerContext) -> OtherOp:
    """The on-chip softmax of a fused attention call, carrying the call's ``AttentionShape``
    (a GPU runs the whole call as one attention kernel: ``predict.price``)."""
    b = bind_arguments(node)
    mask = b.get("attn_mask", b.get("attn_bias"))
    mask_val = getattr(mask, "meta", {}).get("val")
    mask_bytes = ctx.tensor_bytes(mask_val) if isinstance(mask_val, torch.Tensor) else 0
    scores = f.batch * (f.kept if f.kept is not None else f.m * f.n)
    return OtherOp(
        module=module,
        module_type=module_type,
        op="aten.scaled_dot_product_attention",
        node=node.name,
        phase="forward",
        op_class="softmax",
        dtype=ctx.act_name,
        numel=scores,
        dram_bytes=mask_bytes,
        flops=5 * scores,  # NB: scale, max, subtract, exp, sum per score
        attention=attention_shape(b, handler_ctx, mask_bytes),
    )


def _other(
    node: Any,
    name: str,
    inputs: Sequence[Any],
    outs: list[torch.Tensor],
    ctx: _Ctx,
    module: str,
    module_type: str,
) -> OtherOp:
    base = name.rstrip("_") if name not in ("__and__", "__or__", "__xor__") else name
    in_vals = [t for i in inputs for t in _tensors(i.meta.get("val"))]
    op_class = op_class_of(node, base, in_vals, outs)
    out_bytes = sum(ctx.tensor_bytes(t) for t in outs)
    if op_class == "view":
        dram = 0
    elif op_class == "embedding":  # gathers rows: indices in, rows read, rows written
        idx = sum(ctx.tensor_bytes(t) for t in in_vals if not t.dtype.is_floating_point)
        dram = idx + 2 * out_bytes
    else:
        seen: set[int] = set()
        dram = out_bytes
        for t in in_vals:
            if id(t) not in seen:
                seen.add(id(t))
                dram += ctx.tensor_bytes(t)
    floating = any(t.dtype.is_floating_point for t in outs + in_vals)
    args = bind_arguments(node) if op_class in ("norm", "softmax") or base in CONVOLUTIONS else {}
    return OtherOp(
        module=module,
        module_type=module_type,
        op=_qualified(node.target),
        node=node.name,
        phase="forward",
        op_class=op_class,
        dtype=ctx.act_name if floating else str(outs[0].dtype).removeprefix("torch."),
        numel=max(t.numel() for t in outs),
        dram_bytes=int(dram),
        row_elems=row_elems_of(base, args, in_vals[0] if in_vals else None),
        computes_stats=computes_stats(base, args),
        depthwise=depthwise_shape(base, args, lambda a: getattr(a, "meta", {}).get("val")),
    )

