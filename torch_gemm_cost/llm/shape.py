"""The serving shape of a causal LM: what a plan reads from its config, through the package's
one config reader (``hf_config``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..capture.hf_config import read_hf_config
from .model import SHARD_HEAD_DIM

__all__ = ["VOCAB_PADDING", "ServingShape", "padded_vocab"]

VOCAB_PADDING = 64  # vLLM pads the vocabulary to a multiple of this (VocabParallelEmbedding)


@dataclass(frozen=True)
class ServingShape:
    """The sizes a serving plan prices a decoder-only LM by (one GPU's shard of it, once
    sharded): ``intermediate`` is each expert's MLP width in an MoE."""

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
    def of(cls, config: Any) -> ServingShape:
        """The shape of an HF config of a causal LM; a ValueError names what it lacks."""
        hf = read_hf_config(config)
        layers, hidden = hf.num_hidden_layers, hf.hidden_size
        heads, vocab = hf.num_attention_heads, hf.vocab_size
        if layers is None or hidden is None or heads is None or vocab is None:
            raise ValueError(f"{type(config).__name__} lacks the sizes of a decoder-only LM "
                             "(num_hidden_layers, hidden_size, num_attention_heads, vocab_size)")
        if hf.num_experts and hf.expert_intermediate_size:
            inter = hf.expert_intermediate_size
        else:
            inter = hf.intermediate_size or 4 * hidden
        return cls(layers=layers, hidden=hidden, heads=heads,
                   kv_heads=hf.num_key_value_heads or heads,
                   head_dim=getattr(config, SHARD_HEAD_DIM, None) or hf.head_dim
                   or hidden // heads, intermediate=inter, vocab=vocab,
                   experts=hf.num_experts, top_k=hf.experts_per_token,
                   windows=hf.sliding_windows, max_positions=hf.max_position_embeddings)


def padded_vocab(vocab: int) -> int:
    """The vocabulary as vLLM's ``VocabParallelEmbedding`` and ``ParallelLMHead`` hold it:
    padded to a multiple of 64, then split evenly over the tensor-parallel GPUs.

    >>> padded_vocab(50257), padded_vocab(128256)
    (50304, 128256)
    """
    return -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
