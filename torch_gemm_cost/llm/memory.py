"""Memory of one GPU serving a model: its weights in their format, the KV cache, the
activation workspace, and the largest batch that fits them (the KV cache and the fitting batch
by the arithmetic ``estimate`` uses too, ``records.memory``)."""

from __future__ import annotations

import itertools

import torch

from ..records.memory import kv_cache_bytes, max_batch_fitting
from .shape import ServingShape
from .weights import WEIGHT_BYTES

__all__ = ["LOGIT_BYTES", "activation_bytes_per_token", "kv_cache_bytes", "max_batch_fitting",
           "stage_weights_bytes"]

LOGIT_BYTES = 4  # the sampler reads the logits in fp32


def stage_weights_bytes(model: torch.nn.Module, experts: int, fmt: str | None,
                        stages: tuple[int, ...]) -> tuple[int, ...]:
    """Each pipeline stage's weights on one GPU: the decoder's Linear layers and experts in
    ``fmt`` (group scales included), everything else (embedding, lm_head, norms, router) in
    its own dtype. The stages hold ``stages`` decoder layers in order: a parameter of layer i
    (``...layers.i...``) on the stage of that layer, the input embedding on the first stage,
    every other one (the final norm, the lm_head) on the last; where the lm_head shares the
    embedding's weight and there are two stages or more, the last holds a copy of it, as
    vLLM's does."""
    get_head = getattr(model, "get_output_embeddings", None)
    lm_head = get_head() if get_head is not None else None
    get_input = getattr(model, "get_input_embeddings", None)
    embed = get_input() if get_input is not None else None
    embeddings = {id(m.weight) for m in model.modules()
                  if isinstance(m, torch.nn.Embedding)} | (
        {id(lm_head.weight)} if lm_head is not None else set())
    stage_of = [s for s, n in enumerate(stages) for _ in range(n)]
    total = [0.0] * len(stages)
    for name, p in model.named_parameters():
        own = p.numel() * p.element_size()
        router = experts and p.dim() == 2 and p.shape[0] == experts
        if fmt is None or p.dim() < 2 or id(p) in embeddings or router:
            size = float(own)
        else:
            size = p.numel() * WEIGHT_BYTES[fmt]
        layer = _layer_index(name)
        if layer is not None and layer < len(stage_of):
            total[stage_of[layer]] += size
        elif embed is not None and p is getattr(embed, "weight", None):
            total[0] += size
            if lm_head is not None and lm_head.weight is p and len(stages) > 1:
                total[-1] += size  # a tied lm_head: the last stage's own copy
        else:
            total[-1] += size
    return tuple(round(t) for t in total)


def _layer_index(name: str) -> int | None:
    """The decoder layer of a parameter ("model.layers.3.mlp.up_proj.weight" -> 3)."""
    parts = name.split(".")
    for a, b in itertools.pairwise(parts):
        if a in ("layers", "h", "layer", "blocks") and b.isdigit():
            return int(b)
    return None


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
