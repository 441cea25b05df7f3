"""Memory of one GPU serving a model: its weights in their format, the KV cache, the
activation workspace, and the largest batch that fits them (the KV cache and the fitting batch
by the arithmetic ``estimate`` uses too, ``records.memory``)."""

from __future__ import annotations

import torch

from ..records.memory import kv_cache_bytes, max_batch_fitting
from .shape import ServingShape
from .weights import WEIGHT_BYTES

__all__ = ["LOGIT_BYTES", "activation_bytes_per_token", "kv_cache_bytes", "max_batch_fitting",
           "weights_bytes"]

LOGIT_BYTES = 4  # the sampler reads the logits in fp32


def weights_bytes(model: torch.nn.Module, experts: int, fmt: str | None) -> int:
    """One GPU's weights: the decoder's Linear layers and experts in ``fmt`` (group scales
    included), everything else (embedding, lm_head, norms, router) in its own dtype."""
    get_head = getattr(model, "get_output_embeddings", None)
    lm_head = get_head() if get_head is not None else None
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


def activation_bytes_per_token(shape: ServingShape, act_bytes: int) -> int:
    """The live activations a token keeps in the costlier half of one decoder layer: the
    residual stream and its normed copy, with either the fused QKV output and the attention
    output, or the MLP's gate/up output and its activation (top-k copies in an MoE).

    >>> s = ServingShape(32, 4096, 32, 8, 128, 14336, 128256, 0, 0, (0,) * 32, 8192)
    >>> activation_bytes_per_token(s, 2)   # 2·(2·4096 + max(6144 + 4096, 3·14336))
    102400
    """
    attention = (shape.heads + 2 * shape.kv_heads) * shape.head_dim + shape.heads * shape.head_dim
    mlp = 3 * shape.intermediate * max(shape.top_k, 1)
    return act_bytes * (2 * shape.hidden + max(attention, mlp))
