"""What a captured training step says about tensor parallelism, read off its FX graph.

Megatron-LM shards a transformer by where each weight GEMM reads its input from (Shoeybi et al.
2019, §3): a GEMM whose input is replicated on every GPU of the tensor-parallel group is
*column-parallel* (its output features, n, split: each GPU computes its share of the heads or
of the MLP width); a GEMM whose input is already split is *row-parallel* (its input features,
k, split; the partial outputs are summed by an all-reduce). Everything between the two runs on
the split tensors (attention heads, the MLP's activation); everything else (norms, residual
adds, the embedding's output) is replicated. The vocabulary is split too: the embedding table
by rows (its output all-reduced) and the LM head as a column-parallel GEMM, the loss computed
on the split logits (vocab-parallel cross-entropy).

``graph_roles`` follows the data flow of a captured graph node by node, so any model the
capture takes is sharded without a table of its layer names: GPT-2's fused ``c_attn``, Llama's
separate q/k/v, BERT's ``dense`` layers alike. Each node gets one role:

- ``column`` / ``row``: a weight GEMM, split in n / in k;
- ``head``: a GEMM without a weight on split tensors (attention's QKᵀ and PV, an SDPA call),
  split in its batch (heads);
- ``split``: any other op on a split tensor; ``replicated``: the rest.

``core`` marks attention's core (QKᵀ, the ops on its scores, PV): what selective recomputation
recomputes (Korthikanti et al. 2022, §4.2).

A mixture of experts (``experts`` > 0) is read the same way, with two rules of Megatron-Core's
MoE layer: the router, a GEMM whose weight has ``experts`` output rows, is replicated (its
weight whole on every GPU of the group, its logits whole), and the experts' GEMMs, those whose
weight is a 3-D tensor of ``experts`` matrices (transformers' grouped experts), are column- or
row-parallel as a dense MLP's are; they are also marked as the experts' (``expert_nodes``,
``expert_params``), which expert parallelism divides.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..records import META_KEY, GemmSite
from ..records.handlers import op_name

__all__ = ["PARAM_VIEWS", "ROLES", "GraphRoles", "graph_roles", "node_segments"]

ROLES: tuple[str, ...] = ("column", "row", "head", "split", "replicated")
# ops that pass a parameter through unchanged in value (a weight's transpose, its cast)
PARAM_VIEWS = frozenset({"t", "transpose", "view", "reshape", "permute", "expand", "alias",
                          "unsqueeze", "_to_copy", "to", "detach", "contiguous", "clone"})


@dataclass(frozen=True)
class GraphRoles:
    """The tensor-parallel reading of one captured graph.

    ``role`` and ``core`` are per node name. ``split_params`` names the parameter placeholders
    whose tensor is split across the group (a column GEMM's weight and bias, a row GEMM's
    weight, the vocabulary's embedding table). The collectives are (node name, bytes) of the
    tensors Megatron reduces: each row GEMM's output and the vocabulary embedding's output
    (forward all-reduces), and each replicated tensor a column GEMM reads (its gradient
    all-reduced in the backward pass, once however many column GEMMs read it).
    """

    role: Mapping[str, str]
    core: frozenset[str]
    split_params: frozenset[str]
    row_outputs: tuple[tuple[str, int], ...]
    column_inputs: tuple[tuple[str, int], ...]
    vocab_outputs: tuple[tuple[str, int], ...]
    lm_head: str | None  # the column GEMM whose output is the split logits
    expert_nodes: frozenset[str] = frozenset()  # the experts' GEMMs
    expert_params: frozenset[str] = frozenset()  # their weights, one matrix an expert


def _tensor_inputs(node: torch.fx.Node) -> Iterator[torch.fx.Node]:
    seen: set[str] = set()
    for arg in (*node.args, *node.kwargs.values()):
        items = arg if isinstance(arg, (list, tuple)) else (arg,)
        for a in items:
            if isinstance(a, torch.fx.Node) and _holds_tensor(a.meta.get("val")) \
                    and a.name not in seen:
                seen.add(a.name)
                yield a


def _holds_tensor(val: Any) -> bool:
    """A tensor, or an op's several outputs (``split``'s list, read by ``getitem``)."""
    if isinstance(val, (list, tuple)):
        return any(isinstance(v, torch.Tensor) for v in val)
    return isinstance(val, torch.Tensor)


def _nbytes(node: torch.fx.Node, elem_bytes: int) -> int:
    val = node.meta.get("val")
    return int(val.numel()) * elem_bytes if isinstance(val, torch.Tensor) else 0


def graph_roles(graph: torch.fx.Graph, vocab: int | None, elem_bytes: int,
                experts: int = 0) -> GraphRoles:
    """The role of every node of a captured, extracted graph (records in ``node.meta``), and
    the tensors Megatron's tensor parallelism reduces, each of ``elem_bytes`` per element (the
    activations' storage size); ``experts``: the model's experts a MoE layer (0: dense)."""
    param_root: dict[str, str] = {}  # node -> the parameter placeholder it passes through
    split: dict[str, bool] = {}
    role: dict[str, str] = {}
    core: set[str] = set()
    after_qk: set[str] = set()
    split_params: set[str] = set()
    rows: list[tuple[str, int]] = []
    columns: dict[str, int] = {}
    vocab_out: list[tuple[str, int]] = []
    lm_head = None
    expert_nodes: set[str] = set()
    expert_params: set[str] = set()
    root_shape: dict[str, tuple[int, ...]] = {}  # a parameter's shape as stored
    for node in graph.nodes:
        if node.op == "placeholder":
            if node.name.startswith("p_"):
                param_root[node.name] = node.name
                val = node.meta.get("val")
                root_shape[node.name] = tuple(val.shape) if isinstance(val, torch.Tensor) else ()
            split[node.name] = False
            continue
        if node.op != "call_function":
            continue
        ins = list(_tensor_inputs(node))
        name = op_name(node.target)
        params = [a for a in ins if a.name in param_root]
        acts = [a for a in ins if a.name not in param_root]
        if params and not acts and name in PARAM_VIEWS:
            param_root[node.name] = param_root[params[0].name]
            split[node.name] = False
            role[node.name] = "replicated"
            continue
        gemm = any(isinstance(r, GemmSite) for r in node.meta.get(META_KEY, ()))
        weights = [a for a in params if a.meta["val"].dim() >= 2]
        stored = [root_shape.get(param_root[w.name], ()) for w in weights]
        if gemm and weights and acts and experts and all(
                len(sh) == 2 and sh[0] == experts for sh in stored):  # the router: replicated
            role[node.name], split[node.name] = "replicated", False
            continue
        if gemm and weights and acts:
            grouped = [w for w, sh in zip(weights, stored) if experts and len(sh) == 3
                       and sh[0] == experts]
            if grouped:
                expert_nodes.add(node.name)
                expert_params.update(param_root[w.name] for w in grouped)
            if any(split.get(a.name, False) for a in acts):
                role[node.name], split[node.name] = "row", False
                split_params.update(param_root[w.name] for w in weights)
                rows.append((node.name, _nbytes(node, elem_bytes)))
            else:
                role[node.name], split[node.name] = "column", True
                split_params.update(param_root[p.name] for p in params)
                for a in acts:  # not an index tensor (grouped experts' offsets)
                    v = a.meta["val"]
                    if not isinstance(v, torch.Tensor) or v.dtype.is_floating_point:
                        columns.setdefault(a.name, _nbytes(a, elem_bytes))
                out = node.meta.get("val")
                if vocab and isinstance(out, torch.Tensor) and out.shape[-1] == vocab:
                    lm_head = node.name
            continue
        if name == "embedding" and params and vocab \
                and params[0].meta["val"].shape[0] == vocab:
            role[node.name], split[node.name] = "replicated", False
            split_params.add(param_root[params[0].name])
            vocab_out.append((node.name, _nbytes(node, elem_bytes)))
            continue
        is_split = any(split.get(a.name, False) for a in acts)
        split[node.name] = is_split
        if gemm and is_split:  # attention's QKᵀ or PV (or all of an SDPA call) on this GPU's heads
            role[node.name] = "head"
            core.add(node.name)
            fused = any(getattr(r, "attention", None) is not None
                        for r in node.meta.get(META_KEY, ()))
            if not fused and not any(a.name in after_qk for a in acts):
                after_qk.add(node.name)  # QKᵀ: the ops on its scores follow, up to PV
            continue
        role[node.name] = "split" if is_split else "replicated"
        if any(a.name in after_qk for a in acts):
            after_qk.add(node.name)
            core.add(node.name)
    return GraphRoles(role=role, core=frozenset(core), split_params=frozenset(split_params),
                      row_outputs=tuple(rows), column_inputs=tuple(columns.items()),
                      vocab_outputs=tuple(vocab_out), lm_head=lm_head,
                      expert_nodes=frozenset(expert_nodes),
                      expert_params=frozenset(expert_params))


def node_segments(graph: torch.fx.Graph, layer_prefix: str, layers: int) -> dict[str, int]:
    """Each node's segment of the model: its decoder layer (0 .. layers - 1), -1 before the
    first layer (the embeddings), ``layers`` after the last (final norm, LM head, loss).

    A node is in a layer when the innermost module it ran in lies under
    ``{layer_prefix}.{i}``; outside the layers, graph order says before or after.
    Placeholders (parameters, inputs) count as before."""
    out: dict[str, int] = {}
    seen_layer = False
    head = f"{layer_prefix}."
    for node in graph.nodes:
        if node.op != "call_function":
            out[node.name] = -1
            continue
        index = _layer_index(node, head, layers)
        if index is not None:
            seen_layer = True
            out[node.name] = index
        else:
            out[node.name] = layers if seen_layer else -1
    return out


def _layer_index(node: torch.fx.Node, head: str, layers: int) -> int | None:
    stack: Mapping[str, Any] = node.meta.get("nn_module_stack") or {}
    for path, _ in reversed(list(stack.values())):
        path = str(path)
        if path.startswith(head):
            first = path[len(head):].split(".", 1)[0]
            if first.isdigit() and int(first) < layers:
                return int(first)
    return None
