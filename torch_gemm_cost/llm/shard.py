"""Tensor-parallel sharding of a config: one GPU's config, Megatron's way as vLLM shards it."""

from __future__ import annotations

import copy
from typing import Any

from .experts import ExpertParallel, expert_config, expert_width_field
from .model import FUSED_QKV_MODELS, SHARD_HEAD_DIM
from .shape import ServingShape, padded_vocab

__all__ = ["shard_config"]


def shard_config(config: Any, tp: int, ep: ExpertParallel | None = None) -> Any:
    """One GPU's config under tensor parallelism ``tp``, Megatron's way as vLLM shards it:
    attention heads split (column-parallel q/k/v, row-parallel o), KV heads split where ``tp``
    divides them and replicated, one a GPU, where ``tp`` is a multiple of them; the MLP's (each
    expert's) intermediate dim split (column-parallel gate/up, row-parallel down); the
    vocabulary padded to a multiple of 64 and split. Hidden size and layers stay. Under expert
    parallelism (``ep``) the experts stay whole, E / ep of them a GPU
    (``experts.expert_config``)."""
    shape = ServingShape.of(config)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp must be a positive integer, got {tp!r}; nearest good: 1")
    if shape.heads % tp:
        raise ValueError(f"tp={tp} does not divide the {shape.heads} attention heads; nearest "
                         f"good tp: {' or '.join(map(str, _divisors_near(shape.heads, tp)))}")
    if shape.kv_heads % tp and tp % shape.kv_heads:
        raise ValueError(f"tp={tp} neither divides nor is a multiple of the {shape.kv_heads} KV "
                         f"heads; nearest good tp: "
                         f"{' or '.join(map(str, _divisors_near(shape.kv_heads, tp)))}")
    whole = expert_width_field(config) if ep is not None else None
    if shape.intermediate % tp and whole is None:
        raise ValueError(f"tp={tp} does not divide the MLP's intermediate size "
                         f"{shape.intermediate}; nearest good tp: "
                         f"{' or '.join(map(str, _divisors_near(shape.intermediate, tp)))}")
    if tp > 1 and not any(isinstance(getattr(config, name, None), int) for name in (
            "intermediate_size", "moe_intermediate_size", "ffn_hidden_size")):
        raise ValueError(f"tp={tp} needs a config that names its MLP width "
                         f"(intermediate_size, as Llama-style models do); "
                         f"{type(config).__name__} does not: use tp=1")
    out = copy.deepcopy(config)
    out.num_attention_heads = shape.heads // tp
    for name in ("num_key_value_heads", "num_kv_heads"):  # Llama's, Falcon's
        if hasattr(config, name):
            setattr(out, name, max(shape.kv_heads // tp, 1))
    try:
        out.head_dim = shape.head_dim
    except AttributeError:  # a config that derives it (Falcon's hidden_size / heads)
        pass
    if tp > 1 and getattr(config, "model_type", None) in FUSED_QKV_MODELS:
        # its attention derives the head size from hidden_size / heads: the shard is built
        # with the model's (``model.meta_model``)
        setattr(out, SHARD_HEAD_DIM, shape.head_dim)
    elif tp > 1 and getattr(out, "head_dim", shape.head_dim) != shape.head_dim:
        raise ValueError(f"tp={tp}: {type(config).__name__} derives its head size from "
                         "hidden_size / num_attention_heads, so one GPU's share of the heads "
                         "cannot keep it; use tp=1")
    for name in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
                 "ffn_hidden_size"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value % tp == 0 and name != whole:
            setattr(out, name, value // tp)
    if ep is not None:
        expert_config(out, ep)
    out.vocab_size = -(-padded_vocab(shape.vocab) // tp)
    if tp > 1:  # token ids index the whole vocabulary, not one GPU's shard of it
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if hasattr(out, name):
                setattr(out, name, None)
    return out


def _divisors_near(n: int, value: int) -> list[int]:
    good = [d for d in range(1, n + 1) if n % d == 0]
    return sorted(good, key=lambda d: (abs(d - value), d))[:2]
