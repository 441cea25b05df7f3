"""Attention as the serving engine's kernel: the fused-attention model (``predict.attention``) on
each step's sequences as vLLM's kernel for the device runs them, per layer kind (its sliding
window), summed over the layers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..hardware.catalog import DeviceSpec
from ..hardware.dtypes import ComputeDtype
from ..predict.attention import AttentionBatch, AttentionCall, AttentionPredictor, vllm_kernel
from .shape import ServingShape

__all__ = ["ServingAttention"]

_Call = tuple[int, int, int, int]  # (batch, q_len, kv_len, window)


class ServingAttention:
    """Attention times of one plan: each distinct call predicted once, without the model's
    launch term (a CUDA graph runs the kernel's own time) and without the KV-cache write,
    which the step prices as an op of its own (``llm.pricing.kv_writes``)."""

    def __init__(self, spec: DeviceSpec, shape: ServingShape, cd: ComputeDtype,
                 kv: ComputeDtype) -> None:
        self.spec, self.shape, self.cd, self.kv = spec, shape, cd, kv
        self.layers = Counter(shape.windows)  # window -> layers
        self.kernel = vllm_kernel(spec, shape.head_dim, kv.name)
        self.model = _attention_model()
        # the model's launch term is the event-timed floor of one call (fitted on CUDA-event
        # times); in a CUDA graph the kernel's own time remains
        self.launch_ms = self.model.physical_constants()["launch_us"] * 1e-3
        self.cache: dict[_Call, tuple[float, float]] = {}

    def _calls(self, calls: Sequence[_Call]) -> None:
        todo = [c for c in dict.fromkeys(calls) if c not in self.cache]
        if not todo:
            return
        s = self.shape
        times_ms, flops = _predict(self.model, [AttentionCall(
            phase="decode" if q == 1 else "prefill", batch=b, q_len=q, kv_len=k,
            heads=s.heads, kv_heads=s.kv_heads, head_dim=s.head_dim, window=w, causal=True,
            dtype=self.cd.name, kv_dtype=self.kv.name,
            # the step's KV-cache write is its own op (``kv_writes``); vLLM's metadata
            # builder plans FlashAttention 3's varlen schedule once a step (aot_schedule)
            cache_write=False, scheduled=True)
            for b, q, k, w in todo], self.spec)
        for c, t, f in zip(todo, times_ms, flops):
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
        call of their count; (ms, FLOPs) over every layer."""
        return self._sum([(n, q, k) for (q, k), n in Counter(chunks).items()])

    def decode(self, batch: int, context: int) -> tuple[float, float]:
        """One decode step of ``batch`` sequences at ``context`` keys: (ms, FLOPs) over every
        layer."""
        return self._sum([(batch, 1, context)])

    def times(self, calls: Sequence[tuple[int, int, int]]) -> list[float]:
        """Each (batch, q_len, kv_len) call's ms over every layer, the ones not yet priced
        predicted together in one call of the attention model."""
        keyed = [(b, q, k, w) for b, q, k in calls for w in self.layers]
        self._calls(keyed)
        return [sum(self.cache[(b, q, k, w)][0] * n for w, n in self.layers.items())
                for b, q, k in calls]

    def per_layer_ms(self, batch: int, context: int, window: int) -> float:
        """One layer's decode attention (a layer of sliding window ``window``, 0: full)."""
        self._calls([(batch, 1, context, window)])
        return self.cache[(batch, 1, context, window)][0]


def _predict(model: AttentionPredictor, calls: Sequence[AttentionCall], spec: DeviceSpec
             ) -> tuple[list[float], list[float]]:
    """The attention model's (time ms, FLOPs) of each call on ``spec``: the plan's one call
    into it."""
    pred = model.predict(AttentionBatch.from_calls(calls), spec)
    return pred.time_ms.tolist(), pred.details["flops"].tolist()


def _attention_model() -> AttentionPredictor:
    return AttentionPredictor.shipped()  # the registry reads and caches it
