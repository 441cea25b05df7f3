"""Kernel fusion as ``torch.compile`` (inductor, default mode) does it: which non-GEMM ops of a
captured graph run together in one kernel, and what each kernel moves through DRAM.

The rules are inductor's own (torch 2.13, ``torch/_inductor``), applied to the captured ATen
graph; the decisions they encode are the scheduler's, not the code generator's:

1. **What becomes a buffer** (lowering, ``ir.py``). A pointwise op is an unrealised
   ``Pointwise`` that every consumer inlines (recomputes) unless it is realised: when an extern
   kernel or the graph's output reads it (``ExternKernel.realize_input``), or when it has several
   users and its expression reads more than ``config.realize_reads_threshold`` (4) buffers or
   holds more than ``_realize_opcount_threshold_default`` (30) ops
   (``StorageBox.mark_reuse`` / ``should_realize_on_reuse``). Reductions always are.
2. **Externs never fuse** (``Scheduler.can_fuse``: "node1 is extern but not a triton kernel",
   "node2 is extern or nop"). GEMMs (``mm``, ``addmm``, ``bmm``), convolutions and SDPA stay
   the library calls inductor makes in default mode (no ``max_autotune`` templates, so no
   epilogue fusion into a GEMM), as do fallback kernels (sort, topk, scatters, ops of class
   ``other``). An operand an extern GEMM cannot read in place (batch dims that do not flatten
   to one stride) is first copied by a pointwise kernel of its own, as ``matmul``'s reshape
   is. A convolution's NHWC-to-NCHW output transform (``records.copies.nchw_output_elems``)
   is dropped: inductor runs convolutions channels-last (``config.layout_optimization``).
   NB: inductor's ``decide_layout_opt`` can decline it (few or tiny convolutions); not
   followed.
3. **Candidates and order** (``Scheduler.get_possible_fusions``, ``fuse_nodes_once``, up to 10
   rounds in ``fuse_nodes``): pairs of buffer nodes that use a common buffer, best first by
   ``InductorChoices.score_fusion``: same kind (both reductions or neither), then bytes shared
   (``score_fusion_memory``), then proximity in the graph.
4. **Legality.** ``InductorChoices.can_fuse``: no shared data, no fusion; at most
   ``config.max_fusion_size`` (64) nodes. Vertical (``Scheduler.can_fuse_vertical``): the
   consumer may not depend on the producer through a node outside the pair ("intermediate
   nodes between node1 & node2"); ``will_fusion_create_cycle`` likewise. Horizontal
   (``InductorChoices.can_fuse_horizontal``): at least ``score_fusion_memory_threshold`` bytes
   shared and no more than 64 nodes apart (``are_long_distant_nodes``). Shapes
   (``SIMDScheduling.can_fuse`` in ``codegen/simd.py``), with a group = (numel, rnumel):
   two pointwise nodes fuse when their numels match; two reductions when numel and rnumel both
   match; a pointwise node and a reduction when the pointwise numel is the reduction's
   numel × rnumel (a prologue, or a norm's elementwise tail) or its numel (an epilogue).
   A norm or softmax is one reduction node of group (rows, row length) with its elementwise
   work fused in, as inductor's decompositions of them are.

Bytes of a kernel: every buffer it reads from outside (once, at the size of the view it
reads), plus every buffer it writes that a node outside it, or the graph's output, reads. One
launch per kernel. Ops nothing reads (a layer norm's mean and rstd in inference) are removed.

Where the CPU backend decides otherwise (``codegen/cpp.py``; the test that counts the kernels
``torch.compile`` generates on the CPU runs on it): ``CppScheduling.can_fuse_vertical`` takes
no reduction as a producer, but fuses a reduction with its elementwise consumers through
``OuterLoopFusedSchedulerNode`` when both loop over the same outer dims, which gives the same
kernels for norms and softmax; a reused result holding ``exp``, ``log``, ``sigmoid`` or
``tanh`` is realised on the CPU alone (``should_realize_on_reuse``), and the CPU's
``realize_cpu_opcount_threshold`` is 50; ``unfuse_bias_add_to_pointwise``
(``fx_passes/post_grad.py``) runs on GPUs alone, turning an ``addmm`` whose users are all
pointwise into ``mm`` plus a bias add that fuses into them: one kernel count either way, the
bias read moving from the GEMM into its consumer's kernel.

Inductor's attention rewrite (``fx_passes/fuse_attention.py``) runs before this stage, on the
captured graph (``attention_rewrite``). NB: not modelled are inductor's other pattern
rewrites, split reductions (``Reduction.num_splits``: a reduction to a few outputs runs as two
kernels), mix-order and nested reductions, ``can_fusion_increase_peak_memory``, and loop
reordering. A training step's backward kernels follow AOTAutograd's min-cut
partition, which recomputes a fused chain's elementwise intermediates rather than saving them:
one backward kernel per forward kernel (``_backward_kernels``), not checked against a compiled
backward.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..hardware.dtypes import resolve_dtype
from ..records.copies import NCHW_LAYOUT, OPERAND_COPY, operand_copies
from ..records.extract import META_KEY
from ..records.handlers import op_name
from ..records.nodes import _tensors
from ..records.sizing import _Ctx
from ..records.types import FusedKernel, GemmSite, OtherOp
from ..suggest import check_choice

__all__ = [
    "MAX_FUSION_SIZE",
    "REALIZE_OPCOUNT_THRESHOLD",
    "REALIZE_READS_THRESHOLD",
    "fuse_kernels",
]

# inductor's config (torch/_inductor/config.py), default mode
REALIZE_READS_THRESHOLD = 4  # realize_reads_threshold
REALIZE_OPCOUNT_THRESHOLD = 30  # _realize_opcount_threshold_default (GPU)
MAX_FUSION_SIZE = 64  # max_fusion_size
SCORE_FUSION_MEMORY_THRESHOLD = 10  # score_fusion_memory_threshold
LONG_DISTANCE = 64  # are_long_distant_nodes
FUSION_ROUNDS = 10  # fuse_nodes

REMOVED = "(removed: result unused)"

# ops inductor runs as extern or fallback kernels, which fuse with nothing
_EXTERN_OPS = frozenset({
    "sort", "argsort", "topk", "nonzero", "unique", "_unique2", "bincount", "histc",
    "index_put", "index_add", "scatter", "scatter_add", "scatter_reduce", "masked_scatter",
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "embedding_dense_backward",
})
# ops whose node is one reduction of group (rows, row length) with its elementwise work fused in
_ROW_OPS = frozenset({
    "native_layer_norm", "layer_norm", "rms_norm", "_fused_rms_norm", "softmax", "_softmax",
    "log_softmax", "_log_softmax", "_safe_softmax", "cumsum", "cumprod", "logcumsumexp",
})
# reductions whose output keeps its input's size: inductor lowers pooling as a windowed load
_POINTWISE_REDUCTIONS = frozenset({
    "max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices",
    "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "adaptive_max_pool3d",
})
# gathers, and which input (in ``all_input_nodes`` order) is the table they gather rows of
_GATHERS: dict[str, int] = {"embedding": 0, "index": 0, "index_select": 0, "gather": 0,
                            "take_along_dim": 0, "_unsafe_index": 0}
# kernel class, by priority, from the classes of its ops
_CLASS_PRIORITY = ("norm", "softmax", "reduction", "embedding", "copy", "elementwise")


@dataclass(eq=False)
class _Buf:
    """A node of the buffer graph: a realised op (kernel member), an extern, or a placeholder."""

    key: Any  # the FX node (or an operand copy's (gemm node, argument) pair)
    kind: str  # "pointwise", "reduction", "extern", "input"
    numel: int = 0
    rnumel: int = 1
    order: int = 0
    out_bytes: int = 0
    ops: list[int] = field(default_factory=list)  # OtherOp positions this node computes
    names: list[str] = field(default_factory=list)  # ATen names, for the kernel's name
    classes: list[str] = field(default_factory=list)
    reads: dict[Any, int] = field(default_factory=dict)  # read key -> bytes
    read_bufs: set[Any] = field(default_factory=set)  # producing buffer nodes (or inputs)
    users: set[Any] = field(default_factory=set)  # consumer buffer nodes
    output: bool = False  # read by the graph's output
    group: int = -1  # fused group id


def fuse_kernels(
    captured: Any,
    others: Sequence[OtherOp],
    dtype: Any,
    *,
    mode: str = "inference",
    native_dtype: torch.dtype | None = None,
) -> tuple[tuple[OtherOp, ...], tuple[FusedKernel, ...]]:
    """The run's non-GEMM ops as inductor compiles them: ``others`` (from ``extract`` on the
    same ``captured`` graph, whose nodes it annotated) with the pointwise copies inductor adds
    for extern operands inserted in execution order, and the kernels that run them.

    Every op of the returned records is in exactly one kernel, except views (free), the ops of
    extern nodes (GEMM nodes' own records, fallback kernels) and the optimizer's, which keep
    their own pricing. Ops whose result nothing reads are in one kernel named ``REMOVED``
    with no launch and no bytes.
    """
    check_choice("mode", mode, ("inference", "train"))
    ctx = _Ctx(resolve_dtype(dtype), native_dtype)
    graph = _BufferGraph(captured.graph_module.graph, others, ctx)
    groups = graph.fuse()
    ops = graph.ops
    kernels: list[FusedKernel] = []
    assigned: set[int] = set()
    for members in groups:  # an op inlined into several kernels is listed with the first
        k = graph.kernel(len(kernels), members, assigned)
        if k is not None:
            kernels.append(k)
            assigned.update(k.ops)
    if graph.removed:
        kernels.append(FusedKernel(REMOVED, "forward", "elementwise",
                                   tuple(sorted(graph.removed)), 0, "", launches=0))
    if mode == "train":
        kernels += _backward_kernels(kernels, ops)
    return tuple(ops), tuple(kernels)


class _BufferGraph:
    """The captured graph as inductor's scheduler sees it: realised buffer nodes, externs and
    inputs, with views and inlined pointwise ops folded into their readers."""

    def __init__(self, graph: Any, others: Sequence[OtherOp], ctx: _Ctx) -> None:
        self.ctx = ctx
        self.ops: list[OtherOp] = []  # forward ops in execution order (copies in), then the rest
        self.bufs: dict[Any, _Buf] = {}
        self.removed: set[int] = set()
        self._kind: dict[Any, str] = {}
        self._node_ops: dict[Any, list[int]] = {}
        self._order: dict[Any, int] = {}
        self._copies: dict[Any, list[Any]] = {}  # extern node -> the arguments it reads copied
        self._inlined: dict[Any, tuple[dict[Any, int], set[Any], list[int], list[str],
                                       list[str], int]] = {}
        fwd_ids: set[int] = set()
        nodes = list(graph.nodes)
        for n in nodes:
            recs = n.meta.get(META_KEY, ())
            fwd = [r for r in recs if isinstance(r, OtherOp) and r.phase == "forward"]
            fwd_ids.update(id(r) for r in fwd)
            if n.op == "placeholder":
                self._kind[n] = "input"
                continue
            if n.op != "call_function":
                continue
            self._kind[n] = kind = self._classify(n, recs, fwd)
            copies = {r.node: r for r in fwd if r.op_class == "copy"
                      and r.node.startswith(f"{n.name}.{OPERAND_COPY}.")}
            if kind == "extern" and copies:
                fwd = [r for r in fwd if r.node not in copies]
                for arg, _ in self._operand_copies(n):
                    self._add_copy(n, arg, copies.pop(f"{n.name}.{OPERAND_COPY}.{arg.name}"))
                for rec in copies.values():  # a constant operand: inductor folds its copy
                    self.removed.add(len(self.ops))
                    self.ops.append(rec)
            if kind == "extern":  # inductor runs convolutions channels-last: no NCHW transform
                for rec in [r for r in fwd if r.node == f"{n.name}.{NCHW_LAYOUT}"]:
                    fwd.remove(rec)
                    self.removed.add(len(self.ops))
                    self.ops.append(rec)
            self._node_ops[n] = list(range(len(self.ops), len(self.ops) + len(fwd)))
            self.ops.extend(fwd)
            self._order[n] = len(self._order)
        self.ops.extend(o for o in others if id(o) not in fwd_ids)
        self._build(nodes)

    def _add_copy(self, n: Any, arg: Any, rec: OtherOp) -> None:
        """The pointwise kernel that copies extern ``n``'s operand ``arg`` to a layout its
        library call reads: ``rec``, the copy ``extract`` recorded (``operand_copies``)."""
        self.ops.append(rec)
        val = arg.meta["val"]
        key = (n, arg)
        self._kind[key] = "pointwise"
        self._copies.setdefault(n, []).append(arg)
        self._order[key] = len(self._order)
        self.bufs[key] = _Buf(key, "pointwise", numel=max(val.numel(), 1),
                              order=self._order[key], out_bytes=self.ctx.tensor_bytes(val),
                              ops=[len(self.ops) - 1], names=["clone"], classes=["copy"])

    # ---------------------------------------------------------------- classification
    def _classify(self, n: Any, recs: Sequence[Any], fwd: Sequence[OtherOp]) -> str:
        name = op_name(n.target).rstrip("_") if n.target is not operator.getitem else "getitem"
        if any(isinstance(r, GemmSite) for r in recs) or name in _EXTERN_OPS:
            return "extern"
        if not fwd:
            return "view"
        op = fwd[0]
        if op.op_class == "view":
            return "view"
        if op.op_class in ("other", "attention"):
            return "extern"
        if name in _ROW_OPS or (op.op_class == "reduction" and name not in _POINTWISE_REDUCTIONS):
            return "reduction"
        if op.op_class == "norm" and not _eval_batch_norm(n, name):
            return "reduction"
        return "pointwise"

    def _operand_copies(self, n: Any) -> list[tuple[Any, torch.Tensor]]:
        """The copies ``extract`` found for extern GEMM ``n`` (``operand_copies``) whose operand
        is a buffer: a constant's layout is fixed when inductor compiles it."""
        return [(arg, val) for arg, val in operand_copies(n) if self._source(arg) is not None]

    # ---------------------------------------------------------------- the buffer graph
    def _source(self, x: Any) -> Any:
        """The node whose buffer ``x`` reads, through views and getitems; None for constants."""
        seen = 0
        while x is not None and seen < 10_000:
            seen += 1
            kind = self._kind.get(x)
            if kind in ("input", "pointwise", "reduction", "extern"):
                return x
            if kind == "view" or x.target is operator.getitem:
                inputs = [i for i in x.all_input_nodes if isinstance(i.meta.get("val"),
                                                                     (torch.Tensor, list, tuple))]
                x = inputs[0] if inputs else None
                continue
            return None
        return None

    def _build(self, nodes: Sequence[Any]) -> None:
        """Buffer nodes for every realised op; inlined pointwise ops folded into readers."""
        consumers: dict[Any, set[Any]] = {}  # source node -> consuming compute nodes
        output_sources: set[Any] = set()
        for n in nodes:
            if n.op == "output":
                output_sources |= {s for a in n.all_input_nodes
                                   if (s := self._source(a)) is not None}
            elif self._kind.get(n) in ("pointwise", "reduction", "extern"):
                copied = self._copies.get(n, [])
                for a in n.all_input_nodes:
                    src = self._source(a)
                    if src is None:
                        continue
                    reader = (n, a) if a in copied else n
                    consumers.setdefault(src, set()).add(reader)
        realized: set[Any] = set()
        for n in nodes:
            kind = self._kind.get(n)
            if kind in ("reduction", "extern"):
                realized.add(n)
            elif kind == "pointwise":
                users = consumers.get(n, set())
                if n in output_sources or any(
                        isinstance(u, tuple) or self._kind.get(u) == "extern" for u in users):
                    realized.add(n)
                elif len(users) > 1:
                    reads, _, _, _, _, count = self._expression(n, realized)
                    if len(reads) > REALIZE_READS_THRESHOLD or count > REALIZE_OPCOUNT_THRESHOLD:
                        realized.add(n)
        for n in nodes:
            kind = self._kind.get(n, "")
            if kind == "input":
                self.bufs[n] = _Buf(n, "input")
            elif n in realized:
                buf = _Buf(n, kind, order=self._order[n], out_bytes=self._used_output_bytes(n),
                           output=n in output_sources)
                if kind == "extern":
                    copied = self._copies.get(n, [])
                    for a in n.all_input_nodes:
                        src = self._source(a)
                        if src is not None:
                            buf.read_bufs.add((n, a) if a in copied else src)
                else:
                    reads, bufs, ops, names, classes, _ = self._expression(n, realized, top=True)
                    buf.reads, buf.read_bufs = dict(reads), set(bufs)
                    buf.ops, buf.names, buf.classes = ops, names, classes
                    buf.numel, buf.rnumel = self._group_of(n, kind)
                self.bufs[n] = buf
        for key, buf in self.bufs.items():  # operand copies read the operand's buffer
            if isinstance(key, tuple):
                src = self._source(key[1])
                if src is not None:
                    buf.reads[(src, key[1])] = self.ctx.tensor_bytes(key[1].meta["val"])
                    buf.read_bufs.add(src)
        for buf in self.bufs.values():
            for src in buf.read_bufs:
                if src in self.bufs:
                    self.bufs[src].users.add(buf.key)
        # ops of unrealised nodes that no realised node inlined: dead code
        inlined = {i for b in self.bufs.values() for i in b.ops}
        for n in nodes:
            if self._kind.get(n) in ("pointwise", "reduction") and n not in realized:
                self.removed.update(i for i in self._node_ops.get(n, []) if i not in inlined)
        for buf in self.bufs.values():  # realised, but nothing reads it
            if buf.kind in ("pointwise", "reduction") and not buf.users and not buf.output:
                self.removed.update(buf.ops)
                buf.kind = "dead"

    def _used_output_bytes(self, n: Any) -> int:
        """Bytes of the node's outputs something reads: of a multi-output op (a norm's output,
        mean and rstd), those a ``getitem`` hands on to a user."""
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            return self.ctx.tensor_bytes(val)
        outs = list(val) if isinstance(val, (list, tuple)) else []
        used = {u.args[1] for u in n.users
                if u.target is operator.getitem and len(u.args) > 1 and u.users}
        return sum(self.ctx.tensor_bytes(t) for i, t in enumerate(outs)
                   if i in used and isinstance(t, torch.Tensor))

    def _expression(self, n: Any, realized: set[Any] | None, top: bool = False
                    ) -> tuple[dict[Any, int], set[Any], list[int], list[str], list[str], int]:
        """What computing ``n`` reads once its unrealised pointwise inputs are inlined: (read
        key -> bytes, source buffers, op positions, ATen names, op classes, op count)."""
        if not top and n in self._inlined:
            return self._inlined[n]
        realized = realized if realized is not None else set()
        reads: dict[Any, int] = {}
        bufs: set[Any] = set()
        ops = list(self._node_ops.get(n, []))
        names = [op_name(n.target).rstrip("_")]
        classes = [self.ops[i].op_class for i in ops]
        count = 1
        gather = names[0] in _GATHERS
        out_bytes = sum(self.ctx.tensor_bytes(t) for t in _tensors(n.meta.get("val")))
        for j, a in enumerate(n.all_input_nodes):
            src = self._source(a)
            if src is None:
                continue
            if self._kind.get(src) == "pointwise" and src not in realized:
                r, b, o, nm, cl, c = self._expression(src, realized)
                reads.update(r)
                bufs |= b
                ops += [i for i in o if i not in ops]
                names += nm
                classes += cl
                count += c
            else:
                size = sum(self.ctx.tensor_bytes(t) for t in _tensors(a.meta.get("val")))
                if gather and j == _GATHERS[names[0]]:  # a gather reads the rows it gathers
                    size = min(size, out_bytes)
                reads[(src, a)] = size
                bufs.add(src)
        out = (reads, bufs, ops, names, classes, count)
        if not top:
            self._inlined[n] = out
        return out

    def _group_of(self, n: Any, kind: str) -> tuple[int, int]:
        """(numel, rnumel) of a buffer node, as ``SIMDScheduling.group_fn`` sizes its loops."""
        outs = _tensors(n.meta.get("val"))
        numel = outs[0].numel() if outs else 1
        if kind == "pointwise":
            return max(numel, 1), 1
        name = op_name(n.target).rstrip("_")
        ins = [a.meta.get("val") for a in n.all_input_nodes]
        x = ins[0] if ins and isinstance(ins[0], torch.Tensor) else outs[0]
        total = max(x.numel(), 1)
        if name in ("native_layer_norm", "layer_norm", "rms_norm", "_fused_rms_norm"):
            shape = n.args[1] if len(n.args) > 1 else [x.shape[-1]]
            row = 1
            for s in (shape if isinstance(shape, (list, tuple)) else [shape]):
                row *= int(s)
            return max(total // max(row, 1), 1), max(row, 1)
        if name in _ROW_OPS:
            dim = n.args[1] if len(n.args) > 1 and isinstance(n.args[1], int) else -1
            row = int(x.shape[dim]) if x.dim() else 1
            return max(total // max(row, 1), 1), max(row, 1)
        out_numel = max(numel, 1)
        return out_numel, max(total // out_numel, 1)

    # ---------------------------------------------------------------- fusion
    def fuse(self) -> list[list[_Buf]]:
        """Greedy rounds of ``fuse_nodes_once``; the fused groups, in graph order."""
        nodes = [b for b in self.bufs.values() if b.kind in ("pointwise", "reduction")]
        nodes.sort(key=lambda b: b.order)
        for i, b in enumerate(nodes):
            b.group = i
        groups: dict[int, list[_Buf]] = {i: [b] for i, b in enumerate(nodes)}
        for _ in range(FUSION_ROUNDS):
            changed = False
            for a, b in self._candidates(nodes, groups):
                ga, gb = a.group, b.group
                if ga == gb or not self._can_fuse(groups[ga], groups[gb], groups):
                    continue
                keep, drop = (ga, gb) if ga < gb else (gb, ga)
                for m in groups[drop]:
                    m.group = keep
                groups[keep] += groups.pop(drop)
                changed = True
            if not changed:
                break
        return sorted(groups.values(), key=lambda g: min(m.order for m in g))

    def _candidates(self, nodes: Sequence[_Buf], groups: Mapping[int, list[_Buf]]
                    ) -> list[tuple[_Buf, _Buf]]:
        """Pairs of buffer nodes that use a common buffer, best first (``score_fusion``)."""
        by_buffer: dict[Any, list[_Buf]] = {}
        for b in nodes:
            used = set(b.read_bufs) | {b.key}
            for u in used:
                by_buffer.setdefault(u, []).append(b)
        seen: set[tuple[int, int]] = set()
        scored = []
        for members in by_buffer.values():
            members = sorted(members, key=lambda m: m.order)
            for i, a in enumerate(members):
                for b in members[i + 1:]:
                    key = (id(a), id(b))
                    if key in seen:
                        continue
                    seen.add(key)
                    shared = self._shared_bytes(a, b)
                    same_kind = (a.kind == "reduction") == (b.kind == "reduction")
                    scored.append(((int(same_kind and shared > 0), shared,
                                    -abs(b.order - a.order)), a, b))
        scored.sort(key=lambda s: s[0], reverse=True)
        return [(a, b) for _, a, b in scored]

    def _shared_bytes(self, a: _Buf, b: _Buf) -> int:
        """``score_fusion_memory``: bytes of the buffers both use."""
        shared = 0
        a_reads = {k[0]: v for k, v in a.reads.items()}
        b_reads = {k[0]: v for k, v in b.reads.items()}
        for src, size in a_reads.items():
            if src in b_reads:
                shared += min(size, b_reads[src])
        if a.key in b_reads:
            shared += a.out_bytes
        if b.key in a_reads:
            shared += b.out_bytes
        return shared

    def _can_fuse(self, g1: list[_Buf], g2: list[_Buf], groups: Mapping[int, list[_Buf]]
                  ) -> bool:
        if len(g1) + len(g2) > MAX_FUSION_SIZE:
            return False
        if not _shapes_fuse(_group_shape(g1), _group_shape(g2)):
            return False
        s1 = {m.key for m in g1}
        s2 = {m.key for m in g2}
        vertical = any(s1 & m.read_bufs for m in g2) or any(s2 & m.read_bufs for m in g1)
        shared = sum(self._shared_bytes(a, b) for a in g1 for b in g2)
        if shared == 0:
            return False
        if not vertical:
            if shared < SCORE_FUSION_MEMORY_THRESHOLD:
                return False
            lo1, hi1 = min(m.order for m in g1), max(m.order for m in g1)
            lo2, hi2 = min(m.order for m in g2), max(m.order for m in g2)
            if max(abs(lo1 - hi2), abs(lo2 - hi1)) > LONG_DISTANCE:
                return False
        return not self._path_outside(s1, s2) and not self._path_outside(s2, s1)

    def _path_outside(self, src: set[Any], dst: set[Any]) -> bool:
        """Whether some node of ``dst`` depends on ``src`` through a node in neither
        (``will_fusion_create_cycle``, "intermediate nodes between node1 & node2")."""
        hi = max(self.bufs[k].order for k in dst)
        stack = [u for k in src for u in self.bufs[k].users if u not in src and u not in dst]
        seen: set[Any] = set()
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            buf = self.bufs.get(k)
            if buf is None or buf.order > hi:
                continue
            for u in buf.users:
                if u in dst:
                    return True
                if u not in src:
                    stack.append(u)
        return False

    # ---------------------------------------------------------------- kernels
    def kernel(self, index: int, members: Sequence[_Buf], assigned: set[int]
               ) -> FusedKernel | None:
        """The fused group as a kernel record: external reads plus outside-used writes."""
        members = [m for m in members if m.kind != "dead"]
        if not members:
            return None
        keys = {m.key for m in members}
        reads: dict[Any, int] = {}
        for m in members:
            for (src, via), size in m.reads.items():
                if src not in keys:
                    reads[(src, via)] = size
        writes = sum(m.out_bytes for m in members
                     if m.output or any(u not in keys for u in m.users))
        ops: list[int] = []
        for m in members:
            ops += [i for i in m.ops if i not in ops and i not in self.removed
                    and i not in assigned]
        if not ops:
            return None
        classes = [c for m in members for c in m.classes]
        names = sorted({n for m in members for n in m.names if n})
        kind = "red" if any(m.kind == "reduction" for m in members) else "poi"
        op_class = _fused_op(set(names), kind == "red") or next(
            (c for c in _CLASS_PRIORITY if c in classes), "elementwise")
        first = min(ops)
        return FusedKernel(
            name=f"triton_{kind}_fused_{'_'.join(names)}_{index}",
            phase="forward",
            op_class=op_class,
            ops=tuple(sorted(ops)),
            dram_bytes=int(sum(reads.values()) + writes),
            module=self.ops[first].module,
        )


def _fused_op(names: set[str], reduces: bool) -> str | None:
    """The serving engines' fused op a kernel computes, by the ATen ops fused into it: an
    RMSNorm (``pow``/``mean``/``rsqrt`` spelled out, or torch's ``rms_norm``), a LayerNorm, a
    SiLU·mul, a rotary embedding (``cat`` of a negated half, times cos and sin), a GELU, an
    embedding gather, an add; None for anything else."""
    if names & {"rms_norm", "_fused_rms_norm"} or {"mean", "rsqrt"} <= names:
        return "rms_norm_fused"
    if names & {"native_layer_norm", "layer_norm"}:
        return "layer_norm"
    if reduces:
        return None
    if "silu" in names and "mul" in names:
        return "silu_and_mul_fused"
    if {"cat", "neg", "mul", "add"} <= names:
        return "rope_fused"
    if "gelu" in names or {"tanh", "pow"} <= names:
        return "gelu"
    if names & set(_GATHERS):
        return "embedding"
    if names <= {"add"}:
        return "add"
    return None


def _eval_batch_norm(n: Any, name: str) -> bool:
    """A batch norm with running statistics (inference) is elementwise."""
    if name == "_native_batch_norm_legit_no_training":
        return True
    if name in ("native_batch_norm", "batch_norm"):
        training = n.args[5] if len(n.args) > 5 else n.kwargs.get("training", False)
        return not training
    return False


def _group_shape(members: Sequence[_Buf]) -> tuple[int, int, set[int]]:
    """(numel, rnumel, pointwise numels) of a fused group: its reduction's loops, else the
    pointwise numel."""
    red = [m for m in members if m.kind == "reduction"]
    pointwise = {m.numel for m in members if m.kind == "pointwise"}
    if red:
        return red[0].numel, red[0].rnumel, pointwise
    return members[0].numel, 1, pointwise


def _shapes_fuse(a: tuple[int, int, set[int]], b: tuple[int, int, set[int]]) -> bool:
    """``SIMDScheduling.can_fuse`` on (numel, rnumel) groups."""
    n1, r1, _ = a
    n2, r2, _ = b
    if r1 > 1 and r2 > 1:
        return n1 == n2 and r1 == r2
    if r1 == 1 and r2 == 1:
        return n1 == n2
    if r1 == 1:  # pointwise with a reduction: a prologue over all elements, or an epilogue
        return n1 in (n2 * r2, n2)
    return n2 in (n1 * r1, n1)


def _backward_kernels(forward: Sequence[FusedKernel], ops: Sequence[OtherOp]
                      ) -> list[FusedKernel]:
    """One backward kernel per forward kernel (AOTAutograd's min-cut partition recomputes the
    chain's elementwise intermediates): it reads what the forward kernel read and the gradient
    of what it wrote, and writes the gradient of what it read, 2·R + W bytes for a forward
    kernel of R bytes read and W written. A norm's weight gradients are a column reduction, a
    kernel of their own. The backward records of the kernel's ops, and the gradient sums of
    their nodes, are its members."""
    by_node: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        if op.phase == "backward":
            by_node.setdefault(op.node.removesuffix(".grad_sum"), []).append(i)
    out = []
    for k in forward:
        if k.launches == 0 or k.name == REMOVED:
            continue
        nodes = list(dict.fromkeys(ops[i].node for i in k.ops))
        members = sorted(i for n in nodes for i in by_node.get(n, []))
        if not members:
            continue
        # the forward kernel's reads R and writes W, split as its ops' own bytes split
        read_bytes = k.dram_bytes * _read_share(ops, k.ops)
        bytes_ = int(2 * read_bytes + (k.dram_bytes - read_bytes))
        launches = 1 + int(any(ops[i].op_class == "norm" for i in k.ops))
        out.append(FusedKernel(name=k.name.replace("triton_", "triton_bwd_", 1), phase="backward",
                               op_class=k.op_class, ops=tuple(members), dram_bytes=bytes_,
                               module=k.module, launches=launches))
    return out


def _read_share(ops: Sequence[OtherOp], idx: Sequence[int]) -> float:
    """The share of a chain's standalone bytes that are reads: each op's bytes less its output's
    (numel × element size), summed over the ops and divided by their summed bytes."""
    total = sum(ops[i].dram_bytes for i in idx)
    if not total:
        return 0.5
    reads = 0.0
    for i in idx:
        op = ops[i]
        elem = max(op.dram_bytes, 1)
        out = min(op.numel * _elem(op.dtype), elem)
        reads += elem - out
    return reads / total


def _elem(dtype: str) -> int:
    try:
        return resolve_dtype(dtype).in_bytes
    except ValueError:
        return 4
