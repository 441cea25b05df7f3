"""The model a training plan prices, and one micro-batch's training step of it as records.

A config (or a model holding one) is read by ``llm.model.config_of``, the serving planner's
reader, and its causal LM built once on the meta device in the plan's dtype, as transformers
builds it for training (``attn_implementation`` "sdpa" or "eager"). A model instance is captured
as it is. The step is captured through the pipeline ``estimate(mode="train")`` uses (capture ->
``records.extract``): the loss of ``model(ids, labels=ids)`` and its backward pass, full width,
one micro-batch of ``seq`` tokens. Each record is placed in its segment of the model (a decoder
layer, or before or after them) and given its tensor-parallel role (``graph.graph_roles``), so
one capture serves every layout of that micro-batch shape: tensor parallelism splits the
records (``shard``), pipeline parallelism groups the segments.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import torch

from ..capture.core import Captured, capture
from ..capture.hf_config import HfConfig, read_hf_config
from ..compiled.fusion import fuse_kernels
from ..hardware.dtypes import DTYPES
from ..llm.model import causal_lm, config_key, config_of
from ..records import GemmSite, OtherOp, extract
from ..records.handlers import op_name
from ..records.types import FusedKernel
from ..suggest import check_choice
from .graph import PARAM_VIEWS, graph_roles, node_segments

__all__ = ["ATTENTIONS", "ParamTensor", "StepSource", "TrainingStep"]

ATTENTIONS: tuple[str, ...] = ("sdpa", "eager")
_LOSS_REDUCTIONS = 3  # vocab-parallel cross-entropy: max, sum of exp, target logit (fp32 each)


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor of the model: its elements, the segments that read it (a tied
    embedding: the first and the last), whether tensor parallelism splits it, whether it
    trains (has a gradient and optimizer states), whether it holds a MoE layer's experts
    (expert parallelism divides it)."""

    name: str
    numel: int
    segments: tuple[int, ...]
    split: bool
    trained: bool
    expert: bool = False


@dataclass(frozen=True)
class TrainingStep:
    """One micro-batch's forward and backward pass at full width, as records in execution
    order, each with its segment (-1: before the layers, 0 .. layers - 1, ``layers``: after),
    its tensor-parallel role (``graph.ROLES``) and whether it is attention's core.

    The collectives are (segment, bytes) of the tensors Megatron reduces, at full size (the
    tensors reduced are replicated, so their size does not depend on the group's size)."""

    model_name: str
    shape: HfConfig
    layers: int
    micro_batch: int
    seq: int
    dtype: str  # the compute dtype's name
    act_bytes: int  # bytes of one activation element as stored
    sites: tuple[GemmSite, ...]
    others: tuple[OtherOp, ...]
    kernels: tuple[FusedKernel, ...]  # the other ops as torch.compile fuses them; () eager
    site_segment: tuple[int, ...]
    site_role: tuple[str, ...]
    site_core: tuple[bool, ...]
    other_segment: tuple[int, ...]
    other_role: tuple[str, ...]
    other_core: tuple[bool, ...]
    params: tuple[ParamTensor, ...]
    row_outputs: tuple[tuple[int, int], ...]
    column_inputs: tuple[tuple[int, int], ...]
    vocab_outputs: tuple[tuple[int, int], ...]
    loss_reductions: tuple[tuple[int, int], ...]  # the vocab-parallel loss's, (segment, bytes)
    site_expert: tuple[bool, ...] = ()  # an expert's GEMM (``graph.GraphRoles.expert_nodes``)
    moe_layers: tuple[int, ...] = ()  # the layers with experts, each routing its tokens once

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq

    @property
    def boundary_bytes(self) -> int:
        """The hidden state one micro-batch passes from a pipeline stage to the next."""
        return self.tokens * int(self.shape.hidden_size or 0) * self.act_bytes


class StepSource:
    """Where a plan's training steps come from: a config (its meta model built once, its
    captures cached per shape across plans) or a model instance (captured as given, cached
    per shape for this source's life)."""

    def __init__(self, model_or_config: Any, dtype: str, attention: str,
                 compiled: bool = False) -> None:
        self.dtype = dtype
        self.attention = check_choice("attention", attention, ATTENTIONS)
        if not isinstance(compiled, bool):
            raise TypeError(f"compiled must be True or False, got {compiled!r}")
        self.compiled = compiled
        self.module: torch.nn.Module | None = None
        if isinstance(model_or_config, torch.nn.Module):
            self.module = model_or_config
            self.config = config_of(model_or_config)
            self.key = ""
        else:
            self.config = config_of(model_or_config)
            self.key = config_key(self.config)
        self.shape = read_hf_config(self.config)
        if not self.shape.num_hidden_layers or not self.shape.hidden_size:
            raise ValueError(f"{type(self.config).__name__} states no layer count or hidden "
                             "size (num_hidden_layers / n_layer, hidden_size / n_embd); a "
                             "training plan needs both")
        self._steps: dict[tuple[int, int], TrainingStep] = {}
        self.shapes: set[tuple[int, int]] = set()  # (micro-batch, seq) shapes asked for

    @property
    def captures(self) -> int:
        """The shapes this source has asked for, each captured once (or earlier, cached)."""
        return len(self.shapes)

    def step(self, micro_batch: int, seq: int) -> TrainingStep:
        """The training step of ``micro_batch`` sequences of ``seq`` tokens."""
        self.shapes.add((micro_batch, seq))
        if self.module is None:
            return _captured_config_step(self.key, self.dtype, self.attention, micro_batch,
                                         seq, self.compiled)
        if (micro_batch, seq) not in self._steps:
            self._steps[(micro_batch, seq)] = training_step(self.module, self.dtype,
                                                            micro_batch, seq, self.compiled)
        return self._steps[(micro_batch, seq)]


@functools.lru_cache(maxsize=4)
def meta_model(key: str, dtype: str, attention: str) -> torch.nn.Module:
    """The causal LM of a config (``config_key``) on the meta device, in ``dtype``, in training
    mode, attention as ``attention`` ("sdpa" or "eager")."""
    return causal_lm(key, dtype, attention).train()


@functools.lru_cache(maxsize=16)
def _captured_config_step(key: str, dtype: str, attention: str, micro_batch: int, seq: int,
                          compiled: bool) -> TrainingStep:
    model = meta_model(key, dtype, attention)
    return training_step(model, dtype, micro_batch, seq, compiled,
                         _captured_config(key, dtype, attention, micro_batch, seq))


@functools.lru_cache(maxsize=2)
def _captured_config(key: str, dtype: str, attention: str, micro_batch: int, seq: int
                     ) -> Captured:
    """One capture of a config's step, shared by its eager and compiled records."""
    return capture_step(meta_model(key, dtype, attention), micro_batch, seq)


def capture_step(model: torch.nn.Module, micro_batch: int, seq: int) -> Captured:
    """The loss of ``model(ids, labels=ids)`` on ``micro_batch`` × ``seq`` token ids, captured
    for training."""
    param = next(iter(model.parameters()), None)
    where = param.device if param is not None else torch.device("meta")
    ids = torch.ones(micro_batch, seq, dtype=torch.long, device=where)
    kwargs: dict[str, Any] = {"labels": ids}
    if "use_cache" in inspect.signature(model.forward).parameters:
        kwargs["use_cache"] = False
    return capture(model, (ids,), kwargs, train=True)


def training_step(model: torch.nn.Module, dtype: str, micro_batch: int, seq: int,
                  compiled: bool = False, captured: Captured | None = None) -> TrainingStep:
    """``model``'s loss on ``micro_batch`` × ``seq`` token ids and its backward pass, captured
    (unless ``captured`` holds it) and extracted as ``estimate(mode="train")`` does
    (``compiled``: the other ops fused into kernels as ``estimate(mode="train",
    compiled=True)`` fuses them), each record placed and given its role."""
    native = _native_dtype(model)
    if captured is None:
        captured = capture_step(model, micro_batch, seq)
    cd = DTYPES[dtype]
    sites, others = extract(captured, cd, mode="train", native_dtype=native)
    kernels: tuple[FusedKernel, ...] = ()
    if compiled:
        others, kernels = fuse_kernels(captured, others, cd, mode="train", native_dtype=native)
    shape = read_hf_config(getattr(model, "config", None))
    layers = int(shape.num_hidden_layers or 0)
    act_bytes = torch.empty((), dtype=native).element_size()
    return _placed(captured, shape, layers, micro_batch, seq, cd.name, act_bytes, sites,
                   tuple(others), kernels)


def _placed(captured: Captured, shape: HfConfig, layers: int, micro_batch: int, seq: int,
            dtype: str, act_bytes: int, sites: tuple[GemmSite, ...],
            others: tuple[OtherOp, ...], kernels: tuple[FusedKernel, ...]) -> TrainingStep:
    graph = captured.graph_module.graph
    prefix = layer_prefix(captured.module_types, layers)
    segment = node_segments(graph, prefix, layers)
    roles = graph_roles(graph, shape.vocab_size, act_bytes, int(shape.num_experts or 0))

    def place(node: str) -> tuple[int, str, bool]:
        base = node.split(".", 1)[0]
        role = roles.role.get(base)
        if role is None:  # a placeholder's gradient sum: split with its tensor
            role = "split" if base in roles.split_params else "replicated"
        return segment.get(base, -1), role, base in roles.core

    site_places = [place(s.node) for s in sites]
    other_places = [place(o.node) for o in others]
    lm = segment.get(roles.lm_head, layers) if roles.lm_head else None
    tokens = micro_batch * seq
    return TrainingStep(
        model_name=captured.model_name, shape=shape, layers=layers, micro_batch=micro_batch,
        seq=seq, dtype=dtype, act_bytes=act_bytes, sites=sites, others=others, kernels=kernels,
        site_segment=tuple(p[0] for p in site_places),
        site_role=tuple(p[1] for p in site_places),
        site_core=tuple(p[2] for p in site_places),
        other_segment=tuple(p[0] for p in other_places),
        other_role=tuple(p[1] for p in other_places),
        other_core=tuple(p[2] for p in other_places),
        params=_params(graph, captured.requires_grad, segment, roles.split_params,
                       roles.expert_params),
        row_outputs=tuple((segment[n], b) for n, b in roles.row_outputs),
        column_inputs=tuple((segment[n], b) for n, b in roles.column_inputs),
        vocab_outputs=tuple((segment[n], b) for n, b in roles.vocab_outputs),
        loss_reductions=((lm, tokens * 4),) * _LOSS_REDUCTIONS if lm is not None else (),
        site_expert=tuple(s.node.split(".", 1)[0] in roles.expert_nodes for s in sites),
        moe_layers=tuple(sorted({segment[n] for n in roles.expert_nodes
                                 if 0 <= segment.get(n, -1) < layers})))


def layer_prefix(module_types: dict[str, str] | Any, layers: int) -> str:
    """The module path of the model's decoder layers, the list holding exactly ``layers``
    children ``0 .. layers - 1`` (GPT-2's "transformer.h", Llama's "model.layers")."""
    found = [p.rsplit(".", 1)[0] for p in module_types
             if p.endswith(f".{layers - 1}") and layers > 0]
    good = sorted((p for p in found if f"{p}.0" in module_types
                   and f"{p}.{layers}" not in module_types), key=len)
    if not good:
        raise ValueError(f"found no list of {layers} decoder layers among the model's modules; "
                         "a training plan places each layer on a pipeline stage")
    return good[0]


def _params(graph: torch.fx.Graph, requires_grad: Any, segment: dict[str, int],
            split: frozenset[str], experts: frozenset[str] = frozenset()
            ) -> tuple[ParamTensor, ...]:
    out = []
    for node in graph.nodes:
        if node.op != "placeholder" or not node.name.startswith("p_"):
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        reached: set[int] = set()
        frontier = list(node.users)
        while frontier:  # through the weight's views and casts to the ops that read it
            user = frontier.pop()
            if user.op == "call_function" and all(
                    isinstance(u, torch.fx.Node) for u in user.users) and _is_param_view(user):
                frontier.extend(user.users)
            reached.add(segment.get(user.name, -1))
        out.append(ParamTensor(node.name, int(val.numel()), tuple(sorted(reached)) or (-1,),
                               node.name in split, bool(requires_grad.get(node.name, True)),
                               node.name in experts))
    return tuple(out)


def _is_param_view(node: torch.fx.Node) -> bool:
    return op_name(node.target) in PARAM_VIEWS and len(node.all_input_nodes) == 1


def _native_dtype(model: torch.nn.Module) -> torch.dtype:
    counts: dict[torch.dtype, int] = {}
    for p in model.parameters():
        if p.dtype.is_floating_point:
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return max(counts, key=counts.__getitem__) if counts else torch.float32
