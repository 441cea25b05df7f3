"""A training layout: how a step's GPUs divide the model and the batch, checked at the boundary,
each bad value named with the nearest good one.

Ranks are ordered as Megatron-LM orders them (megatron/core/parallel_state.py, order
"tp-cp-ep-dp-pp"): tensor-parallel ranks innermost, so a tensor-parallel group sits in one
node, then context-, data- and pipeline-parallel ranks; a group of ``size`` ranks ``stride``
apart holds ``node_gpus // stride`` of them per node (1 once the stride spans a node).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..capture.hf_config import HfConfig
from ..hardware.dtypes import ComputeDtype, resolve_dtype
from ..suggest import check_choice, nearest_divisors

__all__ = ["OPTIMIZERS", "RECOMPUTE", "ZERO", "Layout", "check_dtype", "check_layout",
           "group_per_node"]

RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")
ZERO: tuple[Any, ...] = (0, 1, 2, 3, "fsdp")
# torch.optim.AdamW / Adam as records.optimizer prices them (foreach), and a fused Adam: one
# multi-tensor kernel (apex FusedAdam, which Megatron-LM uses; torch's fused=True)
OPTIMIZERS: tuple[str, ...] = ("adamw", "adam", "fused_adam")
_TRAIN_DTYPES = ("float32", "tfloat32", "bfloat16", "float16")


@dataclass(frozen=True)
class Layout:
    """A step's parallel layout: tp × pp × dp × cp GPUs (``ep`` splits the experts within the
    data-parallel ranks), ZeRO stage (or FSDP), activation recomputation, micro-batch,
    pipeline chunks per GPU (``interleave`` > 1: the interleaved schedule) and sequence
    parallelism."""

    tp: int
    pp: int
    dp: int
    cp: int = 1
    ep: int = 1
    zero: int | str = 0
    recompute: str = "none"
    micro_batch: int = 1
    interleave: int = 1
    sequence_parallel: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def zero_stage(self) -> int:
        """0 .. 3; FSDP's full sharding is stage 3."""
        return 3 if self.zero == "fsdp" else int(self.zero)

    @property
    def shard_ranks(self) -> int:
        """The ranks ZeRO shards over and gradients are reduced over: data × context."""
        return self.dp * self.cp

    @property
    def expert_shard_ranks(self) -> int:
        """The ranks holding the same experts, over which their gradients are reduced and ZeRO
        shards them: data × context over expert parallelism (Megatron-Core's expert
        data-parallel group)."""
        return self.dp * self.cp // self.ep

    def micro_batches(self, global_batch: int) -> int:
        """Micro-batches each pipeline runs per step."""
        return global_batch // (self.dp * self.micro_batch)

    def label(self) -> str:
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.interleave > 1:
            parts.append(f"v{self.interleave}")
        parts.append(f"mb{self.micro_batch}")
        if self.zero_stage:
            parts.append("fsdp" if self.zero == "fsdp" else f"zero{self.zero}")
        if self.recompute != "none":
            parts.append(f"recompute={self.recompute}")
        if self.sequence_parallel:
            parts.append("sp")
        return " ".join(parts)


def group_per_node(size: int, stride: int, node_gpus: int) -> int:
    """GPUs per node of a group of ``size`` ranks ``stride`` apart (a divisor of ``size``).

    >>> group_per_node(8, 1, 8), group_per_node(16, 2, 8), group_per_node(4, 8, 8)
    (8, 4, 1)
    """
    per = max(1, min(size, node_gpus // max(stride, 1)))
    while size % per:
        per -= 1
    return per


def check_dtype(dtype: Any) -> ComputeDtype:
    cd = resolve_dtype(dtype)
    if cd.name not in _TRAIN_DTYPES:
        raise ValueError(f"dtype {cd.name!r}: a training plan runs fp32, tf32, bf16 or fp16 "
                         "(mixed precision); nearest good: 'bf16'")
    return cd


def check_layout(layout: Layout, shape: HfConfig, global_batch: int, seq: int,
                 gpus: int | None) -> None:
    """Every value of ``layout`` against the model, the batch and the GPU count."""
    for name in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "interleave"):
        _positive(name, getattr(layout, name))
    _positive("global_batch", global_batch)
    _positive("seq", seq)
    check_choice("zero", layout.zero, ZERO)
    check_choice("recompute", layout.recompute, RECOMPUTE)
    if gpus is not None and gpus != layout.gpus:
        raise ValueError(f"gpus={gpus} but tp·pp·dp·cp = {layout.tp}·{layout.pp}·{layout.dp}·"
                         f"{layout.cp} = {layout.gpus}; nearest good dp: "
                         f"{max(gpus // (layout.tp * layout.pp * layout.cp), 1)}")
    layers = int(shape.num_hidden_layers or 0)
    heads = int(shape.num_attention_heads or 1)
    kv = int(shape.num_key_value_heads or heads)
    _divides("tp", layout.tp, "attention heads", heads)
    if kv % layout.tp and layout.tp % kv:
        raise ValueError(f"tp={layout.tp} neither divides nor is a multiple of the {kv} KV "
                         f"heads; nearest good tp: {_near(kv, layout.tp)}")
    if shape.intermediate_size:
        _divides("tp", layout.tp, "MLP width", int(shape.intermediate_size))
    _divides("pp × interleave", layout.pp * layout.interleave, "layers", layers)
    _divides("cp", layout.cp, "sequence length", seq)
    per_step = layout.dp * layout.micro_batch
    if global_batch % per_step:
        good = [b for b in range(1, global_batch + 1) if global_batch % (layout.dp * b) == 0]
        hint = f"micro_batch {_closest(good, layout.micro_batch)}" if good else \
            f"global_batch {max(per_step, global_batch // per_step * per_step)}"
        raise ValueError(f"global_batch={global_batch} is not a multiple of dp·micro_batch = "
                         f"{layout.dp}·{layout.micro_batch}; nearest good: {hint}")
    m = layout.micro_batches(global_batch)
    if layout.interleave > 1 and m % layout.pp:
        raise ValueError(f"the interleaved schedule needs micro-batches ({m}) a multiple of "
                         f"pp={layout.pp}; nearest good interleave: 1")
    if layout.zero_stage == 3 and layout.pp > 1:
        raise ValueError(f"zero={layout.zero!r} with pp={layout.pp}: ZeRO-3 and FSDP shard "
                         "each layer across the data-parallel ranks and gather it every "
                         "micro-batch, which pipeline stages do not (DeepSpeed refuses the "
                         "pair); nearest good: zero=1, or pp=1")
    if layout.ep > 1:
        _check_experts(layout, shape)


def _check_experts(layout: Layout, shape: HfConfig) -> None:
    """Megatron-Core's rules for expert parallelism: the experts split evenly over ep, the ep
    ranks drawn from the data-parallel (× context-parallel) ranks, sequence parallelism with
    tensor parallelism (its MoE layer dispatches each GPU's own tokens)."""
    ep, experts = layout.ep, int(shape.num_experts or 0)
    if not experts:
        raise ValueError(f"ep={ep} on a dense model: its config names no experts "
                         "(num_local_experts / num_experts); nearest good: ep=1")
    _divides("ep", ep, "experts", experts)
    ranks = layout.dp * layout.cp
    if ranks % ep:
        good = [d for d in nearest_divisors(ranks, ep) if experts % d == 0] or [1]
        raise ValueError(f"ep={ep} does not divide dp·cp = {layout.dp}·{layout.cp} = {ranks}: "
                         "the expert-parallel ranks are drawn from the data-parallel ones; "
                         f"nearest good: ep={good[0]}, or dp a multiple of {ep}")
    if layout.tp > 1 and not layout.sequence_parallel:
        raise ValueError(f"ep={ep} with tp={layout.tp} needs sequence parallelism "
                         "(Megatron-Core's TransformerConfig: 'When using expert parallelism "
                         "and tensor parallelism, sequence parallelism must be used'); nearest "
                         "good: sequence_parallel=True")
    if layout.zero_stage == 3:
        raise ValueError(f"zero={layout.zero!r} with ep={ep}: ZeRO-3 / FSDP of expert-parallel "
                         "weights is not priced (Megatron-Core shards them with its "
                         "distributed optimizer, ZeRO 1); nearest good: zero=1")


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}; nearest good: 1")


def _divides(name: str, value: int, what: str, n: int) -> None:
    if n % value:
        raise ValueError(f"{name}={value} does not divide the {n} {what}; nearest good: "
                         f"{_near(n, value)}")


def _near(n: int, value: int) -> str:
    return " or ".join(map(str, nearest_divisors(n, value)))


def _closest(good: Sequence[int], value: int) -> int:
    return min(good, key=lambda d: (abs(d - value), d))
