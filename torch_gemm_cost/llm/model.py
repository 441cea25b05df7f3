"""The model a plan prices: an HF config read from what the caller gives, and its causal LM built
once on the meta device with attention as a serving engine calls it."""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..hardware.dtypes import DTYPES

__all__ = ["ATTENTION", "FUSED_QKV_MODELS", "SHARD_HEAD_DIM", "causal_lm", "config_key",
           "config_of", "meta_model"]

ATTENTION = "torch_gemm_cost_serving"  # the attention implementation the capture registers
# models whose attention derives its head size from hidden_size / num_attention_heads and holds
# q, k and v in one Linear (``query_key_value``): one GPU's shard of them is built with the
# model's head size, kept in the sharded config under SHARD_HEAD_DIM (``llm.shard``)
FUSED_QKV_MODELS: frozenset[str] = frozenset({"falcon", "gpt_neox"})
SHARD_HEAD_DIM = "serving_shard_head_dim"


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


def config_key(config: Any) -> str:
    """A config as a hashable key (its JSON), under which its model and captures are cached."""
    return json.dumps(config.to_dict(), sort_keys=True, default=str)


@functools.lru_cache(maxsize=8)
def meta_model(key: str, dtype: str) -> torch.nn.Module:
    """The causal LM of a config (``config_key``) on the meta device, serving attention."""
    _register_attention()
    model = causal_lm(key, dtype, ATTENTION).eval()
    config = model.config
    if getattr(config, SHARD_HEAD_DIM, None):
        _shard_fused_attention(model, config, int(getattr(config, SHARD_HEAD_DIM)), dtype)
    return model


def _shard_fused_attention(model: torch.nn.Module, config: Any, head_dim: int,
                           dtype: str) -> None:
    """One GPU's tensor-parallel shard of a Falcon or GPT-NeoX model whose config holds its
    share of the heads: each attention's fused q/k/v Linear and output Linear rebuilt for
    those heads at the model's ``head_dim`` (transformers derives the head size from
    hidden_size / heads, which a shard of the heads doubles), its head counts set, and the
    rotary embedding built at that head size."""
    heads = config.num_attention_heads
    falcon = getattr(config, "model_type", None) == "falcon"
    new_arch = falcon and bool(getattr(config, "new_decoder_architecture", False))
    multi_query = falcon and not new_arch and bool(getattr(config, "multi_query", True))
    kv = (getattr(config, "num_kv_heads", None) or heads) if new_arch else (
        1 if multi_query else heads)
    hidden = config.hidden_size
    torch_dtype = DTYPES[dtype].torch_dtype
    for found in model.modules():
        module: Any = found  # an attention module, its attributes set below
        qkv, dense = getattr(module, "query_key_value", None), getattr(module, "dense", None)
        if not isinstance(qkv, torch.nn.Linear) or not isinstance(dense, torch.nn.Linear):
            continue
        with torch.device("meta"):
            module.query_key_value = type(qkv)(hidden, (heads + 2 * kv) * head_dim,
                                               bias=qkv.bias is not None, dtype=torch_dtype)
            module.dense = type(dense)(heads * head_dim, hidden, bias=dense.bias is not None,
                                       dtype=torch_dtype)
        if falcon:
            module.head_dim, module.num_heads, module.num_kv_heads = head_dim, heads, kv
            module.num_key_value_groups = heads // kv
        else:  # GPT-NeoX
            ratio = module.rotary_ndims / module.head_size
            module.head_size, module.rotary_ndims = head_dim, int(head_dim * ratio)
        module.scaling = head_dim ** -0.5
    if falcon:  # its rotary embedding reads the head size the config derives
        base = getattr(model, "transformer", model)
        rotary = getattr(base, "rotary_emb", None)
        if rotary is not None:
            whole = copy.deepcopy(config)
            whole.num_attention_heads = hidden // head_dim
            with torch.device("meta"):
                base.rotary_emb = type(rotary)(config=whole)


def causal_lm(key: str, dtype: str, attention: str) -> torch.nn.Module:
    """The causal LM of a config (``config_key``) built on the meta device in ``dtype`` with
    ``attention`` as its attention implementation; a ValueError where the config builds none."""
    from transformers import AutoModelForCausalLM

    config = config_of(json.loads(key))
    with torch.device("meta"):
        try:
            return AutoModelForCausalLM.from_config(config, attn_implementation=attention,
                                                    dtype=DTYPES[dtype].torch_dtype)
        except ValueError as e:
            raise ValueError(f"{type(config).__name__} does not build a causal LM: "
                             f"{str(e).splitlines()[0]}") from e


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
