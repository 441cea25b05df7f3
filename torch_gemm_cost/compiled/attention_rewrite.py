"""Inductor's attention rewrite: hand-written attention that ``torch.compile`` runs as one SDPA call.

Before it schedules anything, inductor replaces some spellings of eager attention with
``scaled_dot_product_attention`` (``torch/_inductor/fx_passes/fuse_attention.py``, the
``_sfdp_pattern_*`` search functions and their replacements), so a compiled model that writes
``softmax(q @ kᵀ / √d) @ v`` by hand runs a fused attention kernel: no score matrix in DRAM, no
separate scale, mask and softmax kernels. ``rewrite_attention`` applies the same replacement to a
captured graph, so ``extract`` and ``fusion`` see the SDPA call inductor would run.

The chains replaced, from ``_softmax(x, -1)`` back to the QKᵀ product and on to the PV product
(the pattern numbers are inductor's):

====================  =====================  ==========================================
scale of the scores   mask                   patterns
====================  =====================  ==========================================
none                  none                   13 (``bmm``), 23, 27 (4-D ``matmul``)
``div`` by a number   none                   1, 3, 11, 12
``mul`` by a number   none                   2, 4, 28
``div`` by a number   ``+ mask``             5, 6, 14, 16
none                  ``+ mask``             21, 22, 25, 26
``div``               ``where(causal, ·)``   18; with ``+ mask`` after it, 19
====================  =====================  ==========================================

QKᵀ is ``matmul(q, k.transpose(-2, -1))`` on 4-D tensors (``k.permute(0, 1, 3, 2)`` too), or
``bmm(q, k.transpose(1, 2))`` on 3-D ones without scale or mask; PV is ``matmul``/``bmm`` of
the probabilities (after an optional dtype cast, and dropout where it is a no-op) with v. Every
intermediate must have no other reader, as a pattern match requires. Adding a tensor of zeros
the graph makes itself is no mask: inductor's ``remove_no_ops`` drops it before matching (T5's
cross-attention position bias). The SDPA call reads the mask as its ``attn_mask`` (with both a
``where`` and an added mask, inductor combines them into one of the added mask's kind; its
bytes are priced as the added mask's). Inductor's own checks
(``_sfdp_params_check``): q, k and v of one dtype; an added mask of q's dtype, bool or float32,
not 0-d; and on CUDA an fp32 model only when fp32 matmuls may use TF32
(``torch.backends.cuda.matmul.fp32_precision == "tf32"``; "fused kernels use tf32"), which is
not PyTorch's default.

Inference only: for a training step inductor matches the joint forward-backward graph against
patterns traced with their backward, which rewrites some attentions (with dropout, as
transformers' older BERT spelled it) and not others (a multiply by the scale, no dropout); the
estimate's compiled training step keeps its attention as written. Not rewritten here either,
although inductor has patterns for them: a mask built by ``masked_fill`` (15, 17, 20), a query
scaled before the product (9, 10, 20, 29, 30), and 3-D ``bmm`` attention with views and a mask
(24). ``mul`` by a scale followed by a mask matches no pattern (today's transformers spell
eager attention that way), and neither does a mask added before the scale. The SDPA nodes that
replace an attention are named ``REWRITTEN``_i, so a report can say which calls they are.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch

__all__ = ["REWRITTEN", "AttentionRewrite", "find_attention", "rewrite_attention"]

REWRITTEN = "inductor_sdpa"  # name prefix of the SDPA nodes that replace hand-written attention

aten = torch.ops.aten
_SOFTMAX = (aten._softmax.default, aten.softmax.int)
_MATMUL = (aten.matmul.default,)
_BMM = (aten.bmm.default,)
_DIV = (aten.div.Tensor, aten.div.Scalar)
_MUL = (aten.mul.Tensor, aten.mul.Scalar)
_ADD = (aten.add.Tensor,)
_WHERE = (aten.where.self,)
_CASTS = (aten._to_copy.default, aten.to.dtype, aten.type_as.default)
_DROPOUT = (aten.dropout.default,)
_TRANSPOSE = (aten.transpose.int,)
_PERMUTE = (aten.permute.default,)
_FULL = (aten.full.default,)
# ops that hand a 0-d fill on unchanged (a detached, aliased or moved copy)
_PASS_VALUE = (aten.detach.default, aten.alias.default, aten._to_copy.default, aten.to.device,
               aten.to.dtype_layout)
# readers that take nothing from a tensor's values: they never keep an intermediate alive
_META_READERS = (torch.ops.prim.device.default, aten.detach.default)


@dataclass(frozen=True)
class AttentionRewrite:
    """One hand-written attention found in a graph: the nodes it spans (QKᵀ first, PV last, in
    graph order) and the SDPA call that replaces them."""

    nodes: tuple[Any, ...]
    query: Any  # graph nodes of the call's arguments
    key: Any
    value: Any
    attn_mask: Any  # None without a mask
    scale: float | None  # None: SDPA's default 1/√d

    @property
    def output(self) -> Any:
        return self.nodes[-1]


def _val(x: Any) -> Any:
    return x.meta.get("val") if isinstance(x, torch.fx.Node) else None


def _readers(n: Any) -> list[Any]:
    return [u for u in n.users if u.target not in _META_READERS]


def _only_reader(n: Any) -> Any:
    readers = _readers(n)
    return readers[0] if len(readers) == 1 else None


def _is(x: Any, targets: tuple[Any, ...]) -> bool:
    """Whether ``x`` is a graph node calling one of ``targets``."""
    return isinstance(x, torch.fx.Node) and x.target in targets


def _number(x: Any) -> float | None:
    """A Python number, or the fill of a 0-d ``full`` node; None otherwise."""
    if isinstance(x, bool):
        return None
    if isinstance(x, numbers.Real):
        return float(x)
    while _is(x, _PASS_VALUE):
        x = x.args[0]
    if _is(x, _FULL) and list(x.args[0]) == []:
        fill = x.args[1]
        return float(fill) if isinstance(fill, numbers.Real) else None
    return None


def _zeros(x: Any) -> bool:
    """Whether ``x`` is a tensor of zeros the graph makes itself (``zeros``, or a ``full`` of
    0), as inductor's ``remove_no_ops`` finds them."""
    while _is(x, _PASS_VALUE):
        x = x.args[0]
    if _is(x, (aten.zeros.default,)):
        return True
    return _is(x, _FULL) and _number(x.args[1]) == 0.0


def _untransposed(kt: Any, ndim: int) -> Any:
    """k where ``kt`` is k with its last two dims swapped by a view; None otherwise."""
    if _is(kt, _TRANSPOSE):
        dims = sorted(d % ndim for d in kt.args[1:3])
        return kt.args[0] if dims == [ndim - 2, ndim - 1] else None
    if _is(kt, _PERMUTE) and ndim == 4 and [d % 4 for d in kt.args[1]] == [0, 1, 3, 2]:
        return kt.args[0]
    return None


def _match(soft: Any) -> AttentionRewrite | None:
    """The attention around softmax node ``soft``, if it is one inductor rewrites."""
    x = soft.args[0]
    out = _val(soft)
    if out is None or soft.args[1] % out.dim() != out.dim() - 1:
        return None
    if soft.target == aten._softmax.default and soft.args[2]:
        return None  # half-to-float softmax: not a spelling the patterns trace to
    chain = [soft]
    mask = where_mask = None
    scale: float | None = None
    scaled = False
    if _is(x, _ADD) and len(x.args) == 2:
        # adding a zeros tensor is no mask: inductor's remove_no_ops drops it first
        mask = None if _zeros(x.args[1]) else x.args[1]
        chain.append(x)
        x = x.args[0]
    if _is(x, _WHERE):
        where_mask = x.args[0]
        if _number(x.args[2]) is None:
            return None
        chain.append(x)
        x = x.args[1]
    if _is(x, _DIV + _MUL):
        c = _number(x.args[1])
        if c is None or c == 0.0:
            return None
        divides = x.target in _DIV
        if not divides and (mask is not None or where_mask is not None):
            return None  # mul by a scale, then a mask: no pattern
        scale, scaled = (1.0 / c if divides else c), True
        chain.append(x)
        x = x.args[0]
    if where_mask is not None and not scaled:
        return None  # patterns 18/19 divide before the where
    if not _is(x, _MATMUL + _BMM) or len(x.args) != 2:
        return None
    qk = x
    scores = _val(qk)
    if scores is None:
        return None
    ndim = scores.dim()
    if qk.target in _BMM and (ndim != 3 or scaled or mask is not None):
        return None
    if qk.target in _MATMUL and ndim != 4:
        return None
    q, key = qk.args[0], _untransposed(qk.args[1], ndim)
    if key is None:
        return None
    chain.append(qk)
    chain.reverse()  # QKᵀ first
    for a, b in itertools.pairwise(chain):
        if _only_reader(a) is not b:
            return None
    # softmax → [cast] → [dropout that does nothing] → PV
    tail = []
    y = _only_reader(soft)
    while y is not None and (y.target in _CASTS
                             or (y.target in _DROPOUT and (y.args[1] == 0 or not y.args[2]))):
        tail.append(y)
        y = _only_reader(y)
    if y is None or y.target != qk.target or len(y.args) != 2:
        return None
    last = tail[-1] if tail else soft
    if y.args[0] is not last:
        return None
    value = y.args[1]
    nodes = [*chain, *tail, y]
    if not _checks_pass(q, key, value, mask):
        return None
    attn_mask = where_mask if mask is None else mask
    return AttentionRewrite(tuple(nodes), q, key, value, attn_mask, scale)


def _checks_pass(q: Any, k: Any, v: Any, mask: Any) -> bool:
    """Inductor's ``_sfdp_params_check``: one dtype for q, k and v; an added mask a tensor of
    q's dtype, bool or float32, with at least one dim."""
    vals = [_val(t) for t in (q, k, v)]
    if any(not isinstance(t, torch.Tensor) for t in vals):
        return False
    if not vals[0].dtype == vals[1].dtype == vals[2].dtype:
        return False
    if mask is None:
        return True
    m = _val(mask)
    return (isinstance(m, torch.Tensor) and m.dim() > 0
            and m.dtype in (vals[0].dtype, torch.bool, torch.float32))


def find_attention(graph: torch.fx.Graph) -> list[AttentionRewrite]:
    """Every hand-written attention of ``graph`` that inductor replaces with SDPA."""
    found = []
    for n in graph.nodes:
        if n.op == "call_function" and n.target in _SOFTMAX:
            m = _match(n)
            if m is not None:
                found.append(m)
    return found


def _erase(graph: torch.fx.Graph, nodes: Iterable[Any]) -> None:
    for n in reversed(list(nodes)):
        for u in list(n.users):
            if u.target in _META_READERS and not u.users:
                graph.erase_node(u)
        if not n.users:
            graph.erase_node(n)


def rewrite_attention(captured: Any, compute_dtype: str) -> tuple[Any, int]:
    """``captured`` with its hand-written attention replaced by SDPA calls as inductor replaces
    them for a GPU, and how many it replaced; the captured graph itself is left as it was (the
    rewrite works on a copy).

    ``compute_dtype`` is the estimate's (a ``dtypes`` name). Under ``"float32"`` (IEEE fp32
    matmuls, PyTorch's default) nothing is rewritten: inductor rewrites fp32 attention on CUDA
    only when fp32 matmuls may use TF32, which is the ``"tf32"`` compute dtype.
    """
    if compute_dtype == "float32":
        return captured, 0
    graph = torch.fx.Graph()
    out = graph.graph_copy(captured.graph_module.graph, {})
    graph.output(out)
    found = find_attention(graph)
    if not found:
        return captured, 0
    for i, m in enumerate(found):
        pv = m.output
        with graph.inserting_after(pv):
            sdpa = graph.create_node(
                "call_function", aten.scaled_dot_product_attention.default,
                (m.query, m.key, m.value),
                {"attn_mask": m.attn_mask, "dropout_p": 0.0, "is_causal": False,
                 "scale": m.scale}, name=f"{REWRITTEN}_{i}")
        sdpa.meta = {k: v for k, v in pv.meta.items() if k in ("val", "nn_module_stack")}
        pv.replace_all_uses_with(sdpa)
        key_view = m.nodes[0].args[1]
        _erase(graph, m.nodes)
        if isinstance(key_view, torch.fx.Node) and not _readers(key_view):
            _erase(graph, [key_view])
    gm = torch.fx.GraphModule(captured.graph_module, graph)
    return replace(captured, graph_module=gm), len(found)
