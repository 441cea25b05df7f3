"""GEMM records: what a captured graph computes, as frozen records with shapes, dtypes and bytes.

Convention (standard BLAS): ``C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]``; ``k`` is the
reduction dim and FLOPs = 2·batch·m·n·k.

``extract(captured, dtype, mode=...)`` walks a captured graph (see ``capture``) and returns its
``GemmSite`` and ``OtherOp`` records in execution order, storing each node's records in
``node.meta["torch_gemm_cost"]``. Every spelling counts: ``linear``, ``addmm`` (HF ``Conv1D``
becomes ``conv1d``), ``mm``, ``bmm``, ``baddbmm``, ``addbmm``, ``mv``, ``dot``, ``matmul`` in
every broadcast case, ``einsum`` (per pairwise contraction) and scaled-dot-product attention.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .capture import NO_GRAD
from .dtypes import DTYPES, ComputeDtype, resolve_dtype

__all__ = [
    "META_KEY",
    "PHASES",
    "GemmSite",
    "OtherOp",
    "alignment_bytes",
    "causal_kept_entries",
    "einsum_gemms",
    "extract",
]


def alignment_bytes(leading_dim: int, elem_bytes: int, cap: int = 16) -> int:
    """Largest power of two ≤ ``cap`` dividing the leading dimension's size in bytes.

    This is the widest vector load the operand allows: 16 bytes (e.g. 8 fp16 elements) when
    ``leading_dim * elem_bytes`` is a multiple of 16.

    >>> alignment_bytes(50257, 2)   # 100514 bytes = 2 · 50257: only 2-byte loads
    2
    >>> alignment_bytes(4096, 2)
    16
    """
    row_bytes = int(leading_dim) * int(elem_bytes)
    if row_bytes <= 0:
        return cap
    align = 1
    while align < cap and row_bytes % (align * 2) == 0:
        align *= 2
    return align


@dataclass(frozen=True)
class GemmSite:
    """One GEMM the model runs, in the standard convention, under the requested compute dtype."""

    module: str  # dotted module path, e.g. "model.layers.0.self_attn.q_proj"; "" at top level
    module_type: str  # class name of that module, e.g. "Linear"
    op: str  # linear, addmm, mm, bmm, baddbmm, addbmm, mv, addmv, dot, matmul, einsum,
    # conv1d (HF Conv1D), sdpa_qk, sdpa_pv, grouped_mm (MoE experts), convolution and
    # conv_transpose (nn.ConvNd and ConvTransposeNd, as implicit GEMMs)
    node: str  # FX node name (or recorder op index) that produced it
    phase: str  # "forward", "backward_dx" or "backward_dw"
    batch: int
    m: int
    n: int
    k: int
    dtype: str  # compute dtype, canonical name (see dtypes.DTYPES)
    out_dtype: str
    a_transposed: bool  # A is read as (k, m) column-major
    b_transposed: bool  # B is read as (n, k), as a Linear weight is
    a_align_bytes: int  # widest vector load along A's contiguous dim (2, 4, 8 or 16)
    b_align_bytes: int
    c_align_bytes: int
    bias: bool  # a bias add is fused into the GEMM
    flops: int  # 2·batch·m·n·k, times the kept fraction under a causal mask
    dram_bytes: int  # compulsory bytes: A, B and C each moved once
    causal: bool = False  # attention scores under a causal mask (about half the tiles skipped)
    # a convolution's kernel taps: its unfolded dim (k forward: C_in/groups·taps; n forward for a
    # transposed one: C_out/groups·taps) holds this many elements per channel; 1 elsewhere
    taps: int = 1

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.m, self.n, self.k)

    @property
    def dense_flops(self) -> int:
        """2·batch·m·n·k, with no causal discount (what FLOP counters report)."""
        return 2 * self.batch * self.m * self.n * self.k


@dataclass(frozen=True)
class OtherOp:
    """A non-GEMM op: its bytes moved, so it can get a memory-bound time."""

    module: str
    module_type: str
    op: str  # the aten overload packet, e.g. "aten.add", "aten.native_layer_norm"
    node: str
    phase: str
    op_class: str  # elementwise, norm, softmax, reduction, copy, embedding, view, attention, other
    dtype: str
    numel: int  # elements of the largest output
    dram_bytes: int  # bytes read plus bytes written, each tensor once
    flops: int = 0


# ----------------------------------------------------------------------------- extraction
#
# Everything below turns a captured FX graph into records. Each handler reads the operands'
# meta tensors (shapes, strides, storage offsets) of one node; nothing runs on real data.

META_KEY = "torch_gemm_cost"  # node.meta[META_KEY]: tuple of the node's GemmSite/OtherOp records
PHASES: tuple[str, ...] = ("forward", "backward_dx", "backward_dw", "backward")


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


def einsum_gemms(equation: str, shapes: Sequence[Sequence[int]]) -> list[tuple[int, int, int, int]]:
    """The (batch, m, n, k) of each pairwise contraction of an einsum, left to right.

    Letters in both operands and needed later are batch dims, in both and not needed are the
    reduction (k), in one operand only and needed are m (first) or n (second). Letters needed
    by nobody are summed away before the GEMM. NB: with more than two operands torch may pick
    another contraction order (opt_einsum); FLOPs can then differ.

    >>> einsum_gemms("bik,kj->bij", [(2, 4, 8), (8, 16)])
    [(1, 8, 16, 8)]
    >>> einsum_gemms("bhqd,bhkd->bhqk", [(2, 3, 5, 7), (2, 3, 6, 7)])
    [(6, 5, 6, 7)]
    """
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum {equation!r} names {len(terms)} operands, got {len(shapes)}")
    ell_ndim = max(
        (len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes) if "..." in t), default=0
    )
    ell = [chr(0x100 + i) for i in range(ell_ndim)]  # stand-in letters for "..." dims
    sizes: dict[str, int] = {}
    letters: list[list[str]] = []
    for term, shape in zip(terms, shapes):
        n_ell = len(shape) - len(term.replace("...", ""))
        names = [
            x
            for c in term.replace("...", "\0")
            for x in (ell[ell_ndim - n_ell :] if c == "\0" else [c])
        ]
        if len(names) != len(shape):
            raise ValueError(f"einsum term {term!r} does not match operand shape {tuple(shape)}")
        for c, size in zip(names, shape):
            sizes[c] = max(sizes.get(c, 1), int(size))
        letters.append(names)
    if arrow:
        out_letters = [x for c in out.replace("...", "\0") for x in (ell if c == "\0" else [c])]
    else:
        counts: dict[str, int] = {}
        for names in letters:
            for c in names:
                counts[c] = counts.get(c, 0) + 1
        out_letters = ell + sorted(c for c, n in counts.items() if n == 1 and c not in ell)

    def prod(cs: Iterable[str]) -> int:
        return math.prod(sizes[c] for c in cs)

    gemms = []
    cur = letters[0]
    for j in range(1, len(letters)):
        nxt = letters[j]
        needed = set(out_letters).union(*[set(x) for x in letters[j + 1 :]])
        a, b = set(cur), set(nxt)
        batch = [c for c in dict.fromkeys(cur + nxt) if c in a and c in b and c in needed]
        k = [c for c in dict.fromkeys(cur) if c in b and c not in needed]
        m = [c for c in dict.fromkeys(cur) if c not in b and c in needed]
        n = [c for c in dict.fromkeys(nxt) if c not in a and c in needed]
        gemms.append((prod(batch), prod(m), prod(n), prod(k)))
        cur = batch + m + n
    return gemms


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


def _matrix(
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


def _unique_numel(t: torch.Tensor) -> int:
    """Elements a kernel touches: broadcast (stride-0) dims count once."""
    return math.prod(int(s) for s, st in zip(t.shape, t.stride()) if int(st) != 0) if t.dim() else 1


class _Ctx:
    """What every record of one extraction shares."""

    def __init__(self, cd: ComputeDtype, native: torch.dtype | None) -> None:
        self.cd = cd
        self.out_name = _out_dtype_name(cd)
        self.act_dtype = cd.torch_dtype if cd.in_bytes >= 2 else torch.bfloat16
        self.act_name = str(self.act_dtype).removeprefix("torch.")
        self.native = native

    def elem_bytes(self, dtype: torch.dtype) -> int:
        if dtype.is_floating_point and (self.native is None or dtype == self.native):
            return self.act_dtype.itemsize
        return dtype.itemsize

    def tensor_bytes(self, t: torch.Tensor) -> int:
        return _unique_numel(t) * self.elem_bytes(t.dtype)


def _out_dtype_name(cd: ComputeDtype) -> str:
    """A ``DTYPES`` key whose element size is ``cd``'s output size (int8 -> 4-byte accumulators,
    fp8 -> 16-bit output)."""
    if cd.out_bytes == cd.in_bytes:
        return cd.name
    return {4: "float32", 2: "bfloat16", 8: "float64"}[cd.out_bytes]


# --- GEMM handlers: node -> forward GEMMs with their operands' grad flags


class _Fwd:
    """A forward GEMM before it becomes a record: dims, layouts and which operands need grad."""

    __slots__ = (
        "a",
        "b",
        "batch",
        "bias",
        "bias_grad_elems",
        "grad_a",
        "grad_b",
        "io_elems",
        "k",
        "kept",
        "m",
        "n",
        "op",
        "taps",
        "tensor_elems",
        "weight_b",
    )

    def __init__(
        self,
        op: str,
        batch: int,
        m: int,
        n: int,
        k: int,
        a: tuple[bool, int],
        b: tuple[bool, int],
        *,
        bias: bool = False,
        grad_a: bool = False,
        grad_b: bool = False,
        weight_b: bool = False,
        kept: int | None = None,
        io_elems: tuple[int, int] | None = None,
        bias_grad_elems: int = 0,
        tensor_elems: tuple[int, int, int] | None = None,
        taps: int = 1,
    ) -> None:
        self.op, self.batch, self.m, self.n, self.k = op, batch, m, n, k
        self.taps = taps
        self.a, self.b, self.bias, self.kept, self.io_elems = a, b, bias, kept, io_elems
        # elements of the tensors behind A, B and C when A is implicit (a convolution's
        # unfolded input): what crosses DRAM, forward and backward, instead of the matrices
        self.tensor_elems = tensor_elems
        self.grad_a, self.grad_b, self.weight_b = grad_a, grad_b, weight_b
        # elements of a broadcast bias that needs grad: backward sums dC down to it (a
        # reduction kernel); 0 when there is none or it has dC's own shape (dC passes through)
        self.bias_grad_elems = bias_grad_elems


class _Env:
    """What a GEMM handler may read besides the node's arguments."""

    __slots__ = ("elem", "module_causal", "rg", "val")

    def __init__(
        self, val: Callable[[Any], Any], rg: Callable[[Any], bool], elem: int, module_causal: bool
    ) -> None:
        self.val, self.rg, self.elem, self.module_causal = val, rg, elem, module_causal


def _bind(node: Any) -> dict[str, Any]:
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


def _bias_grad_elems(bias: Any, out_elems: int, env: _Env) -> int:
    """Elements of ``bias``'s gradient when backward must reduce dC to it, else 0."""
    t = env.val(bias) if bias is not None else None
    if not isinstance(t, torch.Tensor) or not env.rg(bias) or t.numel() >= out_elems:
        return 0
    return int(t.numel())


def _gemm_linear(b: dict, env: _Env) -> list[_Fwd]:
    val, rg, elem = env.val, env.rg, env.elem
    x, w = val(b["input"]), val(b["weight"])
    k = int(x.shape[-1])
    n = int(w.shape[0])
    m = math.prod(_ints(x.shape[:-1]))
    return [
        _Fwd(
            "linear",
            1,
            m,
            n,
            k,
            _matrix(x, elem),
            _matrix(w, elem, swap=True),
            bias=b.get("bias") is not None,
            grad_a=rg(b["input"]),
            grad_b=rg(b["weight"]),
            weight_b=True,
            bias_grad_elems=_bias_grad_elems(b.get("bias"), m * n, env),
        )
    ]


def _gemm_2d(op: str, a_key: str, b_key: str, bias_key: str | None):
    def handler(b: dict, env: _Env) -> list[_Fwd]:
        val, rg, elem = env.val, env.rg, env.elem
        x, y = val(b[a_key]), val(b[b_key])
        batch = int(x.shape[0]) if x.dim() == 3 else 1
        m, k = int(x.shape[-2]), int(x.shape[-1])
        n = int(y.shape[-1])
        return [
            _Fwd(
                op,
                batch,
                m,
                n,
                k,
                _matrix(x, elem),
                _matrix(y, elem),
                bias=bias_key is not None and b.get(bias_key) is not None,
                grad_a=rg(b[a_key]),
                grad_b=rg(b[b_key]),
                bias_grad_elems=_bias_grad_elems(b.get(bias_key), batch * m * n, env),
            )
        ]

    return handler


def _gemm_matmul(b: dict, env: _Env) -> list[_Fwd]:
    val, rg, elem = env.val, env.rg, env.elem
    """torch.matmul in every broadcast case: dot, mv, vm, folded ND·2-D, batched ND·ND."""
    x, y = val(b["self"]), val(b["other"])
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
        _Fwd(
            "matmul",
            batch,
            m,
            n,
            k,
            _matrix(x, elem, as_rows=True),
            _matrix(y, elem, as_rows=False),
            grad_a=rg(b["self"]),
            grad_b=rg(b["other"]),
        )
    ]


def _gemm_einsum(b: dict, env: _Env) -> list[_Fwd]:
    val, rg, elem = env.val, env.rg, env.elem
    operands = list(b["tensors"])
    shapes = [_ints(val(t).shape) for t in operands]
    out = []
    grad = rg(operands[0])
    for j, (batch, m, n, k) in enumerate(einsum_gemms(b["equation"], shapes)):
        # NB: torch permutes and reshapes einsum operands into contiguous bmm inputs
        layout_a = _layout(m, k, k, 1, 0, elem)
        layout_b = _layout(k, n, n, 1, 0, elem)
        gb = rg(operands[j + 1])
        out.append(_Fwd("einsum", batch, m, n, k, layout_a, layout_b, grad_a=grad, grad_b=gb))
        grad = grad or gb
    return out


def _gemm_sdpa(b: dict, env: _Env) -> list[_Fwd]:
    val, rg, elem = env.val, env.rg, env.elem
    q, k_, v = val(b["query"]), val(b["key"]), val(b["value"])
    qs = _ints(q.shape)
    batch = math.prod(qs[:-2])
    q_len, d_qk = qs[-2], qs[-1]
    kv_len, d_v = int(k_.shape[-2]), int(v.shape[-1])
    kept = None
    if b.get("is_causal"):
        kept = causal_kept_entries(q_len, kv_len)
    elif env.module_causal and b.get("attn_mask", b.get("attn_bias")) is not None and q_len > 1:
        # transformers materialises the causal mask while tracing; eagerly it passes is_causal
        kept = causal_kept_entries(q_len, kv_len, bottom_right=True)
    g_q, g_k, g_v = rg(b["query"]), rg(b["key"]), rg(b["value"])
    # fused kernel: QKᵀ reads Q and K, PV reads V and writes O; the scores stay on chip
    # (K and V are read once even when grouped-query heads share them)
    qk_io = (_unique_numel(q) + _unique_numel(k_), 0)
    pv_io = (_unique_numel(v), batch * q_len * d_v)
    qk = _Fwd(
        "sdpa_qk",
        batch,
        q_len,
        kv_len,
        d_qk,
        _matrix(q, elem),
        _matrix(k_, elem, swap=True),
        grad_a=g_q,
        grad_b=g_k,
        kept=kept,
        io_elems=qk_io,
    )
    pv = _Fwd(
        "sdpa_pv",
        batch,
        q_len,
        d_v,
        kv_len,
        (False, 16),  # P: on chip, never loaded from memory
        _matrix(v, elem),
        grad_a=g_q or g_k,
        grad_b=g_v,
        kept=kept,
        io_elems=pv_io,
    )
    return [qk, pv]


def active_groups(groups: int, rows: int) -> int:
    """Groups (experts) that receive at least one of ``rows`` rows routed uniformly at random:
    the expectation groups·(1 − (1 − 1/groups)^rows), rounded, at least 1.

    >>> active_groups(8, 1), active_groups(8, 4), active_groups(8, 4096)
    (1, 3, 8)
    """
    if groups <= 1 or rows <= 0:
        return max(1, min(groups, rows))
    return max(1, round(groups * (1.0 - (1.0 - 1.0 / groups) ** rows)))


def _gemm_grouped_mm(b: dict, env: _Env) -> list[_Fwd]:
    """``torch._grouped_mm``: one GEMM per group (an MoE layer's experts). With ``offs`` a 2-D
    operand is cut into groups along its jagged dim, whose sizes depend on the routing and so
    are unknown until it runs: the rows are taken as routed uniformly, spread over the groups
    that receive any (``active_groups``), each group a GEMM of ⌈rows / active⌉. Only those
    groups' weights are read. Without ``offs`` both operands are 3-D, a bmm."""
    val, rg, elem = env.val, env.rg, env.elem
    x, y = val(b["self"]), val(b["mat2"])
    offs = val(b.get("offs")) if b.get("offs") is not None else None
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
        _Fwd(
            "grouped_mm",
            batch,
            m,
            n,
            k,
            _matrix(x, elem),
            _matrix(y, elem),
            bias=b.get("bias") is not None,
            grad_a=rg(b["self"]),
            grad_b=rg(b["mat2"]),
        )
    ]


def _per_dim(value: Any, nd: int, default: int) -> tuple[int, ...]:
    if value is None:
        return (default,) * nd
    vals = _ints(value) if isinstance(value, (list, tuple)) else (int(value),)
    return vals * nd if len(vals) == 1 else vals


def _gemm_convolution(transposed_op: bool):
    """A convolution as the implicit GEMM cuDNN runs, one per group: (N·output positions) rows
    by C_out/g filters, reducing over C_in/g·kernel taps. A transposed convolution runs the data
    gradient's GEMM: (N·input positions) by C_out/g·taps, reducing over C_in/g. Its bytes are
    the input, weight and output tensors', not the unfolded matrix's; A's alignment is the
    unfolded row's. A depthwise convolution (one input channel per group) is no GEMM: the
    handler declines it and it is costed as the memory-bound op it is."""

    def handler(b: dict, env: _Env) -> list[_Fwd]:
        x, w = env.val(b["input"]), env.val(b["weight"])
        nd = w.dim() - 2
        groups = int(b.get("groups") or 1)
        transposed = transposed_op or bool(b.get("transposed") or False)
        batched = x.dim() == nd + 2
        n_img = int(x.shape[0]) if batched else 1
        spatial = _ints(x.shape[-nd:]) if nd else ()
        stride = _per_dim(b.get("stride"), nd, 1)
        dilation = _per_dim(b.get("dilation"), nd, 1)
        pad = b.get("padding")
        padding = (0,) * nd if isinstance(pad, str) else _per_dim(pad, nd, 0)
        kernel = _ints(w.shape[2:])
        taps = math.prod(kernel)
        if transposed:  # weight (C_in, C_out/g, *kernel)
            in_per_group, c_out_g = int(w.shape[0]) // groups, int(w.shape[1])
            extra = _per_dim(b.get("output_padding"), nd, 0)
            out_sp = [(i - 1) * st - 2 * p + d * (kk - 1) + e + 1 for i, st, p, d, kk, e in
                      zip(spatial, stride, padding, dilation, kernel, extra)]
            m, n, k = n_img * math.prod(spatial), c_out_g * taps, in_per_group
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
            name = "convolution"
        if groups > 1 and in_per_group == 1:
            return []  # depthwise: a memory-bound stencil, costed as an elementwise op
        elem = env.elem
        return [
            _Fwd(
                name,
                groups,
                m,
                n,
                k,
                _layout(m, k, k, 1, 0, elem),  # unfolded input, row-major
                _layout(k, n, 1, k, 0, elem),  # filters stored (n, k), as a Linear weight
                bias=b.get("bias") is not None,
                grad_a=env.rg(b["input"]),
                grad_b=env.rg(b["weight"]),
                weight_b=True,
                bias_grad_elems=_bias_grad_elems(b.get("bias"), out_elems, env),
                tensor_elems=(_unique_numel(x), _unique_numel(w), out_elems),
                taps=taps,
            )
        ]

    return handler


def _gemm_vector(op: str, a_key: str, b_key: str, bias_key: str | None):
    """mv (m, k)·(k,) and dot (k,)·(k,): GEMMs with n = 1 (and m = 1)."""

    def handler(b: dict, env: _Env) -> list[_Fwd]:
        x, y = env.val(b[a_key]), env.val(b[b_key])
        m = int(x.shape[0]) if x.dim() == 2 else 1
        k = int(y.shape[0])
        return [
            _Fwd(
                op,
                1,
                m,
                1,
                k,
                _matrix(x, env.elem),
                _matrix(y, env.elem, as_rows=False),
                bias=bias_key is not None,
                grad_a=env.rg(b[a_key]),
                grad_b=env.rg(b[b_key]),
            )
        ]

    return handler


_GEMM_HANDLERS: dict[str, Callable[..., list[_Fwd]]] = {
    "linear": _gemm_linear,
    "mv": _gemm_vector("mv", "self", "vec", None),
    "addmv": _gemm_vector("addmv", "mat", "vec", "self"),
    "dot": _gemm_vector("dot", "self", "tensor", None),
    "vdot": _gemm_vector("dot", "self", "other", None),
    # NB: addbmm also sums the batch of products; that reduction is not costed
    "addbmm": _gemm_2d("addbmm", "batch1", "batch2", "self"),
    "addmm": _gemm_2d("addmm", "mat1", "mat2", "self"),
    "mm": _gemm_2d("mm", "self", "mat2", None),
    "bmm": _gemm_2d("bmm", "self", "mat2", None),
    "baddbmm": _gemm_2d("baddbmm", "batch1", "batch2", "self"),
    "matmul": _gemm_matmul,
    "einsum": _gemm_einsum,
    "_grouped_mm": _gemm_grouped_mm,
    "convolution": _gemm_convolution(False),
    "_convolution": _gemm_convolution(False),
    "conv1d": _gemm_convolution(False),
    "conv2d": _gemm_convolution(False),
    "conv3d": _gemm_convolution(False),
    "conv_transpose1d": _gemm_convolution(True),
    "conv_transpose2d": _gemm_convolution(True),
    "conv_transpose3d": _gemm_convolution(True),
    "scaled_dot_product_attention": _gemm_sdpa,
    # the fused kernels SDPA dispatches to, where a graph holds them directly
    "_scaled_dot_product_flash_attention": _gemm_sdpa,
    "_scaled_dot_product_flash_attention_for_cpu": _gemm_sdpa,
    "_scaled_dot_product_efficient_attention": _gemm_sdpa,
    "_scaled_dot_product_cudnn_attention": _gemm_sdpa,
}

# --- non-GEMM op classes, by ATen op name (trailing "_" of in-place ops stripped)

_CLASSES: dict[str, tuple[str, ...]] = {
    "view": (
        "view",
        "_unsafe_view",
        "reshape",
        "expand",
        "expand_as",
        "permute",
        "transpose",
        "t",
        "unsqueeze",
        "squeeze",
        "slice",
        "select",
        "alias",
        "detach",
        "as_strided",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "narrow",
        "unflatten",
        "flatten",
        "view_as",
        "movedim",
        "diagonal",
        "lift_fresh",
        "lift_fresh_copy",
        "_assert_tensor_metadata",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "numpy_T",
        "_reshape_alias",
        "real",
        "imag",
        "resolve_conj",
        "resolve_neg",
        "empty",
        "empty_like",
        "new_empty",
        "empty_strided",
        "set_grad_enabled",
        "view_as_complex",
        "view_as_real",
    ),
    "copy": (
        "clone",
        "contiguous",
        "_to_copy",
        "to",
        "copy",
        "cat",
        "stack",
        "repeat",
        "repeat_interleave",
        "constant_pad_nd",
        "pad",
        "roll",
        "flip",
        "type_as",
        "_unsafe_index",
        "masked_scatter",
        "index_put",
        "slice_scatter",
        "select_scatter",
        "scatter",
        "new_tensor",
        "tile",
    ),
    "norm": (
        "native_layer_norm",
        "layer_norm",
        "rms_norm",
        "_fused_rms_norm",
        "group_norm",
        "native_group_norm",
        "batch_norm",
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_no_training",
        "instance_norm",
    ),
    "elementwise": ("dropout", "native_dropout", "feature_dropout", "alpha_dropout", "bernoulli",
                    "floor_divide", "tril", "triu", "polar", "exponential", "uniform", "normal",
                    "rand_like", "randn_like", "randint_like",
                    # depthwise convolutions (the GEMM handler declines them): each output
                    # reads a few neighbours of one channel, a stencil at DRAM speed
                    "convolution", "_convolution", "conv1d", "conv2d", "conv3d",
                    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"),
    "softmax": ("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax"),
    "reduction": (
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "argmax",
        "argmin",
        "prod",
        "var",
        "std",
        "var_mean",
        "std_mean",
        "norm",
        "linalg_vector_norm",
        "cumsum",
        "cumprod",
        "logsumexp",
        "any",
        "all",
        "count_nonzero",
        "topk",
        "sort",
        "diff",
        "histc",
        "bincount",
        # pooling reads its input once and writes the pooled output
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "max_pool2d_with_indices",
        "max_pool3d_with_indices",
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool2d",
        "adaptive_max_pool3d",
    ),
    "embedding": ("embedding", "index", "index_select", "gather", "take_along_dim"),
}
_OP_CLASS: dict[str, str] = {name: cls for cls, names in _CLASSES.items() for name in names}
_NO_GRAD = {
    "detach",
    "argmax",
    "argmin",
    "_assert_tensor_metadata",
    "zeros_like",
    "ones_like",
    "full_like",
    "empty_like",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "sign",
}
_FACTORY = {
    "arange",
    "zeros",
    "ones",
    "full",
    "empty",
    "new_ones",
    "new_zeros",
    "new_full",
    "scalar_tensor",
    "rand",
    "randn",
    "randint",
    "zeros_like",
    "ones_like",
    "full_like",
    "tril_indices",
    "triu_indices",
    "linspace",
    "eye",
}


def _op_name(target: Any) -> str:
    """``aten.add_.Tensor`` -> ``add_``; Python callables by their name."""
    packet = getattr(target, "_overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(target, "__name__", None) or str(target)
    return str(name).split(".")[-1]


def _qualified(target: Any) -> str:
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        name = getattr(packet, "_qualified_op_name", "aten::" + _op_name(target))
        return str(name).replace("::", ".")
    return getattr(target, "__name__", str(target))


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


# --- the walk


def _module_of(node: Any, model_name: str) -> tuple[str, str]:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", model_name
    path, typ = list(stack.values())[-1]
    name = typ.__name__ if isinstance(typ, type) else str(typ).rsplit(".", 1)[-1]
    # a torch.compile'd submodule holds the real one as ``_orig_mod``: name it by its own path
    path = ".".join(p for p in str(path).split(".") if p != "_orig_mod")
    return path, name


def extract(
    captured: Any,
    dtype: str | torch.dtype | ComputeDtype,
    *,
    mode: str = "inference",
    native_dtype: torch.dtype | None = None,
) -> tuple[tuple[GemmSite, ...], tuple[OtherOp, ...]]:
    """GEMM and non-GEMM records of a captured graph, in execution order; annotates each node.

    ``dtype`` is the compute dtype every GEMM runs in. Floating activations of ``native_dtype``
    (the model's own dtype; None: every floating tensor) are costed at that dtype's storage
    size, 16-bit for fp8/int8 compute; other tensors keep their own size.

    A non-GEMM op moves each distinct input once plus its outputs (broadcast dims once);
    views and no-op conversions move nothing; a gather (embedding, index) moves its indices and
    the rows it reads and writes.

    SDPA becomes ``sdpa_qk`` (QKᵀ) and ``sdpa_pv`` (PV) with a ``softmax`` OtherOp between them.
    Its bytes follow a fused (flash) kernel: QKᵀ reads Q and K, PV reads V and writes O, and the
    scores never reach DRAM (only an explicit mask is read). Under ``is_causal`` both GEMMs are
    marked ``causal`` and their FLOPs count only the kept scores, 2·batch·d·kept with
    kept = ``causal_kept_entries(q_len, kv_len)`` (about half).

    ``mode="train"`` adds, in reverse order after the forward pass:

    - per GEMM, the gradient of A (``backward_dx``: dA = dC·Bᵀ) if A needs grad, and of B
      (``backward_dw``: dB = Aᵀ·dC, for a Linear weight dW = dYᵀ·X) if B needs grad, as PyTorch's
      autograd formulas compute them. Attention: dQ, dK, dP and dV, with the causal discount.
    - per non-view op whose output needs grad, an OtherOp with phase ``backward`` that moves
      2× the forward bytes. NB: a rule of thumb (read the saved input and the output grad,
      write the input grad).
    - per GEMM with a fused bias that needs grad (Linear, addmm, HF Conv1D), the bias gradient:
      a ``reduction`` OtherOp (``aten.sum``, phase ``backward``) that reads dC and writes the
      bias's gradient. Optimizer steps are not here (see ``predict.memory.optimizer_ops``).
    - per tensor that feeds k > 1 ops needing grad, k − 1 gradient sums (``aten.add``, node
      ``<name>.grad_sum``), each reading two gradients and writing one. This is where a residual
      stream pays for its branch; the ``add`` that joins the branch back passes dy through.
    """
    if mode not in ("inference", "train"):
        raise ValueError(f"mode must be 'inference' or 'train', got {mode!r}")
    cd = resolve_dtype(dtype)
    ctx = _Ctx(cd, native_dtype)
    graph = captured.graph_module.graph
    model_name = captured.model_name
    causal_modules: frozenset[str] = getattr(captured, "causal_modules", frozenset())
    train = mode == "train"
    requires: dict[Any, bool] = {}
    fwd_gemms: list[GemmSite] = []
    fwd_others: list[OtherOp] = []
    bwd: dict[Any, list[GemmSite | OtherOp]] = {}  # per node, in forward order

    def val(x: Any) -> Any:
        return x.meta.get("val") if hasattr(x, "meta") else x

    def rg(x: Any) -> bool:
        return bool(requires.get(x, False)) if hasattr(x, "meta") else False

    for node in graph.nodes:
        if node.op == "placeholder":
            requires[node] = bool(captured.requires_grad.get(node.name, False))
            bwd[node] = []
            continue
        if node.op != "call_function":
            continue
        out_val = node.meta.get("val")
        name = _op_name(node.target)
        inputs = node.all_input_nodes
        out_tensors = _tensors(out_val)
        requires[node] = (
            not node.meta.get(NO_GRAD)
            and name.rstrip("_") not in _NO_GRAD
            and any(t.dtype.is_floating_point for t in out_tensors)
            and any(requires.get(i, False) for i in inputs)
        )
        bwd[node] = []
        if name == "getitem" or not out_tensors:
            continue
        module, module_type = _module_of(node, model_name)
        records: list[GemmSite | OtherOp] = []
        back: list[GemmSite | OtherOp] = []
        handler = _GEMM_HANDLERS.get(name)
        env = _Env(val, rg, cd.in_bytes, module in causal_modules)
        fwds = handler(_bind(node), env) if handler is not None else []
        if fwds:
            for f in fwds:
                site = _site(f, ctx, module, module_type, node.name)
                records.append(site)
                fwd_gemms.append(site)
                if f.op == "sdpa_qk":
                    soft = _sdpa_softmax(node, f, ctx, module, module_type)
                    records.append(soft)
                    fwd_others.append(soft)
                    if train and requires[node]:
                        back[:0] = [_backward_other(soft)]
                if train and not node.meta.get(NO_GRAD):  # backward runs in reverse, in a node too
                    back[:0] = _backward_sites(f, site)
                    if f.bias_grad_elems:
                        back.append(_bias_grad(site, f.bias_grad_elems, out_tensors[0], ctx))
        else:
            other = _other(node, name, inputs, out_tensors, ctx, module, module_type)
            records.append(other)
            fwd_others.append(other)
            if train and requires[node] and other.op_class != "view":
                back.append(_backward_other(other))
        node.meta[META_KEY] = tuple(records) + tuple(back)
        bwd[node] = back

    if train:
        for node, back in bwd.items():
            sums = _gradient_sums(node, requires, ctx, model_name)
            if sums:  # autograd sums a tensor's gradients before the op that made it runs
                back[:0] = sums
                node.meta[META_KEY] = node.meta.get(META_KEY, ()) + tuple(sums)

    bwd_gemms: list[GemmSite] = []
    bwd_others: list[OtherOp] = []
    for back in reversed(bwd.values()):
        for r in back:
            (bwd_gemms if isinstance(r, GemmSite) else bwd_others).append(r)  # type: ignore[arg-type]
    return tuple(fwd_gemms + bwd_gemms), tuple(fwd_others + bwd_others)


def _gemm_bytes(batch: int, m: int, n: int, k: int, cd: ComputeDtype) -> int:
    return batch * (m * k + k * n) * cd.in_bytes + batch * m * n * cd.out_bytes


def _site(f: _Fwd, ctx: _Ctx, module: str, module_type: str, node: str) -> GemmSite:
    cd = ctx.cd
    dense = 2 * f.batch * f.m * f.n * f.k
    if f.kept is None:
        flops = dense
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


def _backward_sites(f: _Fwd, fwd: GemmSite) -> list[GemmSite]:
    """dA = dC·Bᵀ and dB = Aᵀ·dC (for a Linear weight, dW = dYᵀ·X), as autograd runs them."""
    cd_out = fwd.out_dtype
    cd = DTYPES[fwd.dtype]
    dc_align = alignment_bytes(fwd.n, cd.in_bytes)  # dC is a contiguous (m, n) gradient
    # fused attention's backward keeps dS (QKᵀ's dC) and dP (PV's dA) on chip, as the forward
    # keeps S and P: their alignment costs nothing
    if fwd.op == "sdpa_qk":
        dc_align = 16

    def c_align(phase: str, n: int) -> int:
        if fwd.op == "sdpa_pv" and phase == "backward_dx":  # dP
            return 16
        if fwd.op == "sdpa_qk" and phase == "backward_dw":  # dKᵀ, stored as dK's (kv, d) rows
            return alignment_bytes(fwd.k, cd.out_bytes)
        return alignment_bytes(n, cd.out_bytes)
    dense_fwd = 2 * fwd.batch * fwd.m * fwd.n * fwd.k
    out: list[GemmSite] = []

    def make(
        phase: str, b: int, m: int, n: int, k: int, a: tuple[bool, int], bb: tuple[bool, int]
    ) -> GemmSite:
        dense = 2 * b * m * n * k
        flops = dense * fwd.flops // dense_fwd if fwd.causal else dense
        dram = _gemm_bytes(b, m, n, k, cd)
        if f.tensor_elems is not None:  # dX reads dY and W, writes dX; dW reads X and dY
            x, w, y = f.tensor_elems
            read, written = (y + w, x) if phase == "backward_dx" else (x + y, w)
            dram = read * cd.in_bytes + written * cd.out_bytes
        return GemmSite(
            module=fwd.module,
            module_type=fwd.module_type,
            op=fwd.op,
            node=fwd.node,
            phase=phase,
            batch=b,
            m=m,
            n=n,
            k=k,
            dtype=fwd.dtype,
            out_dtype=cd_out,
            a_transposed=a[0],
            b_transposed=bb[0],
            a_align_bytes=a[1],
            b_align_bytes=bb[1],
            c_align_bytes=c_align(phase, n),
            bias=False,
            flops=flops,
            dram_bytes=dram,
            causal=fwd.causal,
            taps=fwd.taps,
        )

    if f.grad_a:  # dA (m, k) = dC (m, n) · Bᵀ (n, k)
        out.append(
            make(
                "backward_dx",
                fwd.batch,
                fwd.m,
                fwd.k,
                fwd.n,
                (False, dc_align),
                (not fwd.b_transposed, fwd.b_align_bytes),
            )
        )
    if f.grad_b:
        if f.weight_b:  # dW (n, k) = dYᵀ (n, m) · X (m, k)
            out.append(
                make(
                    "backward_dw",
                    fwd.batch,
                    fwd.n,
                    fwd.k,
                    fwd.m,
                    (True, dc_align),
                    (fwd.a_transposed, fwd.a_align_bytes),
                )
            )
        else:  # dB (k, n) = Aᵀ (k, m) · dC (m, n)
            out.append(
                make(
                    "backward_dw",
                    fwd.batch,
                    fwd.k,
                    fwd.n,
                    fwd.m,
                    (not fwd.a_transposed, fwd.a_align_bytes),
                    (False, dc_align),
                )
            )
    return out


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
        dram_bytes=(_unique_numel(out) + elems) * elem,
    )


def _sdpa_softmax(node: Any, f: _Fwd, ctx: _Ctx, module: str, module_type: str) -> OtherOp:
    b = _bind(node)
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
    op_class = _OP_CLASS.get(base, "elementwise" if _elementwise(node, base) else "other")
    if (
        op_class == "copy"
        and base in ("contiguous", "to", "_to_copy", "clone", "type_as")
        and in_vals
    ):
        src, dst = in_vals[0], outs[0]
        same = src.dtype == dst.dtype and src.device == dst.device
        if same and base != "clone" and (base != "contiguous" or src.is_contiguous()):
            op_class = "view"  # a no-op conversion returns its input
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
    )


def _elementwise(node: Any, base: str) -> bool:
    if base in _FACTORY:
        return True
    tags = getattr(node.target, "tags", ())
    return torch.Tag.pointwise in tags
