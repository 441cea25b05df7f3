"""GEMM handlers: one per ATen op that runs GEMMs, from a node's arguments to its forward GEMMs.

Each handler reads the operands' meta tensors (shapes, strides, storage offsets) of one node;
nothing runs on real data. Handlers live in a registry keyed by op name that takes one handler
per op; ``register_gemm_handler`` adds one for a custom op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .types import AttentionShape, alignment_bytes

__all__ = [
    "ForwardGemm",
    "GemmHandler",
    "HandlerContext",
    "active_groups",
    "attention_shape",
    "bind_arguments",
    "causal_kept_entries",
    "gemm_handler",
    "matrix_layout",
    "op_name",
    "register_gemm_handler",
    "unique_numel",
]


def causal_kept_entries(q_len: int, kv_len: int, *, bottom_right: bool = False) -> int:
    """Scores a causal mask keeps in a (q_len, kv_len) matrix.

    Top-left aligned as SDPA's ``is_causal`` is (row i sees keys 0..i); bottom-right aligned as
    a KV cache is (row i sees keys 0..kv_len - q_len + i).

    >>> causal_kept_entries(4, 4)   # 1 + 2 + 3 + 4
    10
    >>> causal_kept_entries(2, 5, bottom_right=True)   # 4 + 5
    9
    """
    if bottom_right and q_len <= kv_len:
        return q_len * (kv_len - q_len) + q_len * (q_len + 1) // 2
    if q_len <= kv_len:
        return q_len * (q_len + 1) // 2
    return kv_len * (kv_len + 1) // 2 + (q_len - kv_len) * kv_len


# --- operands: layout and bytes


def _ints(xs: Iterable[Any]) -> tuple[int, ...]:
    return tuple(int(x) for x in xs)


def _layout(
    rows: int, cols: int, s_rows: int, s_cols: int, offset: int, elem: int
) -> tuple[bool, int]:
    """(transposed, alignment bytes) of a logical (rows, cols) matrix with element strides.

    Row-major when the column stride is 1; transposed (column-major) when the row stride is 1.
    NB: when neither stride is 1 torch copies the operand first; it is then taken as row-major.
    """
    if cols == 1 and rows > 1 and s_rows == 1:
        transposed, ld = True, 0
    elif s_cols == 1 or cols == 1:
        transposed, ld = False, (s_rows if rows > 1 else 0)
    elif s_rows == 1 or rows == 1:
        transposed, ld = True, (s_cols if cols > 1 else 0)
    else:
        transposed, ld = False, cols
    align = alignment_bytes(ld, elem)
    if offset:
        align = min(align, alignment_bytes(offset, elem))
    return transposed, align


def matrix_layout(
    t: torch.Tensor, elem: int, *, as_rows: bool = True, swap: bool = False
) -> tuple[bool, int]:
    """Layout of the trailing matrix of ``t``. A 1-D tensor is a row (``as_rows``) or a column.
    ``swap`` reads the trailing two dims transposed (K as B of Q·Kᵀ, a weight as B of x·Wᵀ)."""
    shape, stride = _ints(t.shape), _ints(t.stride())
    if len(shape) == 1:
        r, c, sr, sc = (1, shape[0], 0, stride[0]) if as_rows else (shape[0], 1, stride[0], 0)
    else:
        r, c, sr, sc = shape[-2], shape[-1], stride[-2], stride[-1]
    if swap:
        r, c, sr, sc = c, r, sc, sr
    return _layout(r, c, sr, sc, int(t.storage_offset()), elem)


def unique_numel(t: torch.Tensor) -> int:
    """Elements a kernel touches: broadcast (stride-0) dims count once."""
    return math.prod(int(s) for s, st in zip(t.shape, t.stride()) if int(st) != 0) if t.dim() else 1


# --- GEMM handlers: node -> forward GEMMs with their operands' grad flags


@dataclass(frozen=True, slots=True)
class ForwardGemm:
    """One forward GEMM a handler reads off a node, before it becomes a ``GemmSite``: dims,
    operand layouts and which operands need grad. ``a`` and ``b`` are (transposed, alignment
    bytes) pairs, as ``matrix_layout`` gives them."""

    op: str
    batch: int
    m: int
    n: int
    k: int
    a: tuple[bool, int]
    b: tuple[bool, int]
    bias: bool = False  # a bias add is fused into the GEMM
    grad_a: bool = False  # A needs grad: backward runs dA = dC·Bᵀ
    grad_b: bool = False  # B needs grad: backward runs dB = Aᵀ·dC
    weight_b: bool = False  # B is a weight stored (n, k): its gradient is dW = dYᵀ·X
    kept: int | None = None  # scores a causal mask keeps (attention); None: all of them
    io_elems: tuple[int, int] | None = None  # elements read and written, if not A, B, C once
    # elements of a broadcast bias that needs grad: backward sums dC down to it (a
    # reduction kernel); 0 when there is none or it has dC's own shape (dC passes through)
    bias_grad_elems: int = 0
    # elements of the tensors behind A, B and C when A is implicit (a convolution's
    # unfolded input): what crosses DRAM, forward and backward, instead of the matrices
    tensor_elems: tuple[int, int, int] | None = None
    taps: int = 1  # a convolution's kernel taps (``GemmSite.taps``)
    # FLOPs the op needs where the GEMM that runs multiplies zeros too (a strided transposed
    # convolution's dgrad kernel); None: 2·batch·m·n·k
    needed_flops: int | None = None


@dataclass(frozen=True)
class HandlerContext:
    """What a GEMM handler may read besides the node's arguments."""

    tensor: Callable[[Any], Any]  # an argument's value: the meta tensor behind an FX node
    requires_grad: Callable[[Any], bool]  # whether gradients flow into an argument
    elem_bytes: int  # bytes per element of A and B under the compute dtype
    causal_module: bool  # the node runs inside a module with ``is_causal = True``


GemmHandler = Callable[[Mapping[str, Any], HandlerContext], list[ForwardGemm]]


def bind_arguments(node: Any) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is None:
        return {}
    out: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


def _bias_grad_elems(bias: Any, out_elems: int, ctx: HandlerContext) -> int:
    """Elements of ``bias``'s gradient when backward must reduce dC to it, else 0."""
    t = ctx.tensor(bias) if bias is not None else None
    if not isinstance(t, torch.Tensor) or not ctx.requires_grad(bias) or t.numel() >= out_elems:
        return 0
    return int(t.numel())


def _gemm_linear(args: Mapping[str, Any], ctx: HandlerContext) -> list[ForwardGemm]:
    val, rg, elem = ctx.tensor, ctx.requires_grad, ctx.elem_bytes
    x, w = val(args["input"]), val(args["weight"])
    k = int(x.shape[-1])
    n = int(w.shape[0])
    m = math.prod(_ints(x.shape[:-1]))
    return [
        ForwardGemm(
            "linear",
            1,
            m,
            n,
            k,
            matrix_layout(x, elem),
            matrix_layout(w, elem, swap=True),
            bias=args.get("bias") is not None,
            grad_a=rg(args["input"]),
            grad_b=rg(args["weight"]),
            weight_b=True,
            bias_grad_elems=_bias_grad_elems(args.get("bias"), m * n, ctx),
        )
    ]


def _gemm_2d(op: str, a_key: str, b_key: str, bias_key: str | None):
    def handler(args: Mapping[str, Any], ctx: HandlerContext) -> list[ForwardGemm]:
        val, rg, elem = ctx.tensor, ctx.requires_grad, ctx.elem_bytes
        x, y = val(args[a_key]), val(args[b_key])
        bias = args.get(bias_key) if bias_key is not None else None
        batch = int(x.shape[0]) if x.dim() == 3 else 1
        m, k = int(x.shape[-2]), int(x.shape[-1])
        n = int(y.shape[-1])
        return [
            ForwardGemm(
                op,
                batch,
                m,
                n,
                k,
                matrix_layout(x, elem),
                matrix_layout(y, elem),
                bias=bias is not None,
                grad_a=rg(args[a_key]),
                grad_b=rg(args[b_key]),
                bias_grad_elems=_bias_grad_elems(bias, batch * m * n, ctx),
            )
        ]

    return handler


def _gemm_matmul(args: Mapping[str, Any], ctx: HandlerContext) -> list[ForwardGemm]:
    """torch.matmul in every broadcast case: dot, mv, vm, folded ND·2-D, batched ND·ND."""
    val, rg, elem = ctx.tensor, ctx.requires_grad, ctx.elem_bytes
    x, y = val(args["self"]), val(args["other"])
    xs, ys = _ints(x.shape), _ints(y.shape)
    k = xs[-1]
    if len(ys) == 1:  # (…, k)·(k,) -> m folds every leading dim, n = 1
        batch, m, n = 1, math.prod(xs[:-1]), 1
    elif len(xs) == 1:  # (k,)·(…, k, n) -> batched vector-matrix
        batch, m, n = math.prod(ys[:-2]), 1, ys[-1]
    elif len(ys) == 2:  # (…, m, k)·(k, n): torch folds the leading dims into m
        batch, m, n = 1, math.prod(xs[:-1]), ys[-1]
    else:  # batched, batch dims broadcast
        batch = math.prod(torch.broadcast_shapes(xs[:-2], ys[:-2]))
        m, n = xs[-2], ys[-1]
    return [
        ForwardGemm(
            "matmul",
            batch,
            m,
            n,
            k,
            matrix_layout(x, elem, as_rows=True),
            matrix_layout(y, elem, as_rows=False),
            grad_a=rg(args["self"]),
            grad_b=rg(args["other"]),
        )
    ]


def _gemm_sdpa(args: Mapping[str, Any], ctx: HandlerContext) -> list[ForwardGemm]:
    val, rg, elem = ctx.tensor, ctx.requires_grad, ctx.elem_bytes
    q, k_, v = val(args["query"]), val(args["key"]), val(args["value"])
    qs = _ints(q.shape)
    batch = math.prod(qs[:-2])
    q_len, d_qk = qs[-2], qs[-1]
    kv_len, d_v = int(k_.shape[-2]), int(v.shape[-1])
    kept = None
    if args.get("is_causal"):
        kept = causal_kept_entries(q_len, kv_len)
    elif ctx.causal_module and args.get("attn_mask", args.get("attn_bias")) is not None and q_len > 1:
        # transformers materialises the causal mask while tracing; eagerly it passes is_causal
        kept = causal_kept_entries(q_len, kv_len, bottom_right=True)
    g_q, g_k, g_v = rg(args["query"]), rg(args["key"]), rg(args["value"])
    # fused kernel: QKᵀ reads Q and K, PV reads V and writes O; the scores stay on chip
    # (K and V are read once even when grouped-query heads share them)
    qk_io = (unique_numel(q) + unique_numel(k_), 0)
    pv_io = (unique_numel(v), batch * q_len * d_v)
    qk = ForwardGemm(
        "sdpa_qk",
        batch,
        q_len,
        kv_len,
        d_qk,
        matrix_layout(q, elem),
        matrix_layout(k_, elem, swap=True),
        grad_a=g_q,
        grad_b=g_k,
        kept=kept,
        io_elems=qk_io,
    )
    pv = ForwardGemm(
        "sdpa_pv",
        batch,
        q_len,
        d_v,
        kv_len,
        (False, 16),  # P: on chip, never loaded from memory
        matrix_layout(v, elem),
        grad_a=g_q or g_k,
        grad_b=g_v,
        kept=kept,
        io_elems=pv_io,
    )
    return [qk, pv]


def attention_shape(args: Mapping[str, Any], ctx: HandlerContext,
                    mask_bytes: int = 0) -> AttentionShape:
    """The attention an SDPA call's arguments compute (``AttentionShape``).

    Q is (…, heads, q_len, d), K and V (…, kv_heads, kv_len, d): every leading dim before the
    head dim counts as a sequence. Causality as ``_gemm_sdpa`` reads it: ``is_causal`` aligns
    top-left, so query i sees keys 0 … i and keys past q_len are never reached (recorded as
    kv_len = q_len); a materialised mask in a causal module aligns bottom-right, as a KV cache
    does. NB: a top-left causal call with more queries than keys is recorded as non-causal.
    """
    q, k_, v = ctx.tensor(args["query"]), ctx.tensor(args["key"]), ctx.tensor(args["value"])
    qs = _ints(q.shape)
    heads = qs[-3] if len(qs) >= 3 else 1
    kv_heads = int(k_.shape[-3]) if k_.dim() >= 3 else 1
    q_len, kv_len = qs[-2], int(k_.shape[-2])
    mask = args.get("attn_mask", args.get("attn_bias"))
    causal = False
    if args.get("is_causal"):
        causal = q_len <= kv_len
        kv_len = q_len if causal else kv_len
    elif ctx.causal_module and mask is not None and 1 < q_len <= kv_len:
        causal = True
    return AttentionShape(
        batch=math.prod(qs[:-3]) if len(qs) > 3 else 1,
        heads=heads,
        kv_heads=kv_heads if heads % max(kv_heads, 1) == 0 else heads,
        q_len=q_len,
        kv_len=kv_len,
        head_dim=qs[-1],
        head_dim_v=int(v.shape[-1]),
        causal=causal,
        mask_bytes=mask_bytes,
        dropout=_dropout_p(args.get("dropout_p")) > 0.0,
    )


def _dropout_p(value: Any) -> float:
    """An SDPA call's ``dropout_p`` as a number (0 where absent or not a plain number)."""
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0


def active_groups(groups: int, rows: int) -> int:
    """Groups (experts) that receive at least one of ``rows`` rows routed uniformly at random:
    the expectation groups·(1 − (1 − 1/groups)^rows), rounded, at least 1.

    >>> active_groups(8, 1), active_groups(8, 4), active_groups(8, 4096)
    (1, 3, 8)
    """
    if groups <= 1 or rows <= 0:
        return max(1, min(groups, rows))
    return max(1, round(groups * (1.0 - (1.0 - 1.0 / groups) ** rows)))


def _gemm_grouped_mm(args: Mapping[str, Any], ctx: HandlerContext) -> list[ForwardGemm]:
    """``torch._grouped_mm``: one GEMM per group (an MoE layer's experts). With ``offs`` a 2-D
    operand is cut into groups along its jagged dim, whose sizes depend on the routing and so
    are unknown until it runs: the rows are taken as routed uniformly, spread over the groups
    that receive any (``active_groups``), each group a GEMM of ⌈rows / active⌉. Only those
    groups' weights are read. Without ``offs`` both operands are 3-D, a bmm."""
    val, rg, elem = ctx.tensor, ctx.requires_grad, ctx.elem_bytes
    x, y = val(args["self"]), val(args["mat2"])
    offs = val(args.get("offs")) if args.get("offs") is not None else None
    groups = int(offs.numel()) if isinstance(offs, torch.Tensor) else int(x.shape[0])

    def jagged(total: int) -> tuple[int, int]:  # (groups that receive any, size of each)
        hit = active_groups(groups, total)
        return hit, -(-total // hit)

    if x.dim() == 3 and y.dim() == 3:  # (G, m, k)·(G, k, n)
        batch, m, k, n = groups, int(x.shape[1]), int(x.shape[2]), int(y.shape[2])
    elif x.dim() == 2 and y.dim() == 3:  # rows of x jagged: (Σm, k)·(G, k, n) -> (Σm, n)
        (batch, m), k, n = jagged(int(x.shape[0])), int(x.shape[1]), int(y.shape[2])
    elif x.dim() == 3 and y.dim() == 2:  # columns of y jagged: (G, m, k)·(k, Σn) -> (m, Σn)
        (batch, n), m, k = jagged(int(y.shape[1])), int(x.shape[1]), int(x.shape[2])
    else:  # the reduction dim jagged (a weight gradient): (m, Σk)·(Σk, n) -> (G, m, n)
        (batch, k), m, n = jagged(int(x.shape[1])), int(x.shape[0]), int(y.shape[1])
    return [
        ForwardGemm(
            "grouped_mm",
            batch,
            m,
            n,
            k,
            matrix_layout(x, elem),
            matrix_layout(y, elem),
            bias=args.get("bias") is not None,
            grad_a=rg(args["self"]),
            grad_b=rg(args["mat2"]),
        )
    ]


def _per_dim(value: Any, nd: int, default: int) -> tuple[int, ...]:
    if value is None:
        return (default,) * nd
    vals = _ints(value) if isinstance(value, (list, tuple)) else (int(value),)
    return vals * nd if len(vals) == 1 else vals


def _gemm_convolution(transposed_op: bool):
    """A convolution as the implicit GEMM cuDNN runs, one per group: (N·output positions) rows
    by C_out/g filters, reducing over C_in/g·kernel taps. A transposed convolution is cuDNN's
    data-gradient (dgrad) kernel of the convolution it transposes: the same implicit GEMM over
    its own output, (N·output positions) by C_out/g, reducing over C_in/g·taps, where a stride
    s puts s − 1 inserted zeros between input positions that the kernel multiplies as well, so
    it runs about s^d times the FLOPs a transposed convolution needs (KernelBench's strided
    ones: ``81_conv_transposed_2D`` at stride 5 runs 4.8 GFLOP in 4.16 ms on an L40S, 1.2
    TFLOP/s useful, 29 counting the 25x zeros, the rate of its unstrided ones). A 3D one
    strided in depth with 16 or more input channels is the exception: its kernel splits the
    output by depth phase and runs only the kD/sD of the depth taps each phase meets (its height
    and width taps all run). At stride 2 and 3×3×3, KernelBench's ``77_conv_transposed_3D``
    would run its zero-inclusive FLOPs at 71–83% of the A100's and the A6000's TF32 peaks
    with only 64 filters, a rate GEMMs that narrow do not reach, and comes out 2.3×
    slow priced so; with fewer channels (3 or 8) the same shapes run at the zero-inclusive
    rate or below. ``flops``
    counts the needed FLOPs (as ``FlopCounterMode``); the dims are the GEMM that runs. Bytes
    are the input, weight and output tensors', not the unfolded matrix's; A's alignment is the
    unfolded row's. A depthwise convolution (one input channel per group) is no GEMM: the
    handler declines it and it is costed as the stencil it is (``op_classes.depthwise_shape``,
    ``predict.stencil``)."""

    def handler(args: Mapping[str, Any], ctx: HandlerContext) -> list[ForwardGemm]:
        x, w = ctx.tensor(args["input"]), ctx.tensor(args["weight"])
        nd = w.dim() - 2
        groups = int(args.get("groups") or 1)
        transposed = transposed_op or bool(args.get("transposed") or False)
        batched = x.dim() == nd + 2
        n_img = int(x.shape[0]) if batched else 1
        spatial = _ints(x.shape[-nd:]) if nd else ()
        stride = _per_dim(args.get("stride"), nd, 1)
        dilation = _per_dim(args.get("dilation"), nd, 1)
        pad = args.get("padding")
        padding = (0,) * nd if isinstance(pad, str) else _per_dim(pad, nd, 0)
        kernel = _ints(w.shape[2:])
        taps = math.prod(kernel)
        if transposed:  # weight (C_in, C_out/g, *kernel)
            in_per_group, c_out_g = int(w.shape[0]) // groups, int(w.shape[1])
            extra = _per_dim(args.get("output_padding"), nd, 0)
            out_sp = [(i - 1) * st - 2 * p + d * (kk - 1) + e + 1 for i, st, p, d, kk, e in
                      zip(spatial, stride, padding, dilation, kernel, extra)]
            needed = 2 * groups * n_img * math.prod(spatial) * c_out_g * taps * in_per_group
            if nd == 3 and stride[0] > 1 and int(w.shape[0]) >= 16:  # depth phases
                taps = max(1, round(kernel[0] / stride[0] * math.prod(kernel[1:])))
            m, n, k = n_img * math.prod(out_sp), c_out_g, in_per_group * taps
            out_elems = n_img * c_out_g * groups * math.prod(out_sp)
            name = "conv_transpose"
        else:  # weight (C_out, C_in/g, *kernel)
            c_out, in_per_group = int(w.shape[0]), int(w.shape[1])
            out_sp = [(i + 2 * p - d * (kk - 1) - 1) // st + 1 for i, st, p, d, kk in
                      zip(spatial, stride, padding, dilation, kernel)]
            if pad == "same":  # stride 1, padded to keep every size
                out_sp = list(spatial)
            m, n, k = n_img * math.prod(out_sp), c_out // groups, in_per_group * taps
            out_elems = n_img * c_out * math.prod(out_sp)
            needed = 2 * groups * m * n * k
            name = "convolution"
        if groups > 1 and in_per_group == 1:
            return []  # depthwise: a stencil, an OtherOp of its own (predict.stencil)
        elem = ctx.elem_bytes
        return [
            ForwardGemm(
                name,
                groups,
                m,
                n,
                k,
                _layout(m, k, k, 1, 0, elem),  # unfolded input, row-major
                _layout(k, n, 1, k, 0, elem),  # filters stored (n, k), as a Linear weight
                bias=args.get("bias") is not None,
                grad_a=ctx.requires_grad(args["input"]),
                grad_b=ctx.requires_grad(args["weight"]),
                weight_b=True,
                bias_grad_elems=_bias_grad_elems(args.get("bias"), out_elems, ctx),
                tensor_elems=(unique_numel(x), unique_numel(w), out_elems),
                taps=taps,
                needed_flops=needed,
            )
        ]

    return handler


def _gemm_vector(op: str, a_key: str, b_key: str, bias_key: str | None):
    """mv (m, k)·(k,) and dot (k,)·(k,): GEMMs with n = 1 (and m = 1)."""

    def handler(args: Mapping[str, Any], ctx: HandlerContext) -> list[ForwardGemm]:
        x, y = ctx.tensor(args[a_key]), ctx.tensor(args[b_key])
        m = int(x.shape[0]) if x.dim() == 2 else 1
        k = int(y.shape[0])
        return [
            ForwardGemm(
                op,
                1,
                m,
                1,
                k,
                matrix_layout(x, ctx.elem_bytes),
                matrix_layout(y, ctx.elem_bytes, as_rows=False),
                bias=bias_key is not None,
                grad_a=ctx.requires_grad(args[a_key]),
                grad_b=ctx.requires_grad(args[b_key]),
            )
        ]

    return handler


# --- the registry: ATen op name -> handler

_HANDLERS: dict[str, GemmHandler] = {}


def op_name(op: Any) -> str:
    """The name an op is registered under: its overload packet's name (``aten.add_.Tensor`` ->
    ``add_``; ``torch.ops.mylib.my_gemm`` -> ``my_gemm``), a Python callable's ``__name__``, or
    the string itself."""
    if isinstance(op, str):
        return op
    packet = getattr(op, "_overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(op, "__name__", None) or str(op)
    return str(name).split(".")[-1]


def gemm_handler(op: Any) -> GemmHandler | None:
    """The handler registered for ``op`` (a name or the op), None when it runs no GEMM."""
    return _HANDLERS.get(op_name(op))


def register_gemm_handler(op: Any, handler: GemmHandler) -> GemmHandler:
    """Register ``handler`` for the op ``op`` (its name, or the op, e.g.
    ``torch.ops.mylib.my_gemm``), so that extraction records the GEMMs it runs.

    ``handler(args, ctx)`` gets the node's arguments by schema name and a ``HandlerContext``
    and returns the op's forward GEMMs (``ForwardGemm``, operand layouts from
    ``matrix_layout``); backward GEMMs, FLOPs and bytes follow from them. An empty list means
    this call runs no GEMM (the op is then costed as a memory-bound op). Raises ValueError if
    ``op`` has a handler already: one op, one handler. Returns ``handler``.

    NB: the default capture records a custom op's forward as its ``autograd.Function`` runs
    it, with grad disabled, so it gets no backward GEMMs; ``capture_method="export"`` sees the
    op's backward.
    """
    name = op_name(op)
    if not name:
        raise ValueError(f"cannot register a GEMM handler for {op!r}: it has no name")
    if name in _HANDLERS:
        raise ValueError(f"op {name!r} already has a GEMM handler ({_HANDLERS[name].__qualname__}); "
                         "one op takes one handler")
    if not callable(handler):
        raise TypeError(f"handler for {name!r} must be callable, got {handler!r}")
    _HANDLERS[name] = handler
    return handler


for _name, _handler in (
    ("linear", _gemm_linear),
    ("mv", _gemm_vector("mv", "self", "vec", None)),
    ("addmv", _gemm_vector("addmv", "mat", "vec", "self")),
    ("dot", _gemm_vector("dot", "self", "tensor", None)),
    ("vdot", _gemm_vector("dot", "self", "other", None)),
    # NB: addbmm also sums the batch of products; that reduction is not costed
    ("addbmm", _gemm_2d("addbmm", "batch1", "batch2", "self")),
    ("addmm", _gemm_2d("addmm", "mat1", "mat2", "self")),
    ("mm", _gemm_2d("mm", "self", "mat2", None)),
    ("bmm", _gemm_2d("bmm", "self", "mat2", None)),
    ("baddbmm", _gemm_2d("baddbmm", "batch1", "batch2", "self")),
    ("matmul", _gemm_matmul),
    ("_grouped_mm", _gemm_grouped_mm),
    *((name, _gemm_convolution(False))
      for name in ("convolution", "_convolution", "conv1d", "conv2d", "conv3d")),
    *((name, _gemm_convolution(True))
      for name in ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")),
    ("scaled_dot_product_attention", _gemm_sdpa),
    # the fused kernels SDPA dispatches to, where a graph holds them directly
    ("_scaled_dot_product_flash_attention", _gemm_sdpa),
    ("_scaled_dot_product_flash_attention_for_cpu", _gemm_sdpa),
    ("_scaled_dot_product_efficient_attention", _gemm_sdpa),
    ("_scaled_dot_product_cudnn_attention", _gemm_sdpa),
):
    register_gemm_handler(_name, _handler)
