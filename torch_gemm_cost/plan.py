"""LLM serving plans: time to first token, time per output token, throughput and memory fit of a
decoder-only model served as vLLM serves it, for each batch size.

    plan = plan_llm(config, device="h100_sxm5_80gb", dtype="bf16", prompt=2048, gen=256,
                    batches=[1, 8, 64])
    print(plan)                      # a row per batch: TTFT, TPOT, tokens/s, memory, rooflines
    plan.max_batch                   # the largest batch whose memory fits, by arithmetic
    print(plan.layer_table(8))       # the decode step of batch 8, layer by layer

A serving engine flattens a step's sequences into one token dimension: its GEMMs and per-token
kernels see ``tokens × hidden`` whatever the sequences, and only attention sees them apart. So
a step costs ``dense(tokens, sampled) + attention(its sequences) + all-reduces(tokens)``:

- ``dense``: the model captured once per distinct (tokens, sampled tokens) on the meta device,
  one GPU's shard of it (tensor parallelism shards the config), priced as ``torch.compile``
  fuses it (``gemms.fusion``) with the serving engine's layout (``_serving_sites``), its
  weights in the chosen format (``_quantized``), each kernel at its own GPU time;
- ``attention``: the fused-attention model (``predict.attention``) on each step's sequences,
  as vLLM's kernel for the device runs them, chunks of a prompt against their own context;
- ``all-reduces``: ``predict.collectives`` on the device's usual node.

A capture is reused across batch sizes, devices and weight formats: prefill steps of a full
token budget share one, decode steps of one batch share one at every context length. What the
plan assumes is in ``assumptions`` (printed with ``--assumptions``), with its sources.
"""

from __future__ import annotations

import copy
import difflib
import functools
import inspect
import json
import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from .capture import capture
from .datasheet import device_or_profile
from .devices import DeviceSpec, is_cpu
from .dtypes import DTYPES, ComputeDtype, resolve_dtype
from .gemms import GemmSite, OtherOp, extract
from .gemms.fusion import fuse_kernels
from .gemms.records import OP_LAYOUT, AttentionShape, FusedKernel, alignment_bytes, operand_leads
from .llm_report import LlmPlan, LlmPlanRow
from .predict import Predictor, default_predictor
from .predict.attention import AttentionBatch, AttentionCall, AttentionPredictor, vllm_kernel
from .predict.collectives import predict_collective_ms
from .predict.estimates import GemmEstimate, OpEstimate, estimate_gemms, estimate_ops
from .predict.ops import OpCostModel, load_op_costs
from .predict.profile import load_profile
from .predict.sdpa import runs_fused_attention
from .report import CostReport

__all__ = [
    "DECODE_POINTS",
    "GROUP_SIZE",
    "MEMORY_UTILIZATION",
    "TOKEN_BUDGET",
    "WEIGHT_BYTES",
    "WEIGHT_FORMATS",
    "activation_bytes_per_token",
    "decode_contexts",
    "kv_cache_bytes",
    "max_batch_fitting",
    "plan_llm",
    "prefill_steps",
]

log = logging.getLogger(__name__)

TOKEN_BUDGET = 8192  # tokens a forward pass holds (vLLM's max_num_batched_tokens)
MEMORY_UTILIZATION = 0.9  # vLLM's gpu_memory_utilization default
DECODE_POINTS = 5  # context lengths a plan prices decode attention at (Simpson's rule)
VOCAB_PADDING = 64  # vLLM pads the vocabulary to a multiple of this (VocabParallelEmbedding)
GROUP_SIZE = 128  # weights per quantization scale (GPTQ/AWQ's usual group)
WEIGHT_FORMATS: tuple[str, ...] = ("int8", "int4", "fp8")
# bytes per stored weight, its group's 16-bit scale included (GPTQ's symmetric format, which
# vLLM's Marlin and Machete kernels run; fp8 keeps one scale per tensor or channel)
WEIGHT_BYTES: dict[str, float] = {"int8": 1 + 2 / GROUP_SIZE, "int4": 0.5 + 2 / GROUP_SIZE,
                                  "fp8": 1.0}
FP8_DTYPE = "float8_e4m3fn"
LOGIT_BYTES = 4  # the sampler reads the logits in fp32
ATTENTION = "torch_gemm_cost_serving"  # the attention implementation the capture registers
_FLOOR_OP = "add"  # the fused op whose floor a kernel without constants of its own takes
_VIEWS = frozenset({"aten.view", "aten._unsafe_view", "aten.reshape", "aten.transpose",
                    "aten.permute", "aten.t", "aten.expand", "aten.alias"})
_COPIES = frozenset({"aten.clone", "aten.contiguous", "aten._to_copy", "aten.copy"})


# ---------------------------------------------------------------- the model's shape
@dataclass(frozen=True)
class _Shape:
    """What a plan reads from a causal LM's config (one GPU's shard of it, once sharded)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    experts: int  # 0 for a dense MLP
    top_k: int
    windows: tuple[int, ...]  # per layer: its sliding window, 0 for full attention
    max_positions: int | None

    @classmethod
    def of(cls, config: Any) -> _Shape:
        def get(*names: str, default: Any = None) -> Any:
            for name in names:
                value = getattr(config, name, None)
                if value is not None:
                    return value
            return default

        layers, hidden = get("num_hidden_layers", "n_layer"), get("hidden_size", "n_embd")
        heads = get("num_attention_heads", "n_head")
        vocab = get("vocab_size")
        if not all(isinstance(v, int) and v > 0 for v in (layers, hidden, heads, vocab)):
            raise ValueError(f"{type(config).__name__} lacks the sizes of a decoder-only LM "
                             "(num_hidden_layers, hidden_size, num_attention_heads, vocab_size)")
        head_dim = get("head_dim") or hidden // heads
        experts = int(get("num_local_experts", "num_experts", default=0) or 0)
        inter = get("moe_intermediate_size") if experts and get("moe_intermediate_size") else (
            get("intermediate_size", "n_inner") or 4 * hidden)
        window = get("sliding_window")
        use_window = getattr(config, "use_sliding_window", True) is not False
        kinds = getattr(config, "layer_types", None)
        if isinstance(kinds, (list, tuple)) and len(kinds) == layers:
            windows = tuple(int(window or 0) if k == "sliding_attention" else 0 for k in kinds)
        else:
            windows = (int(window) if isinstance(window, int) and use_window else 0,) * layers
        return cls(layers=layers, hidden=hidden, heads=heads,
                   kv_heads=int(get("num_key_value_heads", default=heads)),
                   head_dim=int(head_dim), intermediate=int(inter), vocab=vocab, experts=experts,
                   top_k=int(get("num_experts_per_tok", "moe_topk", default=0) or 0),
                   windows=windows, max_positions=get("max_position_embeddings", "n_positions"))


def padded_vocab(vocab: int) -> int:
    """The vocabulary as vLLM's ``VocabParallelEmbedding`` and ``ParallelLMHead`` hold it:
    padded to a multiple of 64, then split evenly over the tensor-parallel GPUs.

    >>> padded_vocab(50257), padded_vocab(128256)
    (50304, 128256)
    """
    return -(-vocab // VOCAB_PADDING) * VOCAB_PADDING


def _divisors_near(n: int, value: int) -> list[int]:
    good = [d for d in range(1, n + 1) if n % d == 0]
    return sorted(good, key=lambda d: (abs(d - value), d))[:2]


def shard_config(config: Any, tp: int) -> Any:
    """One GPU's config under tensor parallelism ``tp``, Megatron's way as vLLM shards it:
    attention heads split (column-parallel q/k/v, row-parallel o), KV heads split where ``tp``
    divides them and replicated, one a GPU, where ``tp`` is a multiple of them; the MLP's (each
    expert's) intermediate dim split (column-parallel gate/up, row-parallel down); the
    vocabulary padded to a multiple of 64 and split. Hidden size and layers stay."""
    shape = _Shape.of(config)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp must be a positive integer, got {tp!r}; nearest good: 1")
    if shape.heads % tp:
        raise ValueError(f"tp={tp} does not divide the {shape.heads} attention heads; nearest "
                         f"good tp: {' or '.join(map(str, _divisors_near(shape.heads, tp)))}")
    if shape.kv_heads % tp and tp % shape.kv_heads:
        raise ValueError(f"tp={tp} neither divides nor is a multiple of the {shape.kv_heads} KV "
                         f"heads; nearest good tp: "
                         f"{' or '.join(map(str, _divisors_near(shape.kv_heads, tp)))}")
    if shape.intermediate % tp:
        raise ValueError(f"tp={tp} does not divide the MLP's intermediate size "
                         f"{shape.intermediate}; nearest good tp: "
                         f"{' or '.join(map(str, _divisors_near(shape.intermediate, tp)))}")
    if tp > 1 and not any(isinstance(getattr(config, name, None), int) for name in (
            "intermediate_size", "moe_intermediate_size")):
        raise ValueError(f"tp={tp} needs a config that names its MLP width "
                         f"(intermediate_size, as Llama-style models do); "
                         f"{type(config).__name__} does not: use tp=1")
    out = copy.deepcopy(config)
    out.num_attention_heads = shape.heads // tp
    if hasattr(config, "num_key_value_heads"):
        out.num_key_value_heads = max(shape.kv_heads // tp, 1)
    out.head_dim = shape.head_dim
    for name in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value % tp == 0:
            setattr(out, name, value // tp)
    out.vocab_size = -(-padded_vocab(shape.vocab) // tp)
    if tp > 1:  # token ids index the whole vocabulary, not one GPU's shard of it
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if hasattr(out, name):
                setattr(out, name, None)
    return out


# ---------------------------------------------------------------- the captured model
def _serving_attention(module: Any, query: torch.Tensor, key: torch.Tensor,
                       value: torch.Tensor, attention_mask: Any, dropout: float = 0.0,
                       scaling: float | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attention as a serving engine calls it: one fused kernel on the KV heads as they are
    (GQA without repeating K and V), causal, no mask tensor; its output in the token-major
    layout the output projection reads."""
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, is_causal=query.shape[2] > 1, scale=scaling,
        enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2), None


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None


@functools.lru_cache(maxsize=1)
def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION, _serving_attention)
    AttentionMaskInterface.register(ATTENTION, _no_mask)


def config_of(model_or_config: Any) -> Any:
    """An HF config (a copy) from a config, a model holding one, a dict with ``model_type`` or
    the path of a config JSON (or of a directory holding ``config.json``)."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(model_or_config, PretrainedConfig):
        return copy.deepcopy(model_or_config)
    if isinstance(model_or_config, torch.nn.Module):
        cfg = getattr(model_or_config, "config", None)
        if isinstance(cfg, PretrainedConfig):
            return copy.deepcopy(cfg)
        raise TypeError(f"{type(model_or_config).__name__} carries no HF config; pass the "
                        "config (or a config JSON) of a causal LM instead")
    if isinstance(model_or_config, (str, os.PathLike)):
        path = Path(model_or_config)
        path = path / "config.json" if path.is_dir() else path
        if not path.is_file():
            raise FileNotFoundError(f"config {str(model_or_config)!r}: no such file")
        try:
            model_or_config = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"config {path}: not valid JSON ({e.msg} at line {e.lineno})"
                             ) from e
    if not isinstance(model_or_config, Mapping):
        raise TypeError("model_or_config must be an HF config, a model with one, a dict or a "
                        f"config JSON path, got {type(model_or_config).__name__}")
    raw = dict(model_or_config)
    model_type = raw.pop("model_type", None)
    if not isinstance(model_type, str):
        raise TypeError('the config needs a "model_type" field, e.g. "llama"')
    raw.pop("transformers_version", None)
    try:
        return AutoConfig.for_model(model_type, **raw)
    except ValueError as e:
        raise ValueError(f"unknown model_type {model_type!r}: {str(e).splitlines()[0]}") from e


def _config_key(config: Any) -> str:
    return json.dumps(config.to_dict(), sort_keys=True, default=str)


@functools.lru_cache(maxsize=8)
def _model(key: str, dtype: str) -> torch.nn.Module:
    """The causal LM of a config (``_config_key``) on the meta device, serving attention."""
    from transformers import AutoModelForCausalLM

    _register_attention()
    config = config_of(json.loads(key))
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTENTION,
                                                     dtype=DTYPES[dtype].torch_dtype)
        except ValueError as e:
            raise ValueError(f"{type(config).__name__} does not build a causal LM: "
                             f"{str(e).splitlines()[0]}") from e
    return model.eval()


def _module_name(model: torch.nn.Module, module: torch.nn.Module | None) -> str:
    for name, m in model.named_modules():
        if m is module:
            return name
    return ""


@dataclass(frozen=True)
class _Step:
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


@functools.lru_cache(maxsize=64)
def _captured_step(key: str, dtype: str, tokens: int, sampled: int) -> _Step:
    model: Any = _model(key, dtype)
    cd = DTYPES[dtype]
    ids = torch.ones(1, tokens, dtype=torch.long, device="meta")
    kwargs: dict[str, Any] = {"use_cache": False}
    keeps = "logits_to_keep" in inspect.signature(model.forward).parameters
    if keeps:
        kwargs["logits_to_keep"] = sampled
    captured = capture(model, (ids,), kwargs)
    sites, others = extract(captured, cd, mode="inference", native_dtype=cd.torch_dtype)
    others, kernels = fuse_kernels(captured, others, cd, mode="inference",
                                   native_dtype=cd.torch_dtype)
    lm_head = _module_name(model, model.get_output_embeddings())
    if not keeps:  # the lm_head of the sampled tokens only
        sites = tuple(_rows(s, sampled) if s.module == lm_head and s.m == tokens else s
                      for s in sites)
    nodes = {n.name: n for n in captured.graph_module.graph.nodes}
    return _Step(
        model_name=captured.model_name, sites=_serving_sites(sites, nodes), others=others,
        kernels=_serving_kernels(kernels), dropped=_attention_output_copies(others, nodes),
        module_types=captured.module_types, config=captured.config, lm_head=lm_head,
        experts=_Shape.of(model.config).experts)


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


# ---------------------------------------------------------------- weights
def _is_weight_gemm(site: GemmSite, step: _Step) -> bool:
    """A forward GEMM whose B is a quantizable weight: the decoder's Linear layers and experts,
    not the lm_head nor an MoE router (vLLM keeps both unquantized)."""
    if site.phase != "forward" or site.op not in ("linear", "addmm", "conv1d", "grouped_mm"):
        return False
    if site.module == step.lm_head:
        return False
    return not (step.experts and site.op != "grouped_mm" and site.n == step.experts)


def _quantized(site: GemmSite, fmt: str | None) -> GemmSite:
    """``site`` with its weight in ``fmt``: int8/int4 stored narrow with group scales and
    dequantized in the main loop (the GEMM stays in the activations' dtype); fp8 weights and
    activations on fp8 tensor cores, the input cast by a kernel of its own."""
    if fmt is None:
        return site
    in_b = DTYPES[site.dtype].in_bytes
    weight = site.batch * site.k * site.n
    if fmt in ("int8", "int4"):
        b = WEIGHT_BYTES[fmt]
        return replace(site, b_bytes=b, dram_bytes=round(site.dram_bytes - weight * (in_b - b)))
    fp8 = DTYPES[FP8_DTYPE]
    a_align, b_align = site.a_align_bytes, site.b_align_bytes
    if site.op in OP_LAYOUT:
        dims = (site.m, site.n, site.k)
        a_lead, b_lead, _ = operand_leads(site.op)
        a_align = alignment_bytes(dims[a_lead], fp8.in_bytes)
        b_align = alignment_bytes(dims[b_lead], fp8.in_bytes)
    activations = site.batch * site.m * site.k
    return replace(site, dtype=FP8_DTYPE, a_align_bytes=a_align, b_align_bytes=b_align,
                   dram_bytes=site.dram_bytes - (activations + weight) * (in_b - fp8.in_bytes),
                   quantized_elements=activations)


def _weights_bytes(model: Any, experts: int, fmt: str | None) -> int:
    """One GPU's weights: the decoder's Linear layers and experts in ``fmt`` (group scales
    included), everything else (embedding, lm_head, norms, router) in its own dtype."""
    lm_head = model.get_output_embeddings()
    embeddings = {id(m.weight) for m in model.modules()
                  if isinstance(m, torch.nn.Embedding)} | (
        {id(lm_head.weight)} if lm_head is not None else set())
    total = 0.0
    for p in model.parameters():
        own = p.numel() * p.element_size()
        router = experts and p.dim() == 2 and p.shape[0] == experts
        if fmt is None or p.dim() < 2 or id(p) in embeddings or router:
            total += own
        else:
            total += p.numel() * WEIGHT_BYTES[fmt]
    return round(total)


# ---------------------------------------------------------------- a priced step
@dataclass(frozen=True)
class _Priced:
    """A step's dense part on a device: every GEMM and kernel but attention."""

    gemms: tuple[GemmEstimate, ...]
    ops: tuple[OpEstimate, ...]  # the dense ops, then each layer's attention op (time 0)
    dense_ms: float
    flops: float  # of the dense GEMMs
    roofline_ms: float  # their FLOPs over each dtype's dense peak
    weight_read_bytes: float  # B operands of the dense GEMMs at their stored size


def _pnorm(a: float, b: float, p: float) -> float:
    hi = max(a, b)
    return 0.0 if hi <= 0 else hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


def _kernel_floors(ops: Sequence[OpEstimate], kernels: Sequence[FusedKernel],
                   costs: OpCostModel) -> list[float | None]:
    """Each op's time when its kernel runs inside a CUDA graph (decode) or behind a host that
    runs ahead (prefill): the kernel's own GPU time, at least its floor (the shortest a vidur
    kernel of its fused op ran, joined by the op model's soft maximum), no launch gap. ``ops``
    are priced with no launch cost."""
    times = [o.time_ms for o in ops]
    default = costs.fused[_FLOOR_OP].floor_ms if _FLOOR_OP in costs.fused else costs.launch_ms
    inside: set[int] = set()
    for k in kernels:
        inside.update(k.ops)
        members = [i for i in k.ops if times[i] is not None]
        if k.launches == 0 or not members:
            continue
        cost = costs.fused.get(k.op_class)
        floor = cost.floor_ms if cost is not None else default
        alone = sum(times[i] or 0.0 for i in members)
        each = _pnorm(alone / k.launches, floor, costs.roof_p) * k.launches
        for i in members:
            share = (times[i] or 0.0) / alone if alone else 1.0 / len(members)
            times[i] = each * share
    for i, o in enumerate(ops):
        t = times[i]
        if i not in inside and t and o.op.attention is None:
            times[i] = _pnorm(t, default, costs.roof_p)
    return times


def _kv_writes(step: _Step, kv: ComputeDtype) -> tuple[OtherOp, ...]:
    """Each layer's KV-cache write (vLLM's ``reshape_and_cache_flash``): the step's new K and V
    rows read and written into the cache in its dtype, one copy kernel."""
    out = []
    for op in step.others:
        a = op.attention
        if a is None:
            continue
        elements = 2 * a.batch * a.q_len * a.kv_heads * a.head_dim
        out.append(OtherOp(
            module=op.module, module_type=op.module_type, op="reshape_and_cache",
            node=f"{op.node}.kv_write", phase="forward", op_class="copy", dtype=op.dtype,
            numel=elements, dram_bytes=elements * (DTYPES[op.dtype].in_bytes + kv.in_bytes)))
    return tuple(out)


def _price(step: _Step, spec: DeviceSpec, predictor: Predictor, fmt: str | None,
           kv: ComputeDtype, costs: OpCostModel) -> _Priced:
    sites = tuple(_quantized(s, fmt) if _is_weight_gemm(s, step) else s for s in step.sites)
    dense_sites = tuple(s for s in sites if s.op not in ("sdpa_qk", "sdpa_pv"))
    gemms = estimate_gemms(dense_sites, spec, predictor)
    others = (*step.others, *_kv_writes(step, kv))
    priced = estimate_ops(others, spec, replace(costs, launch_ms=0.0), kernels=step.kernels)
    times = _kernel_floors(priced, step.kernels, costs)
    ops = []
    for i, (o, t) in enumerate(zip(priced, times)):
        if i in step.dropped:
            continue
        ops.append(OpEstimate(o.op, 0.0 if o.op.attention is not None else t, o.kernel))
    unmodelled = sorted({o.op.op for o in ops if o.time_ms is None})
    if unmodelled:
        log.warning("%s: ops with no cost model are left out of the plan: %s",
                    step.model_name, ", ".join(unmodelled))
    dense_ms = sum(g.time_ms for g in gemms) + sum(o.time_ms or 0.0 for o in ops)
    return _Priced(
        gemms=gemms, ops=tuple(ops), dense_ms=dense_ms,
        flops=float(sum(s.flops for s in dense_sites)),
        roofline_ms=sum(s.flops / spec.peak_flops_per_s(s.dtype) for s in dense_sites) * 1e3,
        weight_read_bytes=float(sum(
            s.batch * s.k * s.n * (DTYPES[s.dtype].in_bytes if s.b_bytes is None else s.b_bytes)
            for s in dense_sites)))


# ---------------------------------------------------------------- the arithmetic
def prefill_steps(batch: int, prompt: int, budget: int) -> Counter[tuple[int, int, tuple[
        tuple[int, int], ...]]]:
    """The forward passes that prefill ``batch`` prompts of ``prompt`` tokens under a token
    budget, sequence after sequence, a prompt split where a pass fills: (tokens, sequences that
    finish their prompt in it, ((chunk tokens, context after the chunk), ...)) -> how many.

    >>> dict(prefill_steps(3, 3000, 8192))
    {(8192, 2, ((3000, 3000), (3000, 3000), (2192, 2192))): 1, (808, 1, ((808, 3000),)): 1}
    """
    steps: Counter[tuple[int, int, tuple[tuple[int, int], ...]]] = Counter()
    seq, done = 0, 0
    while seq < batch:
        room, finished, chunks = budget, 0, []
        while room > 0 and seq < batch:
            take = min(room, prompt - done)
            done += take
            room -= take
            chunks.append((take, done))
            if done == prompt:
                seq, done, finished = seq + 1, 0, finished + 1
        steps[(budget - room, finished, tuple(chunks))] += 1
    return steps


def decode_contexts(prompt: int, gen: int, points: int = DECODE_POINTS
                    ) -> list[tuple[int, float]]:
    """(KV length, weight) pairs whose weighted sum averages a decode cost over the ``gen - 1``
    steps after the first token, at KV lengths prompt + 1 .. prompt + gen − 1: each step when
    there are at most ``points``, else Simpson's rule on ``points`` (odd) lengths.

    >>> decode_contexts(2048, 3)
    [(2049, 0.5), (2050, 0.5)]
    >>> [(c, round(w, 4)) for c, w in decode_contexts(2048, 257)]
    [(2049, 0.0833), (2113, 0.3333), (2176, 0.1667), (2240, 0.3333), (2304, 0.0833)]
    """
    steps = gen - 1
    if steps <= points:
        return [(prompt + t, 1.0 / steps) for t in range(1, steps + 1)]
    lo, hi = prompt + 1, prompt + steps
    intervals = points - 1 if points % 2 else points - 2
    coef = [1.0] + [4.0 if i % 2 else 2.0 for i in range(1, intervals)] + [1.0]
    total = 3.0 * intervals  # Σ coef = 3·intervals for composite Simpson
    return [(round(lo + (hi - lo) * i / intervals), c / total) for i, c in enumerate(coef)]


def kv_cache_bytes(windows: Sequence[int], kv_heads: int, head_dim: int, tokens: int,
                   batch: int, kv_bytes: float) -> int:
    """2 (K and V) · kv_heads · head_dim · tokens · batch · bytes, summed over the layers; a
    sliding-window layer holds its window.

    >>> kv_cache_bytes([0] * 32, 8, 128, 2304, 1, 2)   # Llama-3-8B, 2048 + 256 tokens, bf16
    301989888
    """
    per_token = sum(min(tokens, w) if w else tokens for w in windows)
    return round(2 * kv_heads * head_dim * per_token * batch * kv_bytes)


def activation_bytes_per_token(shape: _Shape, act_bytes: int) -> int:
    """The live activations a token keeps in the costlier half of one decoder layer: the
    residual stream and its normed copy, with either the fused QKV output and the attention
    output, or the MLP's gate/up output and its activation (top-k copies in an MoE).

    >>> s = _Shape(32, 4096, 32, 8, 128, 14336, 128256, 0, 0, (0,) * 32, 8192)
    >>> activation_bytes_per_token(s, 2)   # 2·(2·4096 + max(6144 + 4096, 3·14336))
    102400
    """
    attention = (shape.heads + 2 * shape.kv_heads) * shape.head_dim + shape.heads * shape.head_dim
    mlp = 3 * shape.intermediate * max(shape.top_k, 1)
    return act_bytes * (2 * shape.hidden + max(attention, mlp))


def max_batch_fitting(usable_bytes: float, weights_bytes: int, fixed_bytes: int,
                      per_sequence_bytes: int, cap: int) -> int:
    """The largest batch b ≤ ``cap`` with weights + fixed + b · per_sequence ≤ usable; 0 when
    not even one fits.

    >>> max_batch_fitting(21.6e9, 16_060_522_496, 838_860_800, 302_502_912, 8192)
    15
    """
    room = usable_bytes - weights_bytes - fixed_bytes
    return max(0, min(cap, math.floor(room / per_sequence_bytes)))


# ---------------------------------------------------------------- checks at the boundary
def _check_device(device: Any) -> tuple[DeviceSpec, Predictor | None]:
    """The device's spec, and the predictor a calibration profile brings (None otherwise)."""
    found = device_or_profile(device)
    spec, own = (found, None) if isinstance(found, DeviceSpec) else load_profile(found)
    if is_cpu(spec) or not runs_fused_attention(spec):
        raise ValueError(f"device {spec.id!r} is no GPU the attention model prices; plan on a "
                         "catalog GPU, e.g. 'h100_sxm5_80gb'")
    if not spec.mem_bytes:
        raise ValueError(f"device {spec.id!r} has no memory size in the catalog; a plan needs "
                         "it to fit weights and KV cache")
    return spec, own


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        near = max(low, int(value)) if isinstance(value, (int, float)) and math.isfinite(
            value) else low
        raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}; "
                         f"nearest good: {near}")
    return value


def _check_choice(name: str, value: str, good: Sequence[str]) -> str:
    if value in good:
        return value
    close = difflib.get_close_matches(str(value), list(good), n=1, cutoff=0.0)
    raise ValueError(f"{name} must be one of {', '.join(map(repr, good))}, got {value!r}; "
                     f"nearest: {close[0]!r}")


def _serving_dtype(dtype: Any, config: Any) -> ComputeDtype:
    """The activations' dtype; None as vLLM's ``--dtype auto``: bf16 for a bf16 checkpoint,
    fp16 for an fp16 or fp32 one, bf16 where the config names none."""
    if dtype is None:
        own = getattr(config, "dtype", None)
        dtype = "bf16" if own is None or resolve_dtype(own).name == "bfloat16" else "fp16"
    cd = resolve_dtype(dtype)
    if cd.name not in ("bfloat16", "float16"):
        raise ValueError(f"dtype {cd.name!r}: serving runs 16-bit activations; use 'bf16' or "
                         "'fp16' (and weights='fp8' or 'int4' for narrower weights)")
    return cd


def _check_weights(weights: Any, spec: DeviceSpec, cd: ComputeDtype) -> str | None:
    if weights is None:
        return None
    if not isinstance(weights, str):
        raise TypeError(f"weights must be None or a name, got {type(weights).__name__}")
    if weights in ("bf16", "fp16", "bfloat16", "float16") and resolve_dtype(weights) == cd:
        return None
    fmt = "fp8" if weights in ("fp8", FP8_DTYPE, "e4m3") else weights
    fmt = _check_choice("weights", fmt, WEIGHT_FORMATS)
    if fmt == "fp8" and not spec.supports(FP8_DTYPE):
        have = [k for k, v in spec.peak_flops if v is not None]
        raise ValueError(f"weights='fp8' needs fp8 tensor cores; {spec.id} ({spec.name}) "
                         f"supports {', '.join(have)}: use weights='int8' or 'int4'")
    if fmt in ("int8", "int4"):
        major = spec.compute_capability.split(".")[0]
        if spec.vendor != "NVIDIA" or not major.isdigit() or int(major) < 8:
            raise ValueError(f"weights={fmt!r} runs on Marlin/Machete kernels, which need an "
                             f"NVIDIA GPU of compute capability 8.0 or newer; {spec.id} is "
                             f"{spec.vendor} {spec.compute_capability}: use weights=None")
    return fmt


def _kv_dtype(kv_dtype: Any, cd: ComputeDtype) -> ComputeDtype:
    if kv_dtype is None:
        return cd
    kv = resolve_dtype(kv_dtype)
    if kv.name not in (cd.name, FP8_DTYPE):
        raise ValueError(f"kv_dtype {kv.name!r}: the KV cache is stored in the activations' "
                         f"dtype ({cd.name}) or in fp8; nearest: 'fp8'")
    return kv


def _check_batches(batches: Any, budget: int) -> tuple[int, ...]:
    values = [batches] if isinstance(batches, int) else list(batches)
    if not values:
        raise ValueError("batches is empty; give at least one batch size, e.g. [1, 8, 64]")
    out = []
    for b in values:
        _check_int("each batch size", b, 1)
        if b > budget:
            raise ValueError(f"batch {b} exceeds the token budget {budget}: a decode step runs "
                             f"one token of every sequence; raise token_budget to at least {b}"
                             f" or use batch {budget}")
        out.append(b)
    return tuple(sorted(set(out)))


# ---------------------------------------------------------------- the plan
def assumptions(tp: int, fmt: str | None, kernel: str, budget: int, utilization: float
                ) -> tuple[str, ...]:
    """What a plan assumes, with its sources, in the order the plan prints them."""
    out = [
        ("Engine: vLLM's V1 engine. The batch's requests arrive together; their prompts are "
        f"prefilled first, in forward passes of at most {budget} tokens (chunked prefill, "
        "max_num_batched_tokens: 8192 is vLLM's default for its OpenAI server on H100-class "
        "GPUs, vllm/engine/arg_utils.py), then decoded together, one token per sequence a step."),
        ("TTFT is the last request's first token: every prefill step. TPOT averages the gen - 1 "
        "decode steps after it, as vLLM's benchmark_serving defines it ((latency - TTFT) / "
        "(output tokens - 1)); decode attention is priced at "
        f"{DECODE_POINTS} KV lengths from prompt + 1 to prompt + gen - 1 and integrated by "
        "Simpson's rule."),
        ("Kernels: the model as torch.compile (inductor) fuses it, the residual add with "
        "RMSNorm, SiLU with mul, the rotary embedding of q and k in one kernel (vLLM's "
        "rotary_embedding op), priced with the fused-op constants fitted on vLLM's kernels "
        "(vidur); q/k/v and gate/up, which read one input, as one GEMM "
        "each (vLLM's QKVParallelLinear, MergedColumnParallelLinear); one KV-cache write kernel "
        "a layer (reshape_and_cache_flash); no copy of the attention output (FlashAttention "
        "writes the token-major layout o_proj reads); the lm_head on the sampled tokens only."),
        (f"Attention: {kernel}, the kernel vLLM runs on this device for this head size and KV "
        "dtype, priced by the fused-attention model (fitted on vLLM's kernels, each GPU held "
        "out: benchmarks/results/attention.md) with a cold L2; a prefill step's chunks against "
        "their own context (varlen). FlashAttention 3's varlen schedule is planned once a "
        "step by vLLM's metadata builder (aot_schedule, get_scheduler_metadata), not in each "
        "layer's call; that one small kernel a step is not priced."),
        ("CUDA graphs in decode (vLLM's default, docs.vllm.ai Optimization and Tuning) and a "
        "host that runs ahead in prefill: each kernel costs its own GPU time, at least its "
        "floor, with no launch gaps."),
    ]
    if fmt in ("int8", "int4"):
        out.append(
            f"Weights: {fmt} in GPTQ's symmetric format, groups of {GROUP_SIZE} with one 16-bit "
            f"scale each ({WEIGHT_BYTES[fmt]:.4f} bytes a weight), dequantized in the GEMM's "
            "main loop (Marlin on Ampere/Ada, Machete on Hopper, as vLLM picks them), the "
            "activations run in 16-row MMA steps. Marlin publishes near-ideal ~4x speedups "
            "over fp16 up to batches of 16-32 tokens (github.com/IST-DASLab/marlin); Machete "
            "matches fp16 when compute-bound (vLLM csrc/quantization/machete, Neural Magic "
            "2024). Embedding, lm_head, norms and MoE router stay in the activations' dtype.")
    elif fmt == "fp8":
        out.append(
            "Weights: fp8 (e4m3) weights and activations on fp8 tensor cores, one scale per "
            "tensor; each Linear's bf16 input cast to fp8 by a kernel of its own, as vLLM's "
            "Fp8LinearMethod does with a static scale (the GEMM predictor's cast term). "
            "Embedding, lm_head, norms and MoE router stay in the activations' dtype.")
    if tp > 1:
        out.append(
            f"Tensor parallelism {tp}, Megatron's sharding as vLLM does it: column-parallel "
            "q/k/v and gate/up, row-parallel o and down, attention heads split, KV heads split "
            "where tp divides them and replicated (one a GPU) where tp is a multiple of them, "
            "the vocabulary padded to a multiple of 64 and split. Each step runs 2 all-reduces "
            "a layer of tokens x hidden x 2 bytes, one after the embedding, and an all-gather "
            "of the sampled tokens' logits, priced by predict_collective_ms as NCCL on the "
            "device's usual node. vLLM's custom all-reduce (small messages over NVLink) is "
            "faster than NCCL there and is not modelled.")
    out.append(
        f"Memory: usable = {utilization:g} x the device's memory (vLLM's "
        "gpu_memory_utilization, default 0.9, docs.vllm.ai engine arguments). KV cache: 2 x "
        "layers x kv_heads x head_dim x (prompt + gen) x batch x bytes (a sliding-window layer "
        "holds its window; vLLM's 16-token blocks not rounded up). Activations: a forward of "
        "the token budget, as vLLM's profiling run reserves it: what one token keeps live in "
        "the costlier half of a decoder layer (the residual stream and its normed copy, then "
        "QKV and the attention output, or the MLP's gate/up output and its activation, top-k "
        "copies in an MoE), plus the batch's logits in fp32. CUDA-graph pools, NCCL buffers "
        "and the CUDA context are left to the reserve; max_batch is at most the token budget.")
    out.append("Not priced: sampling (one reduction over the logits a step), the host's "
               "scheduler and detokenizer, preemption.")
    return tuple(out)


def plan_llm(
    model_or_config: Any,
    *,
    device: str | DeviceSpec,
    dtype: str | torch.dtype | None = None,
    prompt: int,
    gen: int,
    batches: Iterable[int] | int,
    tp: int = 1,
    weights: str | None = None,
    kv_dtype: str | None = None,
    token_budget: int = TOKEN_BUDGET,
    memory_utilization: float = MEMORY_UTILIZATION,
    predictor: Predictor | None = None,
) -> LlmPlan:
    """A serving plan of a causal LM on ``device`` for each batch size of ``batches``.

    ``model_or_config``: an HF config, a model holding one, a config dict or a config JSON's
    path; the model is built on the meta device, nothing is downloaded. ``dtype``: the
    activations' (bf16 or fp16; None: the config's, else bf16). ``prompt`` and ``gen``: tokens
    in and out per request. ``tp``: tensor-parallel GPUs (the device's usual node). ``weights``:
    None (the dtype), ``"int8"``, ``"int4"`` (weight-only) or ``"fp8"`` (weights and
    activations, on a device with fp8 tensor cores). ``kv_dtype``: None (the dtype) or
    ``"fp8"``. ``token_budget``: tokens a forward pass holds; ``memory_utilization``: the share
    of the GPU's memory the engine uses. ``predictor``: the GEMM predictor (the default hybrid).
    """
    spec, own = _check_device(device)
    config = config_of(model_or_config)
    cd = _serving_dtype(dtype, config)
    fmt = _check_weights(weights, spec, cd)
    kv = _kv_dtype(kv_dtype, cd)
    full = _Shape.of(config)
    sizes = _check_serving(full, prompt, gen, batches, token_budget, memory_utilization)
    gpu_config = shard_config(config, tp)
    if tp > 1:  # fail before any capture if the node cannot hold the tensor-parallel group
        try:
            predict_collective_ms(spec, "all_reduce", size_bytes=2.0, num_gpus=tp)
        except ValueError as e:
            raise ValueError(f"tp={tp} on {spec.id}: {e}") from e
    key = _config_key(gpu_config)
    model = _model(key, cd.name)
    pricer = _StepPricer(key, spec, cd, kv, fmt, tp, full, _Shape.of(gpu_config),
                         predictor or own or default_predictor())
    shape = pricer.shape
    weights_bytes = _weights_bytes(model, full.experts, fmt)
    vocab = padded_vocab(full.vocab)
    kv_seq = kv_cache_bytes(shape.windows, shape.kv_heads, shape.head_dim, prompt + gen, 1,
                            kv.in_bytes)
    fixed = token_budget * activation_bytes_per_token(shape, cd.in_bytes)
    usable = memory_utilization * float(spec.mem_bytes or 0.0)
    mid = prompt + gen // 2
    rows, reports = [], []
    for b in sizes:
        pre = pricer.prefill(b, prompt, token_budget)
        step, p = pricer.dense(b, b)
        attn_dec = sum(w * pricer.attention.decode(b, ctx)[0]
                       for ctx, w in decode_contexts(prompt, gen))
        comm_dec = pricer.comm_ms(b, b)
        tpot = p.dense_ms + attn_dec + comm_dec
        request = pre.ttft_ms + (gen - 1) * tpot
        kv_bytes = kv_seq * b
        act = fixed + b * vocab * LOGIT_BYTES
        decode_bytes = p.weight_read_bytes + kv_cache_bytes(
            shape.windows, shape.kv_heads, shape.head_dim, mid, b, kv.in_bytes)
        rows.append(LlmPlanRow(
            batch=b, ttft_ms=pre.ttft_ms, tpot_ms=tpot, tokens_per_s=b * gen / request * 1e3,
            request_ms=request, weights_bytes=weights_bytes, kv_cache_bytes=kv_bytes,
            activation_bytes=act, fits=weights_bytes + kv_bytes + act <= usable,
            prefill_steps=pre.steps, prefill_attention_ms=pre.attention_ms,
            prefill_comm_ms=pre.comm_ms, decode_attention_ms=attn_dec, decode_comm_ms=comm_dec,
            prefill_flops=pre.flops, decode_bytes=decode_bytes,
            roofline_ttft_ms=pre.roofline_ms,
            roofline_tpot_ms=decode_bytes / spec.dram_bw_bytes_per_s * 1e3))
        reports.append(_decode_report(step, p, spec, pricer.predictor, cd, pricer.attention, b,
                                      mid))
    return LlmPlan(
        model=type(model).__name__, device=spec, dtype=cd.name,
        weights=fmt or cd.name, kv_dtype=kv.name, tp=tp, prompt=prompt, gen=gen,
        token_budget=token_budget, memory_utilization=float(memory_utilization),
        usable_bytes=usable,
        max_batch=max_batch_fitting(usable, weights_bytes, fixed, kv_seq + vocab * LOGIT_BYTES,
                                    token_budget),
        rows=tuple(rows), attention_kernel=pricer.attention.kernel,
        predictor=f"{getattr(pricer.predictor, 'name', type(pricer.predictor).__name__)} "
                  f"v{getattr(pricer.predictor, 'version', '')}",
        assumptions=assumptions(tp, fmt, pricer.attention.kernel, token_budget,
                                memory_utilization),
        decode_reports=tuple(reports))


def _check_serving(full: _Shape, prompt: int, gen: int, batches: Iterable[int] | int,
                   token_budget: int, memory_utilization: float) -> tuple[int, ...]:
    """The request sizes, the token budget and the memory share checked (each bad value named
    with the nearest good one); the batch sizes to plan."""
    _check_int("prompt", prompt, 1)
    _check_int("gen", gen, 2)
    _check_int("token_budget", token_budget, 1)
    if isinstance(memory_utilization, bool) or not isinstance(memory_utilization, (int, float)) \
            or not 0 < memory_utilization <= 1:
        raise ValueError(f"memory_utilization must be in (0, 1], got {memory_utilization!r}; "
                         f"nearest good: {MEMORY_UTILIZATION}")
    sizes = _check_batches(batches, token_budget)
    if full.max_positions and prompt + gen > full.max_positions:
        raise ValueError(f"prompt + gen = {prompt + gen} exceeds the model's "
                         f"{full.max_positions} positions; nearest good gen: "
                         f"{max(full.max_positions - prompt, 2)}")
    return sizes


@dataclass(frozen=True)
class _Prefill:
    """A batch's prompts prefilled: the time to the first token and what it is made of."""

    ttft_ms: float
    attention_ms: float
    comm_ms: float
    flops: float
    roofline_ms: float
    steps: int


class _StepPricer:
    """One plan's forward passes priced: each distinct (tokens, sampled) dense step captured and
    priced once, attention per layer kind, and the tensor-parallel collectives."""

    def __init__(self, key: str, spec: DeviceSpec, cd: ComputeDtype, kv: ComputeDtype,
                 fmt: str | None, tp: int, full: _Shape, shape: _Shape,
                 predictor: Predictor) -> None:
        self.key, self.spec, self.cd, self.kv, self.fmt, self.tp = key, spec, cd, kv, fmt, tp
        self.full, self.shape, self.predictor = full, shape, predictor
        self.costs = load_op_costs()
        self.attention = _Attention(spec, shape, cd, kv)
        self._priced: dict[tuple[int, int], _Priced] = {}

    def dense(self, tokens: int, sampled: int) -> tuple[_Step, _Priced]:
        step = _captured_step(self.key, self.cd.name, tokens, sampled)
        if (tokens, sampled) not in self._priced:
            self._priced[(tokens, sampled)] = _price(step, self.spec, self.predictor, self.fmt,
                                                     self.kv, self.costs)
        return step, self._priced[(tokens, sampled)]

    def comm_ms(self, tokens: int, sampled: int) -> float:
        """Two all-reduces a layer and one after the embedding, and the logits' all-gather."""
        if self.tp == 1:
            return 0.0
        act = self.cd.in_bytes
        reduce = predict_collective_ms(self.spec, "all_reduce", size_bytes=float(
            tokens * self.shape.hidden * act), num_gpus=self.tp)
        gather = predict_collective_ms(self.spec, "all_gather", size_bytes=float(
            sampled * padded_vocab(self.full.vocab) * act), num_gpus=self.tp)
        return (2 * self.shape.layers + 1) * reduce + gather

    def prefill(self, batch: int, prompt: int, token_budget: int) -> _Prefill:
        ttft = attn = comm = flops = roof = 0.0
        steps = prefill_steps(batch, prompt, token_budget)
        peak = self.spec.peak_flops_per_s(self.cd)
        for (tokens, sampled, chunks), count in steps.items():
            _, p = self.dense(tokens, sampled)
            a_ms, a_flops = self.attention.prefill(chunks)
            c_ms = self.comm_ms(tokens, sampled)
            ttft += count * (p.dense_ms + a_ms + c_ms)
            attn += count * a_ms
            comm += count * c_ms
            flops += count * (p.flops + a_flops)
            roof += count * (p.roofline_ms + a_flops / peak * 1e3)
        return _Prefill(ttft, attn, comm, flops, roof, sum(steps.values()))


class _Attention:
    """Attention times of one plan: per layer kind (its sliding window), summed over the
    layers, each distinct call predicted once."""

    def __init__(self, spec: DeviceSpec, shape: _Shape, cd: ComputeDtype, kv: ComputeDtype
                 ) -> None:
        self.spec, self.shape, self.cd, self.kv = spec, shape, cd, kv
        self.layers = Counter(shape.windows)  # window -> layers
        self.kernel = vllm_kernel(spec, shape.head_dim, kv.name)
        self.model = _attention_model()
        # the model's launch term is the event-timed floor of one call (fitted on CUDA-event
        # times); in a CUDA graph the kernel's own time remains
        self.launch_ms = self.model.physical_constants()["launch_us"] * 1e-3
        self.cache: dict[tuple[int, int, int, int], tuple[float, float]] = {}

    def _calls(self, calls: Sequence[tuple[int, int, int, int]]) -> None:
        todo = [c for c in dict.fromkeys(calls) if c not in self.cache]
        if not todo:
            return
        s = self.shape
        pred = self.model.predict(AttentionBatch.from_calls([AttentionCall(
            phase="decode" if q == 1 else "prefill", batch=b, q_len=q, kv_len=k,
            heads=s.heads, kv_heads=s.kv_heads, head_dim=s.head_dim, window=w, causal=True,
            dtype=self.cd.name, kv_dtype=self.kv.name,
            # the step's KV-cache write is its own op (``_kv_writes``); vLLM's metadata
            # builder plans FlashAttention 3's varlen schedule once a step (aot_schedule)
            cache_write=False, scheduled=True)
            for b, q, k, w in todo]), self.spec)
        for c, t, f in zip(todo, pred.time_ms.tolist(), pred.details["flops"].tolist()):
            self.cache[c] = (t - self.launch_ms, f)

    def _sum(self, calls: Sequence[tuple[int, int, int]]) -> tuple[float, float]:
        """(ms, FLOPs) of (batch, q_len, kv_len) calls in every layer."""
        keyed = [(b, q, k, w) for b, q, k in calls for w in self.layers]
        self._calls(keyed)
        ms = sum(self.cache[c][0] * self.layers[c[3]] for c in keyed)
        flops = sum(self.cache[c][1] * self.layers[c[3]] for c in keyed)
        return ms, flops

    def prefill(self, chunks: Sequence[tuple[int, int]]) -> tuple[float, float]:
        """One prefill step: its chunks (tokens, context after the chunk), alike ones as one
        call of their count."""
        return self._sum([(n, q, k) for (q, k), n in Counter(chunks).items()])

    def decode(self, batch: int, context: int) -> tuple[float, float]:
        return self._sum([(batch, 1, context)])

    def per_layer_ms(self, batch: int, context: int, window: int) -> float:
        self._calls([(batch, 1, context, window)])
        return self.cache[(batch, 1, context, window)][0]


@functools.lru_cache(maxsize=1)
def _attention_model() -> AttentionPredictor:
    return AttentionPredictor.shipped()


def _decode_report(step: _Step, p: _Priced, spec: DeviceSpec, predictor: Predictor,
                   cd: ComputeDtype, attention: _Attention, batch: int, context: int
                   ) -> CostReport:
    """The decode step of ``batch`` sequences at ``context`` keys as a cost report of one GPU:
    each layer's attention op carries its call at that context (shape and time)."""
    s = attention.shape
    ops = []
    for o in p.ops:
        a = o.op.attention
        if a is None:
            ops.append(o)
            continue
        window = s.windows[_layer_of(o.op.module, len(s.windows))]
        shape = AttentionShape(batch=batch, heads=a.heads, kv_heads=a.kv_heads, q_len=1,
                               kv_len=context, head_dim=a.head_dim, head_dim_v=a.head_dim_v,
                               causal=True)
        ops.append(OpEstimate(replace(o.op, attention=shape),
                              attention.per_layer_ms(batch, context, window),
                              f"flash attention ({attention.kernel})"))
    return CostReport(
        model=step.model_name, device=spec, dtype=cd.name, mode="inference",
        predictor=getattr(predictor, "name", type(predictor).__name__),
        predictor_version=str(getattr(predictor, "version", "")), gemms=p.gemms,
        others=tuple(ops), config=step.config, module_types=step.module_types, compiled=True)


def _layer_of(module: str, layers: int) -> int:
    """The decoder layer index in a module path ("model.layers.3.self_attn" -> 3)."""
    for part in module.split("."):
        if part.isdigit() and int(part) < layers:
            return int(part)
    return 0
