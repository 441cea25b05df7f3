"""The step capture: one forward pass of ``tokens`` tokens sampling ``sampled`` of them, captured
once per shape (config, dtype, tokens, sampled) as ``estimate(compiled=True)`` captures a model
(capture -> records.extract -> compiled.fusion), then laid out as the serving engine runs it.

A serving engine flattens a step's sequences into one token dimension: its GEMMs and per-token
kernels see ``tokens × hidden`` whatever the sequences, so a decode step of batch B and a
prefill chunk of B tokens share one capture; only attention sees the sequences apart
(``llm.attention``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..capture.core import Captured, capture
from ..capture.hf_config import read_hf_config
from ..compiled.fusion import fuse_kernels
from ..hardware.dtypes import DTYPES
from ..records import GemmSite, OtherOp, extract
from ..records.types import FusedKernel, alignment_bytes
from .model import meta_model
from .schedule import TOKEN_BUDGET

__all__ = ["Step", "capture_records", "capture_step", "captured_step", "derive_steps",
           "serving_step", "step_family"]

_VIEWS = frozenset({"aten.view", "aten._unsafe_view", "aten.reshape", "aten.transpose",
                    "aten.permute", "aten.t", "aten.expand", "aten.alias"})
_COPIES = frozenset({"aten.clone", "aten.contiguous", "aten._to_copy", "aten.copy"})


@dataclass(frozen=True)
class Step:
    """One forward pass of ``tokens`` tokens sampling ``sampled`` of them, as records: GEMMs in
    the serving engine's layout, the other ops as ``torch.compile`` fuses them."""

    model_name: str
    sites: tuple[GemmSite, ...]
    others: tuple[OtherOp, ...]
    kernels: tuple[FusedKernel, ...]
    dropped: frozenset[int]  # positions in ``others`` a serving engine does not run
    module_types: Mapping[str, str]
    config: Mapping[str, int]
    lm_head: str
    experts: int


_DERIVE = [False]  # derive_steps' switch


def derive_steps(on: bool = True) -> bool:
    """Whether ``captured_step`` derives a step of two or more tokens from its model's four
    base captures (``step_family``, ``llm.affine``) instead of capturing each shape: what a
    sweep or a simulation of many shapes wants; a plan of a few shapes captures each. Returns
    the setting it replaces."""
    before, _DERIVE[0] = _DERIVE[0], on
    return before


@functools.lru_cache(maxsize=64)
def captured_step(key: str, dtype: str, tokens: int, sampled: int) -> Step:
    """The step of a config (``model.config_key``) in ``dtype``, captured once per shape (or
    derived, see ``derive_steps``)."""
    if _DERIVE[0] and tokens >= 2:
        return step_family(key, dtype).of(tokens, sampled)
    return capture_records(key, dtype, tokens, sampled)


@functools.lru_cache(maxsize=8)
def step_family(key: str, dtype: str, max_tokens: int = TOKEN_BUDGET) -> Any:
    """A config's steps at every shape (``llm.affine.StepFamily``): derived up to
    ``max_tokens`` where its base captures allow, else captured shape by shape."""
    from .affine import StepFamily

    return StepFamily(lambda t, s: capture_records(key, dtype, t, s), max_tokens)


def capture_records(key: str, dtype: str, tokens: int, sampled: int) -> Step:
    """The step of a config in ``dtype`` captured (no cache)."""
    model = meta_model(key, dtype)
    cd = DTYPES[dtype]
    captured = capture_step(model, tokens, sampled)
    sites, others = extract(captured, cd, mode="inference", native_dtype=cd.torch_dtype)
    others, kernels = fuse_kernels(captured, others, cd, mode="inference",
                                   native_dtype=cd.torch_dtype)
    return serving_step(model, captured, sites, others, kernels, tokens, sampled)


def capture_step(model: torch.nn.Module, tokens: int, sampled: int) -> Captured:
    """The forward pass of ``tokens`` tokens on the meta device, without a KV cache object,
    the logits of the last ``sampled`` only where the model can keep fewer."""
    ids = torch.ones(1, tokens, dtype=torch.long, device="meta")
    kwargs: dict[str, Any] = {"use_cache": False}
    if _keeps_logits(model):
        kwargs["logits_to_keep"] = sampled
    return capture(model, (ids,), kwargs)


def serving_step(model: torch.nn.Module, captured: Captured, sites: Sequence[GemmSite],
                 others: Sequence[OtherOp], kernels: Sequence[FusedKernel], tokens: int,
                 sampled: int) -> Step:
    """A step's records (``extract`` and ``fuse_kernels`` of ``captured``) as the serving
    engine runs them: q/k/v and gate/up one GEMM each, a layer's rotary kernels one kernel, no
    copy of an attention output, the lm_head on the sampled tokens only."""
    get_head: Any = getattr(model, "get_output_embeddings", None)
    lm_head = _module_name(model, get_head() if get_head is not None else None)
    if not _keeps_logits(model):  # the lm_head of the sampled tokens only
        sites = tuple(_rows(s, sampled) if s.module == lm_head and s.m == tokens else s
                      for s in sites)
    nodes = {n.name: n for n in captured.graph_module.graph.nodes}
    return Step(
        model_name=captured.model_name, sites=_serving_sites(sites, nodes),
        others=tuple(others), kernels=_serving_kernels(kernels),
        dropped=_attention_output_copies(others, nodes), module_types=captured.module_types,
        config=captured.config, lm_head=lm_head,
        experts=read_hf_config(getattr(model, "config", None)).num_experts)


def _keeps_logits(model: torch.nn.Module) -> bool:
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def _module_name(model: torch.nn.Module, module: torch.nn.Module | None) -> str:
    for name, m in model.named_modules():
        if m is module:
            return name
    return ""


def _rows(site: GemmSite, m: int) -> GemmSite:
    """``site`` on ``m`` rows of A (its FLOPs and compulsory bytes recounted)."""
    ab = DTYPES[site.dtype].in_bytes
    ob = DTYPES[site.out_dtype].in_bytes
    per_row = site.batch * site.k * ab + site.batch * site.n * ob
    return replace(site, m=m, flops=2 * site.batch * m * site.n * site.k,
                   dram_bytes=site.dram_bytes - (site.m - m) * per_row)


def _serving_sites(sites: Sequence[GemmSite], nodes: Mapping[str, Any]) -> tuple[GemmSite, ...]:
    """The GEMMs as a serving engine runs them: Linear layers that read one input (q/k/v,
    gate/up) are one GEMM of their outputs side by side, as vLLM's ``QKVParallelLinear`` and
    ``MergedColumnParallelLinear`` hold them."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, s in enumerate(sites):
        node = nodes.get(s.node)
        if s.op != "linear" or s.phase != "forward" or node is None or not node.args:
            continue
        source = node.args[0]
        if isinstance(source, torch.fx.Node):
            groups.setdefault((source.name, s.batch, s.m, s.k, s.dtype, s.bias), []).append(i)
    merged: dict[int, GemmSite] = {}
    gone: set[int] = set()
    for idx in groups.values():
        if len(idx) > 1:
            merged[idx[0]] = _merged([sites[i] for i in idx])
            gone.update(idx[1:])
    return tuple(merged.get(i, s) for i, s in enumerate(sites) if i not in gone)


def _merged(parts: Sequence[GemmSite]) -> GemmSite:
    first = parts[0]
    parent, _, _ = first.module.rpartition(".")
    names = "+".join(p.module.rpartition(".")[2] for p in parts)
    n = sum(p.n for p in parts)
    a_bytes = first.batch * first.m * first.k * DTYPES[first.dtype].in_bytes  # read once
    return replace(first, module=f"{parent}.{names}" if parent else names,
                   module_type="MergedLinear", n=n, flops=sum(p.flops for p in parts),
                   dram_bytes=sum(p.dram_bytes for p in parts) - (len(parts) - 1) * a_bytes,
                   c_align_bytes=alignment_bytes(n, DTYPES[first.out_dtype].in_bytes))


def _serving_kernels(kernels: Sequence[FusedKernel]) -> tuple[FusedKernel, ...]:
    """The kernels as a serving engine runs them: a layer's rotary embeddings of q and of k,
    two kernels where inductor fuses them (their element counts differ), are one kernel, as
    vLLM's ``rotary_embedding`` op rotates both in place in one launch
    (csrc/pos_encoding_kernels.cu) and as vidur timed it (``rope_fused``, cols = (heads +
    kv heads) · head_dim)."""
    out: list[FusedKernel] = []
    for k in kernels:
        last = out[-1] if out else None
        if (last is not None and k.op_class == last.op_class == "rope_fused"
                and k.phase == last.phase and last.launches == k.launches == 1):
            out[-1] = replace(last, name=f"{last.name}+{k.name}",
                              ops=tuple(sorted({*last.ops, *k.ops})),
                              dram_bytes=last.dram_bytes + k.dram_bytes)
        else:
            out.append(k)
    return tuple(out)


def _attention_output_copies(others: Sequence[OtherOp], nodes: Mapping[str, Any]
                             ) -> frozenset[int]:
    """The copies a model makes of an attention output through views only (HF's
    ``transpose(1, 2)`` then ``reshape``): FlashAttention writes the token-major layout the
    output projection reads, so a serving engine runs none."""
    targets: set[str] = set()
    for op in others:
        node = nodes.get(op.node)
        if op.attention is None or node is None:
            continue
        frontier = list(node.users)
        while frontier:
            user = frontier.pop()
            name = str(user.target).rsplit(".", 1)[0]
            if name in _VIEWS:
                frontier.extend(user.users)
            elif name in _COPIES:
                targets.add(user.name)
    return frozenset(i for i, op in enumerate(others)
                     if op.node in targets and op.op_class == "copy")
