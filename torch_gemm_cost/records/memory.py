"""The memory of one run of a model on one device: its weights, gradients and optimizer states
(with the fp32 master weights of mixed precision), the activations the backward pass holds (or,
in inference, the forward pass's live tensors), the KV cache, their peak, and whether it fits.

Sizes follow the records' dtypes (``sizing._Ctx``): the model's floating tensors are held in
the compute dtype (16-bit for fp8 and int8 compute). Mixed precision is held as Megatron-LM
and DeepSpeed hold it: 16-bit weights and gradients, fp32 master weights and fp32 optimizer
states. NB: ``torch.autocast`` keeps fp32 weights and gradients instead (4 + 4 bytes, no master
copy) and a 16-bit copy of each weight through the forward pass.

The peak of a training step is the larger of the backward pass's and the optimizer step's:

- the backward pass walks the graph in reverse; at each node it holds the saved activations
  that nodes before it still read, the gradients of the parameters it has passed, and the
  recompute of the checkpointed module it is in (``saved.GraphMemory``);
- the optimizer step holds the gradients, the states, and a temporary of one state's size
  (foreach Adam's ``sqrt(exp_avg_sq)`` over all parameters at once).

NB: the activations' own gradients (one layer's worth at a time), the allocator's caching and
fragmentation, and the CUDA context are not counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..capture.hf_config import read_hf_config
from ..hardware.dtypes import ComputeDtype
from .optimizer import optimizer_name, optimizer_states
from .saved import GraphMemory
from .sizing import _Ctx

__all__ = ["MAX_BATCH", "MemoryEstimate", "kv_cache_bytes", "max_batch_fitting",
           "memory_estimate", "uses_kv_cache"]

MAX_BATCH = 1 << 20  # the largest batch said to fit where nothing grows with the batch
_MASTER_BYTES = 4  # the fp32 master copy of a 16-bit weight
_STATE_BYTES_MIXED = 4  # optimizer states are fp32 under mixed precision


@dataclass(frozen=True)
class MemoryEstimate:
    """The memory of one run on one device, in bytes.

    ``optimizer_bytes`` holds the optimizer's states and, under mixed precision, the fp32
    master weights (``master_weights_bytes`` of it). ``activations_bytes`` is what the backward
    pass reads (training) or the forward pass's peak of live tensors (inference).
    ``device_bytes`` is the device's memory (None where its spec gives none); ``max_batch`` the
    largest batch whose peak fits it (None where unknown), ``batch`` the batch estimated.
    """

    mode: str
    optimizer: str  # "adamw", "adam", "sgd" or "none"
    mixed_precision: bool
    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    master_weights_bytes: int
    activations_bytes: int
    kv_cache_bytes: int
    peak_bytes: int
    device_bytes: int | None
    batch: int | None
    max_batch: int | None
    checkpointed_modules: int  # modules under activation checkpointing

    @property
    def fits(self) -> bool | None:
        """Whether the peak fits the device's memory; None where the device's size is unknown."""
        return None if self.device_bytes is None else self.peak_bytes <= self.device_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fits": self.fits}


def kv_cache_bytes(windows: Sequence[int], kv_heads: int, head_dim: int, tokens: int,
                   batch: int, kv_bytes: float) -> int:
    """2 (K and V) · kv_heads · head_dim · tokens · batch · bytes, summed over the layers; a
    sliding-window layer holds its window.

    >>> kv_cache_bytes([0] * 32, 8, 128, 2304, 1, 2)   # Llama-3-8B, 2048 + 256 tokens, bf16
    301989888
    """
    per_token = sum(min(tokens, w) if w else tokens for w in windows)
    return round(2 * kv_heads * head_dim * per_token * batch * kv_bytes)


def max_batch_fitting(usable_bytes: float, weights_bytes: float, fixed_bytes: float,
                      per_sequence_bytes: float, cap: int) -> int:
    """The largest batch b ≤ ``cap`` with weights + fixed + b · per_sequence ≤ usable; 0 when
    not even one fits.

    >>> max_batch_fitting(21.6e9, 16_060_522_496, 838_860_800, 302_502_912, 8192)
    15
    """
    room = usable_bytes - weights_bytes - fixed_bytes
    if per_sequence_bytes <= 0:
        return cap if room >= 0 else 0
    return max(0, min(cap, math.floor(room / per_sequence_bytes)))


def uses_kv_cache(model: torch.nn.Module, kwargs: Mapping[str, Any]) -> bool:
    """Whether a forward pass of ``model`` fills a KV cache: a transformers model that
    generates text from a decoder alone, with ``use_cache`` on (its config's, unless the call
    says). NB: an encoder-decoder's cache is not counted."""
    config = getattr(model, "config", None)
    can_generate = getattr(model, "can_generate", None)
    if config is None or not callable(can_generate) or not can_generate():
        return False
    if getattr(config, "is_encoder_decoder", False):
        return False
    return bool(kwargs.get("use_cache", getattr(config, "use_cache", False)))


def memory_estimate(facts: GraphMemory, params: Iterable[torch.Tensor], cd: ComputeDtype,
                    native: torch.dtype | None, *, mode: str, optimizer: Any = None,
                    device_bytes: float | None = None, kv_config: Any = None) -> MemoryEstimate:
    """The memory of a run whose graph ``facts`` (``saved.graph_memory``) and parameters are
    given, in compute dtype ``cd`` for a model whose own dtype is ``native`` (sized as
    ``extract`` sizes them). ``kv_config`` is the config of a model that fills a KV cache
    (``uses_kv_cache``) for the tokens of its input; None for none."""
    ctx = _Ctx(cd, native)
    unique = list({id(p): p for p in params}.values())
    weights = sum(p.numel() * ctx.elem_bytes(p.dtype) for p in unique)
    trained = [p for p in unique if p.requires_grad and p.dtype.is_floating_point]
    n_trained = sum(p.numel() for p in trained)
    grads = sum(p.numel() * ctx.elem_bytes(p.dtype) for p in trained) if mode == "train" else 0
    name = optimizer_name(optimizer) if mode == "train" else "none"
    mixed = ctx.act_dtype.itemsize < _STATE_BYTES_MIXED
    state_bytes = _STATE_BYTES_MIXED if mixed else ctx.act_dtype.itemsize
    states = optimizer_states(optimizer) * n_trained * state_bytes if name != "none" else 0
    master = _MASTER_BYTES * n_trained if mixed and name != "none" else 0
    kv = _kv_bytes(kv_config, facts, ctx) if mode != "train" else 0
    fixed = weights + states + master
    if mode == "train":
        steps = _backward_steps(facts, ctx)  # (nodes + 1, 2): gradients, activations
        activations = _bytes(facts.saved, ctx, regional=False)
        # the step: foreach Adam's sqrt(exp_avg_sq) of every parameter at once beside the
        # gradients; SGD updates in place
        step = grads + (n_trained * state_bytes if name in ("adam", "adamw") else 0)
        peak = fixed + max(int(steps.sum(dim=1).max()), step)
        fitting = [max_batch_fitting(device_bytes, fixed, g, _per(a, facts), MAX_BATCH)
                   for g, a in steps.tolist()] if device_bytes else []
        fitting += [0] if device_bytes is not None and fixed + step > device_bytes else []
    else:
        activations = _live_peak(facts, ctx)
        peak = weights + kv + activations
        fitting = ([max_batch_fitting(device_bytes, weights, 0, _per(activations + kv, facts),
                                      MAX_BATCH)] if device_bytes else [])
    return MemoryEstimate(
        mode=mode, optimizer=name, mixed_precision=mixed and name != "none",
        weights_bytes=weights, grads_bytes=grads, optimizer_bytes=states + master,
        master_weights_bytes=master, activations_bytes=activations, kv_cache_bytes=kv,
        peak_bytes=peak, device_bytes=None if device_bytes is None else int(device_bytes),
        batch=facts.batch, max_batch=min(fitting) if fitting and facts.batch else None,
        checkpointed_modules=len(facts.regions))


def _kv_bytes(config: Any, facts: GraphMemory, ctx: _Ctx) -> int:
    """The KV cache a forward pass over the input's tokens fills, in the activations' dtype;
    0 without a config (``uses_kv_cache``) or an input of (batch, tokens)."""
    if config is None or not facts.batch or not facts.tokens:
        return 0
    hf = read_hf_config(config)
    heads = hf.num_attention_heads
    if not hf.sliding_windows or not heads:
        return 0
    head_dim = hf.head_dim or (hf.hidden_size or 0) // heads
    return kv_cache_bytes(hf.sliding_windows, hf.num_key_value_heads or heads, head_dim,
                          facts.tokens, facts.batch, ctx.act_dtype.itemsize)


def _per(batch_bytes: float, facts: GraphMemory) -> float:
    """Bytes per sequence of what grows with the batch. NB: every activation is taken to."""
    return batch_bytes / facts.batch if facts.batch else 0.0


def _bytes(saved: Iterable[Any], ctx: _Ctx, regional: bool) -> int:
    return sum(s.elems * ctx.elem_bytes(s.dtype) for s in saved if bool(s.region) == regional)


def _backward_steps(facts: GraphMemory, ctx: _Ctx) -> torch.Tensor:
    """(nodes + 1, 2): the gradients and the activations held while the backward pass runs each
    node, and, last, at the end of the forward pass (every saved activation, no gradient)."""
    n = facts.nodes
    held = torch.zeros(n + 1, dtype=torch.float64)  # (n + 1,)
    for s in facts.saved:
        if not s.region:  # held from the forward pass until its earliest saver's backward
            held[s.freed_at] += s.elems * ctx.elem_bytes(s.dtype)
    held = held.cumsum(0)
    grads = torch.zeros(n + 1, dtype=torch.float64)
    for at, elems, dtype in facts.grads:  # made at the last reader, held from then on
        grads[at] += elems * ctx.elem_bytes(dtype)
    grads = grads.flip(0).cumsum(0).flip(0)
    grads[n] = 0.0  # the forward pass's end: no gradient yet
    recompute = torch.zeros(n + 1, dtype=torch.float64)
    for region, (first, last) in facts.regions.items():
        size = sum(s.elems * ctx.elem_bytes(s.dtype) for s in facts.saved if s.region == region)
        recompute[first:last + 1] += size
    return torch.stack([grads, held + recompute], dim=1)


def _live_peak(facts: GraphMemory, ctx: _Ctx) -> int:
    """The most bytes the forward pass's tensors hold at once: each from the node that makes it
    to the last that reads it."""
    delta = torch.zeros(facts.nodes + 1, dtype=torch.float64)  # (nodes + 1,)
    for t in facts.tensors:
        size = t.elems * ctx.elem_bytes(t.dtype)
        delta[t.born] += size
        delta[t.dies + 1] -= size
    return int(delta.cumsum(0).max()) if facts.tensors else 0
