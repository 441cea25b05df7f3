"""The sizes an HF-style config states, read once: the one reader of a model's config.

``capture`` keeps a model's recognizable dims with its graph (``config_dims``, which padding
advice names); the serving planner reads a causal LM's shape from the same record
(``llm.shape``). A config is an HF ``PretrainedConfig`` or any object or mapping with its
fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["HfConfig", "config_dims", "read_hf_config"]


@dataclass(frozen=True)
class HfConfig:
    """What a config says of a model's sizes, each under the name HF's Llama config gives it;
    None (0 for the experts) where the config states none.

    Each size reads the spellings of the common model families: ``hidden_size`` also GPT-2's
    ``n_embd`` and T5's ``d_model``; ``intermediate_size`` also GPT-2's ``n_inner`` (4·hidden
    when unset), OPT's ``ffn_dim``, T5's ``d_ff`` and Falcon's ``ffn_hidden_size``;
    ``num_key_value_heads`` also Falcon's ``num_kv_heads`` (one under its first architecture's
    ``multi_query``); ``head_dim`` defaults to hidden_size / num_attention_heads. ``sliding_windows`` holds each layer's window (0: full attention).
    """

    model_type: str | None
    vocab_size: int | None
    hidden_size: int | None
    num_attention_heads: int | None
    num_key_value_heads: int | None
    head_dim: int | None
    intermediate_size: int | None
    num_hidden_layers: int | None
    max_position_embeddings: int | None
    num_experts: int  # 0 for a dense MLP
    expert_intermediate_size: int | None  # each expert's MLP width (``moe_intermediate_size``)
    experts_per_token: int  # top k of an MoE router, 0 for a dense MLP
    sliding_windows: tuple[int, ...]  # per layer; () where the layer count is unknown
    embedding_size: int | None  # ALBERT's factorized embedding, ResNet's stem width
    hidden_sizes: tuple[int, ...]  # a vision backbone's per-stage widths, 0 where not a size

    def dims(self) -> dict[str, int]:
        """The recognizable dims by field name, as padding advice names them: the sizes, the
        attention's products where they differ from hidden_size, and each stage's width."""
        out: dict[str, int] = {}
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
                     "head_dim"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        heads, head_dim, kv_heads = self.num_attention_heads, self.head_dim, \
            self.num_key_value_heads
        if heads and head_dim and heads * head_dim != self.hidden_size:
            out["num_attention_heads × head_dim"] = heads * head_dim
        if kv_heads and head_dim and kv_heads != heads:
            out["num_key_value_heads × head_dim"] = kv_heads * head_dim
        if self.embedding_size is not None:
            out["embedding_size"] = self.embedding_size
        for i, width in enumerate(self.hidden_sizes):
            if width:
                out[f"hidden_sizes[{i}]"] = width
        return out


def read_hf_config(config: Any) -> HfConfig:
    """The sizes of an HF-style config (object or mapping); see ``HfConfig``."""
    if config is None:
        config = {}
    get = config.get if isinstance(config, Mapping) else lambda k, d=None: getattr(config, k, d)

    def first(*names: str) -> int | None:
        for name in names:
            value = get(name, None)
            if _positive_int(value):
                return int(value)
        return None

    hidden = first("hidden_size", "n_embd", "d_model")
    heads = first("num_attention_heads", "n_head", "num_heads")
    model_type = get("model_type", None)
    inter = first("intermediate_size", "n_inner", "ffn_dim", "d_ff", "encoder_ffn_dim",
                  "ffn_hidden_size")
    if inter is None and hidden is not None and model_type == "gpt2":
        inter = 4 * hidden
    layers = first("num_hidden_layers", "n_layer")
    widths = get("hidden_sizes", None)
    return HfConfig(
        model_type=model_type if isinstance(model_type, str) else None,
        vocab_size=first("vocab_size"), hidden_size=hidden, num_attention_heads=heads,
        num_key_value_heads=first("num_key_value_heads") or _falcon_kv_heads(get, model_type),
        head_dim=first("head_dim", "d_kv") or (hidden // heads if hidden and heads else None),
        intermediate_size=inter, num_hidden_layers=layers,
        max_position_embeddings=first("max_position_embeddings", "n_positions"),
        num_experts=first("num_local_experts", "num_experts") or 0,
        expert_intermediate_size=first("moe_intermediate_size"),
        experts_per_token=first("num_experts_per_tok", "moe_topk") or 0,
        sliding_windows=_windows(get, layers),
        embedding_size=first("embedding_size"),
        hidden_sizes=tuple(int(w) if _positive_int(w) else 0 for w in widths)
        if isinstance(widths, (list, tuple)) else ())


def config_dims(config: Any) -> dict[str, int]:
    """The recognizable dims of an HF-style config (object or mapping), by field name
    (``HfConfig.dims``).

    >>> config_dims({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "vocab_size": 50257})
    {'vocab_size': 50257, 'hidden_size': 768, 'intermediate_size': 3072, \
'num_attention_heads': 12, 'head_dim': 64}
    """
    return read_hf_config(config).dims()


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _falcon_kv_heads(get: Any, model_type: Any) -> int | None:
    """Falcon's KV heads: ``num_kv_heads`` in its new decoder architecture, one where its
    first one shares a KV head (``multi_query``), else None (one a query head)."""
    if model_type != "falcon":
        return None
    if get("new_decoder_architecture", False):
        value = get("num_kv_heads", None)
        return int(value) if _positive_int(value) else None
    return 1 if get("multi_query", True) else None


def _windows(get: Any, layers: int | None) -> tuple[int, ...]:
    """Each layer's sliding window (0: full attention): per layer where the config lists the
    layers' kinds (``layer_types``), else its one ``sliding_window`` for every layer unless
    ``use_sliding_window`` is False."""
    if layers is None:
        return ()
    window = get("sliding_window", None)
    kinds = get("layer_types", None)
    if isinstance(kinds, (list, tuple)) and len(kinds) == layers:
        return tuple(int(window or 0) if k == "sliding_attention" else 0 for k in kinds)
    use_window = get("use_sliding_window", True) is not False
    return (int(window) if _positive_int(window) and use_window else 0,) * layers
