"""One GPU's memory in a training step: weights, gradients, optimizer states, activations.

Per parameter (ZeRO, Rajbhandari et al. 2020, §3: mixed precision holds 2 + 2 + 12 bytes):

- weights in the model's dtype (2 bytes in bf16/fp16, 4 in fp32), gradients the same;
- Adam's two moments in fp32 (8 bytes), plus an fp32 master copy of each weight under mixed
  precision (4 bytes); no states without an optimizer;
- tensor parallelism splits the parameters it splits (``graph.graph_roles``); a GPU holds its
  pipeline stages' parameters (a tied embedding on the first and the last stage);
- ZeRO shards over the dp·cp data-parallel ranks: stage 1 the optimizer states, 2 also the
  gradients, 3 (and FSDP) also the weights, of which two layers are then held whole (the one
  running and the one prefetched).

Activations per decoder layer and micro-batch follow Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models", §4, eq. 1-2: 34·s·b·h + 5·a·s²·b bytes
in 16-bit with dropout), written per tensor so that other widths, GQA, gated MLPs, fp32 and
FlashAttention read off the same terms (``layer_activation_bytes``). With recomputation:
selective drops attention's core (the s² terms); full keeps each layer's input and holds one
layer's activations while it recomputes it. In a pipeline a GPU holds the activations of the
micro-batches it has run forward and not yet backward (``schedule.in_flight``).

NB: the activations' own gradients (one layer's at a time), the allocator's caching and
fragmentation, the CUDA context and NCCL's buffers are not counted; the plan keeps a reserve
for them (``MEMORY_UTILIZATION``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MEMORY_UTILIZATION", "ActivationShape", "MemoryBreakdown", "ParamBytes",
           "layer_activation_bytes", "param_bytes"]

MEMORY_UTILIZATION = 0.9  # the share of the GPU's memory a plan fills


@dataclass(frozen=True)
class MemoryBreakdown:
    """One GPU's bytes at the peak of a step."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float  # one micro-batch through this GPU's layers
    in_flight_bytes: float  # the other micro-batches a pipeline stage holds at once

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.grads_bytes + self.optimizer_bytes
                + self.activations_bytes + self.in_flight_bytes)


@dataclass(frozen=True)
class ParamBytes:
    """Bytes per parameter element, by what holds them."""

    weight: int
    grad: int
    optimizer: int  # the states and the fp32 master copy


def param_bytes(act_bytes: int, optimizer: str | None) -> ParamBytes:
    """Bytes per parameter for a model held in ``act_bytes``-byte elements and ``optimizer``.

    >>> param_bytes(2, "adamw")   # mixed precision: 2 + 2 + (8 of Adam's moments + 4 master)
    ParamBytes(weight=2, grad=2, optimizer=12)
    >>> param_bytes(4, "adamw"), param_bytes(2, None).optimizer
    (ParamBytes(weight=4, grad=4, optimizer=8), 0)
    """
    if optimizer is None:
        return ParamBytes(act_bytes, act_bytes, 0)
    master = 4 if act_bytes < 4 else 0
    return ParamBytes(act_bytes, act_bytes, 8 + master)


@dataclass(frozen=True)
class ActivationShape:
    """What one decoder layer's saved activations depend on."""

    tokens: int  # this GPU's tokens of one micro-batch: micro_batch × seq / cp
    seq: int  # keys each query meets: the whole sequence
    micro_batch: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    elem_bytes: int
    gated_mlp: bool
    attention_dropout: bool
    hidden_dropout: bool
    flash: bool  # SDPA on a GPU: a fused attention kernel keeps no scores


def layer_activation_bytes(a: ActivationShape, tp: int, sequence_parallel: bool,
                           recompute: str) -> float:
    """Bytes one decoder layer keeps for its backward pass, one micro-batch, one GPU.

    A GPT-3 layer in 16-bit with dropout, f = 4h (Korthikanti et al. 2022, eq. 1-2): per
    token, replicated 2h (norm 1 input) + 2h (QKV input) + 2h (norm 2) + 2h (fc1 input) + h + h
    (two dropout masks) = 10h, and split 4h (Q, K) + 2h (V) + 2h (projection input) + 8h (GeLU
    input) + 8h (fc2 input) = 24h; per sequence 2·a·s² (softmax) + a·s² (its dropout mask) +
    2·a·s² (dropped probabilities) = 5·a·s². Total s·b·h·(10 + 24/t) + 5·a·s²·b/t.
    """
    e, t, h = a.elem_bytes, a.tokens, a.hidden
    replicated = t * h * (4 * e + (2 if a.hidden_dropout else 0))
    qkv = t * a.head_dim * (a.heads + 2 * a.kv_heads) * e
    proj = t * a.heads * a.head_dim * e
    mlp = t * a.intermediate * e * (4 if a.gated_mlp else 2)
    split = qkv + proj + mlp
    rows = a.micro_batch * a.heads * (a.tokens // max(a.micro_batch, 1)) * a.seq
    if a.flash:  # the kernel's fp32 log-sum-exp per query row
        core = a.micro_batch * a.heads * (a.tokens // max(a.micro_batch, 1)) * 4
    else:
        core = rows * e + (rows * (1 + e) if a.attention_dropout else 0)
    rep = replicated / tp if sequence_parallel else replicated
    if recompute == "full":
        return t * h * e / (tp if sequence_parallel else 1)
    if recompute == "selective":
        core = 0
    return rep + (split + core) / tp


def shape_of(config: Any, hf: Any, tokens: int, seq: int, micro_batch: int, elem_bytes: int,
             gated_mlp: bool, flash: bool) -> ActivationShape:
    """The activation shape of a model's layer from its config (``hf``: its ``HfConfig``)."""
    heads = int(hf.num_attention_heads or 1)
    # a MoE layer keeps the MLP activations of each token's experts_per_token experts
    routed = int(hf.experts_per_token or 1) if hf.num_experts else 1
    return ActivationShape(
        tokens=tokens, seq=seq, micro_batch=micro_batch, hidden=int(hf.hidden_size),
        intermediate=int(hf.intermediate_size or 4 * hf.hidden_size) * routed, heads=heads,
        kv_heads=int(hf.num_key_value_heads or heads),
        head_dim=int(hf.head_dim or hf.hidden_size // heads), elem_bytes=elem_bytes,
        gated_mlp=gated_mlp,
        attention_dropout=_dropout(config, ("attn_pdrop", "attention_dropout",
                                            "attention_probs_dropout_prob")),
        hidden_dropout=_dropout(config, ("resid_pdrop", "hidden_dropout",
                                         "hidden_dropout_prob", "dropout")),
        flash=flash)


def _dropout(config: Any, names: tuple[str, ...]) -> bool:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value > 0
    return False
