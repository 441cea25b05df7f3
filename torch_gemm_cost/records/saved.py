"""What the backward pass holds, read off a captured graph: the storages autograd saves in the
forward pass, when the backward pass frees each one, when each parameter's gradient appears,
the recompute of activation-checkpointed modules, and the forward pass's live tensors.

Autograd's own formulas say what an op saves: each op that needs grad is replayed on fake
tensors of its recorded shapes under ``torch.autograd.graph.saved_tensors_hooks``, and each
tensor it packs is traced to the graph tensor whose storage it shares (an input, the output or a
view of one) or counted as a buffer of its own (a dropout mask, a norm's statistics). A storage
saved by several ops, or reached through several views, counts once. Replays are cached by the
op and its operands' shapes, so a model's repeated blocks replay once.

Scaled-dot-product attention is the exception: it is saved as a GPU's FlashAttention kernel
saves it (Q, K, V, the output and its fp32 log-sum-exp), not as the replay's device would; K
and V as they were before a GQA expansion (``repeat_kv``), and no mask where the module is
causal (the capture's stand-in for ``is_causal``), as transformers runs a GPU.

An activation-checkpointed module (``torch.utils.checkpoint`` around it, as transformers'
``gradient_checkpointing_enable`` puts around each layer) holds only its inputs from outside
through the forward pass; its own saved tensors exist while the backward pass recomputes it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..capture.graph import NO_GRAD
from .handlers import op_name
from .nodes import _module_of, _tensors
from .op_classes import _NO_GRAD

__all__ = ["GraphMemory", "LiveStorage", "SavedStorage", "checkpointed_modules", "graph_memory"]

log = logging.getLogger(__name__)

_SDPA = "scaled_dot_product_attention"
_Key = tuple[int, ...]  # a storage: (its id,) for one of the graph's, (node id, i) for an op's own


@dataclass(frozen=True)
class SavedStorage:
    """One storage the backward pass reads: ``elems`` elements of ``dtype``. The backward pass
    frees it once it has run node ``freed_at`` (the earliest node, in graph order, that saved
    it). ``region`` is the checkpointed module whose recompute saves it ("": saved by the
    forward pass itself)."""

    elems: int
    dtype: torch.dtype
    freed_at: int
    region: str = ""


@dataclass(frozen=True)
class LiveStorage:
    """A storage of the graph (parameters and buffers excluded): ``elems`` of ``dtype``, made
    by node ``born`` (0 for an input) and last read by node ``dies`` (the last node for an
    output of the graph)."""

    elems: int
    dtype: torch.dtype
    born: int
    dies: int


@dataclass(frozen=True)
class GraphMemory:
    """The memory facts of a captured graph of ``nodes`` nodes, in elements: what autograd
    saves, where each trained parameter's gradient appears (``(node, elems, dtype)``: the
    backward pass makes it at that node, the last one to read the parameter), each
    checkpointed region's nodes (``(first, last)``), the storages of the forward pass, and
    ``batch``, the leading dim of the first input (None where no input has one)."""

    nodes: int
    saved: tuple[SavedStorage, ...]
    grads: tuple[tuple[int, int, torch.dtype], ...]
    regions: Mapping[str, tuple[int, int]]
    tensors: tuple[LiveStorage, ...]
    batch: int | None
    tokens: int | None  # the second dim of that input (a sequence's tokens); None where absent


def checkpointed_modules(model: torch.nn.Module) -> frozenset[str]:
    """Paths of the modules that run under activation checkpointing in training: those with
    ``gradient_checkpointing = True`` that are transformers' ``GradientCheckpointingLayer``, or,
    for a flagged module with no such layer inside (the older transformers layout, which
    checkpoints each layer of its layer list), the entries of its ``nn.ModuleList`` children."""
    flagged = {name: m for name, m in model.named_modules()
               if getattr(m, "gradient_checkpointing", False) is True}

    def is_layer(m: torch.nn.Module) -> bool:
        return any(c.__name__ == "GradientCheckpointingLayer" for c in type(m).__mro__)

    out = {name for name, m in flagged.items() if is_layer(m)}
    for name, m in flagged.items():
        if is_layer(m) or any(is_layer(s) for s in m.modules()):
            continue
        for child_name, child in m.named_children():
            if isinstance(child, torch.nn.ModuleList):
                prefix = f"{name}.{child_name}".lstrip(".")
                out.update(f"{prefix}.{i}" for i in range(len(child)))
    return frozenset(out)


def graph_memory(captured: Any, checkpointed: Collection[str] = frozenset(), *,
                 train: bool = True) -> GraphMemory:
    """The memory facts of ``captured`` (see ``GraphMemory``); ``checkpointed`` holds the paths
    of the modules under activation checkpointing (``checkpointed_modules``). ``train=False``
    leaves out what only a backward pass holds (no op is replayed)."""
    nodes = list(captured.graph_module.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    state = {n for n in nodes if n.op == "placeholder" and _is_state(n.name)}
    region = {n: _region(n, checkpointed) for n in nodes} if train else dict.fromkeys(nodes, "")
    spans: dict[str, tuple[int, int]] = {}
    for node in nodes:
        if region[node]:
            spans[region[node]] = (spans.get(region[node], (index[node],))[0], index[node])
    saved: dict[tuple[Any, ...], SavedStorage] = {}
    if train:
        saved = _saved(nodes, index, state, region, captured)
        for key, s in _region_inputs(nodes, state, region, spans, captured).items():
            saved.setdefault(key, s)
    held = {k for k, s in saved.items() if not s.region}
    inputs = [n for n in nodes if n.op == "placeholder" and n not in state
              and isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].dim() >= 1]
    shape = tuple(inputs[0].meta["val"].shape) if inputs else ()
    return GraphMemory(
        nodes=len(nodes),
        saved=tuple(s for k, s in saved.items() if not s.region or k[1:] not in held),
        grads=_grads(nodes, index, state, captured.requires_grad) if train else (),
        regions=spans,
        tensors=_tensor_spans(nodes, index, state),
        batch=int(shape[0]) if shape else None,
        tokens=int(shape[1]) if len(shape) >= 2 else None,
    )


def _saved(nodes: list[Any], index: Mapping[Any, int], state: Collection[Any],
           region: Mapping[Any, str], captured: Any) -> dict[tuple[Any, ...], SavedStorage]:
    """What each op that needs grad saves, by storage: keyed by the storage for the forward
    pass's, by (region, storage) for a checkpointed region's recompute."""
    requires = _requires(nodes, captured.requires_grad, region)
    replay = _Replay()
    causal_modules: frozenset[str] = getattr(captured, "causal_modules", frozenset())
    state_keys = {(_key(s),) for s in state}
    saved: dict[tuple[Any, ...], SavedStorage] = {}
    for node in nodes:
        if node.op != "call_function" or not requires[node] or op_name(node.target) == "getitem":
            continue
        causal = _module_of(node, "")[0] in causal_modules
        for key, elems, dtype in replay.saved(node, requires, causal):
            if key in state_keys:
                continue
            # nodes run in order: the first to save a storage is the earliest
            saved.setdefault((region[node], *key) if region[node] else key,
                             SavedStorage(elems, dtype, index[node], region[node]))
    return saved


def _region_inputs(nodes: list[Any], state: Collection[Any], region: Mapping[Any, str],
                   spans: Mapping[str, tuple[int, int]], captured: Any
                   ) -> dict[tuple[Any, ...], SavedStorage]:
    """The tensors each checkpointed region reads from outside it, which the checkpoint keeps
    until the region's backward has run; a causal module's mask, the capture's stand-in for
    ``is_causal``, is none of them."""
    causal_modules: frozenset[str] = getattr(captured, "causal_modules", frozenset())
    out: dict[tuple[Any, ...], SavedStorage] = {}
    for node in nodes:
        if not region[node] or node.op != "call_function":
            continue
        mask = None
        if op_name(node.target) == _SDPA and _module_of(node, "")[0] in causal_modules:
            mask = node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None)
        for src in node.all_input_nodes:
            if (src in state or src is mask or region[src] == region[node]
                    or not _tensors(src.meta.get("val"))):
                continue
            t = _tensors(src.meta["val"])[0]
            out.setdefault((_key(src),), SavedStorage(_storage_elems(t), t.dtype,
                                                      spans[region[node]][0]))
    return out


def _is_state(name: str) -> bool:
    """A placeholder of the model's state: a parameter (``p_``) or buffer (``b_``), as both
    capture paths name them, or a constant ``torch.export`` lifted (``c_``)."""
    return name.startswith(("p_", "b_", "c_"))


def _region(node: Any, checkpointed: Collection[str]) -> str:
    """The outermost checkpointed module ``node`` runs in; "" for none."""
    if not checkpointed:
        return ""
    for path, _ in (node.meta.get("nn_module_stack") or {}).values():
        if path in checkpointed:
            return str(path)
    return ""


def _requires(nodes: list[Any], placeholder_grad: Mapping[str, bool],
              region: Mapping[Any, str]) -> dict[Any, bool]:
    """Which nodes' outputs need grad, as ``extract`` decides; inside a checkpointed region the
    grad mode of the capture is ignored, since the recompute runs with grad (a reentrant
    checkpoint runs its forward under ``no_grad``)."""
    requires: dict[Any, bool] = {}
    for node in nodes:
        if node.op == "placeholder":
            requires[node] = bool(placeholder_grad.get(node.name, False))
        elif node.op == "call_function":
            out = _tensors(node.meta.get("val"))
            requires[node] = (
                (not node.meta.get(NO_GRAD) or bool(region[node]))
                and op_name(node.target).rstrip("_") not in _NO_GRAD
                and any(t.dtype.is_floating_point for t in out)
                and any(requires.get(i, False) for i in node.all_input_nodes))
        else:
            requires[node] = False
    return requires


def _key(node: Any) -> int:
    """The storage of a node's tensor (views share their base's)."""
    return _storage_id(_tensors(node.meta.get("val"))[0])


def _storage_id(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def _storage_elems(t: torch.Tensor) -> int:
    return int(t.untyped_storage().nbytes()) // t.element_size()


def _grads(nodes: list[Any], index: Mapping[Any, int], state: Iterable[Any],
           placeholder_grad: Mapping[str, bool]) -> tuple[tuple[int, int, torch.dtype], ...]:
    """(node, elems, dtype) of each trained parameter's gradient: the backward pass makes it
    at the last node that reads the parameter."""
    out = []
    for p in state:
        t = p.meta.get("val")
        if not placeholder_grad.get(p.name) or not isinstance(t, torch.Tensor) or not p.users:
            continue
        out.append((max(index[u] for u in p.users), t.numel(), t.dtype))
    return tuple(out)


def _tensor_spans(nodes: list[Any], index: Mapping[Any, int], state: Collection[Any]
                  ) -> tuple[LiveStorage, ...]:
    """Each storage of the forward pass (state excluded), from the node that makes it to the
    last node that reads it or a view of it; the graph's outputs live to the end."""
    spans: dict[int, list[Any]] = {}
    last = len(nodes) - 1
    for node in nodes:
        if node in state or node.op not in ("placeholder", "call_function"):
            continue
        for t in _tensors(node.meta.get("val")):
            k = _storage_id(t)
            if k not in spans:
                spans[k] = [_storage_elems(t), t.dtype, index[node], index[node]]
            for user in node.users:
                end = last if user.op == "output" else index[user]
                spans[k][3] = max(spans[k][3], end)
    return tuple(LiveStorage(*s) for s in spans.values())


class _Replay:
    """Each op replayed on fake tensors under ``saved_tensors_hooks``: what it saves, as
    (storage key, elements, dtype), the key that of the graph tensor it shares."""

    def __init__(self) -> None:
        self.mode = FakeTensorMode()
        self.cache: dict[Any, tuple[tuple[str, int, int, torch.dtype], ...]] = {}

    def saved(self, node: Any, requires: Mapping[Any, bool], causal: bool = False
              ) -> list[tuple[_Key, int, torch.dtype]]:
        """(storage, elements, dtype) of each storage ``node``'s op saves."""
        out: list[tuple[_Key, int, torch.dtype]] = []
        if op_name(node.target) == _SDPA:
            for n in _flash_saved(node, causal):
                t = _tensors(n.meta["val"])[0]
                out.append(((_storage_id(t),), _storage_elems(t), t.dtype))
            q = node.meta["val"]  # the log-sum-exp: (…, heads, q_len) in fp32
            return [*out, ((id(node), 0), q.numel() // q.shape[-1], torch.float32)]
        inputs = list(dict.fromkeys(i for i in node.all_input_nodes
                                    if _tensors(i.meta.get("val"))))
        signature = (node.target, _shape_of(node.args, inputs), _shape_of(node.kwargs, inputs),
                     tuple(_meta(i.meta["val"], requires.get(i, False)) for i in inputs))
        if signature not in self.cache:
            self.cache[signature] = self._replay(node, inputs, requires)
        outs = _tensors(node.meta.get("val"))
        for where, i, elems, dtype in self.cache[signature]:
            if where == "in":
                t = _tensors(inputs[i].meta["val"])[0]
                out.append(((_storage_id(t),), _storage_elems(t), t.dtype))
            elif where == "out":
                out.append(((_storage_id(outs[i]),), _storage_elems(outs[i]), outs[i].dtype))
            else:  # a buffer of the op's own, one per node
                out.append(((id(node), i), elems, dtype))
        return out

    def _replay(self, node: Any, inputs: list[Any], requires: Mapping[Any, bool]
                ) -> tuple[tuple[str, int, int, torch.dtype], ...]:
        packed: list[torch.Tensor] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            packed.append(t)
            return t

        try:
            with self.mode, torch.enable_grad():
                fresh = {i: _fresh(i.meta["val"], requires.get(i, False)) for i in inputs}
                args = torch.fx.node.map_arg(node.args, lambda n: fresh.get(n, n))
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: fresh.get(n, n))
                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    result = node.target(*args, **kwargs)
        except (RuntimeError, TypeError, ValueError, NotImplementedError, AttributeError) as e:
            # NB: an op that cannot be replayed is taken to save its inputs
            log.debug("%s: replay failed (%s); taken to save its inputs", node.name, e)
            return tuple(("in", j, 0, torch.float32) for j in range(len(inputs)))
        ins = {_storage_id(t): j for j, t in enumerate(fresh.values())}
        outs = {_storage_id(t): j for j, t in enumerate(_tensors(result))}
        found: dict[Any, tuple[str, int, int, torch.dtype]] = {}
        for t in packed:
            k = _storage_id(t)
            if k in outs:
                found.setdefault(("out", outs[k]), ("out", outs[k], 0, t.dtype))
            elif k in ins:
                found.setdefault(("in", ins[k]), ("in", ins[k], 0, t.dtype))
            else:
                found.setdefault(k, ("own", len(found), _storage_elems(t), t.dtype))
        return tuple(found.values())


def _flash_saved(node: Any, causal: bool) -> list[Any]:
    """The graph nodes whose storages a FlashAttention kernel saves: Q, K and V (K and V as they
    were before a GQA expansion, ``repeat_kv``, since the kernel reads the shared heads
    itself), an explicit mask unless it stands for ``is_causal`` in a causal module, and the
    output."""
    q, k, v, mask = (list(node.args) + [None] * 4)[:4]
    mask = node.kwargs.get("attn_mask", mask)
    kept = [q, _before_expansion(k), _before_expansion(v)]
    if isinstance(mask, torch.fx.Node) and not causal:
        kept.append(mask)
    return [n for n in kept if isinstance(n, torch.fx.Node)] + [node]


_EXPANSION = frozenset({"view", "_unsafe_view", "reshape", "clone", "expand", "unsqueeze"})


def _before_expansion(node: Any) -> Any:
    """The tensor a chain of expand/clone/reshape (``repeat_kv``) started from, where it holds
    fewer elements; else ``node``."""
    src = node
    while (isinstance(src, torch.fx.Node) and src.op == "call_function"
           and op_name(src.target) in _EXPANSION and isinstance(src.args[0], torch.fx.Node)):
        src = src.args[0]
    if src is node or not _tensors(src.meta.get("val")):
        return node
    return src if _tensors(src.meta["val"])[0].numel() < node.meta["val"].numel() else node


def _fresh(val: Any, requires: bool) -> torch.Tensor:
    """A fake tensor of ``val``'s layout; one that needs grad is a non-leaf (an in-place op on
    it is allowed, as on the activation it stands for)."""
    t = _tensors(val)[0]
    fresh = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    if requires and t.dtype.is_floating_point:
        return fresh.requires_grad_().clone(memory_format=torch.preserve_format)
    return fresh


def _meta(val: Any, requires: bool) -> tuple[Any, ...]:
    t = _tensors(val)[0]
    return (tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device), requires)


def _shape_of(tree: Any, inputs: list[Any]) -> Any:
    """``tree`` with each node as its place among ``inputs``: the op's arguments apart from the
    tensors' values."""
    if isinstance(tree, torch.fx.Node):
        return ("node", inputs.index(tree) if tree in inputs else tree.name)
    if isinstance(tree, (list, tuple)):
        return tuple(_shape_of(v, inputs) for v in tree)
    if isinstance(tree, dict):
        return tuple((k, _shape_of(v, inputs)) for k, v in tree.items())
    return tree if isinstance(tree, (int, float, bool, str, type(None))) else repr(tree)
