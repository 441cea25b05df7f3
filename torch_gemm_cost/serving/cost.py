"""What a simulated step costs, from the pipeline ``plan_llm`` prices with:
``dense(tokens, sampled) + attention(its sequences) + collectives(tokens, sampled)``.

- dense: ``serving.dense.DenseCurve`` (the step's GEMMs and kernels, ``llm.pricing``);
- attention: the serving engine's kernel (``llm.attention.ServingAttention``) on the step's
  decoding requests, as one call of their count at their mean context (a decode step reads
  every request's KV cache once), and on each prefill chunk against its context. Calls are
  priced on a grid of contexts, 16 a doubling above 64 tokens, a whole row of the grid in one
  call of the attention model, and read between grid points linearly;
- launches: one launch gap a layer for its attention call where the step is not one full
  CUDA graph (``llm.schedule.cuda_graph_mode``: a step holding a prefill chunk, or an eager
  one);
- collectives: ``llm.comm.StepCollectives.tp_ms`` on the tokens the step runs (0 without
  tensor parallelism).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

from ..llm.attention import ServingAttention
from ..llm.schedule import cuda_graph_mode
from .dense import GRID_PER_OCTAVE, DenseCurve, cuda_graph_tokens
from .scheduler import StepBatch

__all__ = ["AttentionTable", "StepCost", "context_grid"]

EXACT_BELOW = 64  # contexts up to this are priced each; above, on the grid


def context_grid(up_to: int) -> list[int]:
    """The contexts attention is priced at: every one to 64, then 2^(i/16) rounded, up to the
    first point at or above ``up_to``.

    >>> g = context_grid(100); g[62:], len(context_grid(4096))
    ([63, 64, 67, 70, 73, 76, 79, 83, 87, 91, 95, 99, 103], 160)
    """
    out = list(range(1, EXACT_BELOW + 1))
    i = GRID_PER_OCTAVE * math.log2(EXACT_BELOW)
    while out[-1] < up_to:
        i += 1
        point = round(2 ** (i / GRID_PER_OCTAVE))
        if point > out[-1]:
            out.append(point)
    return out


class AttentionTable:
    """Attention times of one model on one device (``ServingAttention``) on a grid of
    contexts, priced a row at a time."""

    def __init__(self, attention: ServingAttention, max_context: int) -> None:
        self.attention = attention
        self.grid = context_grid(max_context)
        self._decode: dict[int, list[float]] = {}  # batch -> ms at each grid context
        self._prefill: dict[int, tuple[list[int], list[float]]] = {}  # q -> (contexts, ms)

    def decode_ms(self, contexts: tuple[int, ...]) -> float:
        """One decode step of ``len(contexts)`` requests at their mean context."""
        if not contexts:
            return 0.0
        b = len(contexts)
        if b not in self._decode:
            self._decode[b] = self.attention.times([(b, 1, k) for k in self.grid])
        return _between(self.grid, self._decode[b], sum(contexts) / b)

    def prefill_ms(self, tokens: int, context: int) -> float:
        """A chunk of ``tokens`` queries against ``context`` keys (its own included); the
        queries at the nearest grid point."""
        j = bisect.bisect_left(self.grid, tokens)
        near = self.grid[max(j - 1, 0):j + 1]
        q = min(near, key=lambda g: (abs(g - tokens), g))
        if q not in self._prefill:
            ks = [k for k in self.grid if k >= q]
            self._prefill[q] = (ks, self.attention.times([(1, q, k) for k in ks]))
        ks, ms = self._prefill[q]
        return _between(ks, ms, max(context, q))


def _between(xs: list[int], ys: list[float], x: float) -> float:
    """``ys`` read at ``x`` linearly between the points ``xs`` (held at the ends)."""
    j = bisect.bisect_left(xs, x)
    if j == 0:
        return ys[0]
    if j >= len(xs):
        return ys[-1]
    x0, x1 = xs[j - 1], xs[j]
    return ys[j - 1] + (ys[j] - ys[j - 1]) * (x - x0) / (x1 - x0)


class StepCost:
    """A step's time (ms) from its batch: dense + attention + collectives."""

    def __init__(self, dense: DenseCurve, attention: AttentionTable,
                 comm: Callable[[int, int], float], attention_launch_ms: float = 0.0) -> None:
        """``attention_launch_ms``: the launch gaps of every layer's attention call, paid by a
        step outside a full CUDA graph."""
        self.dense, self.attention, self.comm = dense, attention, comm
        self.attention_launch_ms = attention_launch_ms
        self._comm: dict[tuple[int, int], float] = {}
        self.steps = 0
        self.dense_ms = self.attention_ms = self.comm_ms = 0.0

    def __call__(self, batch: StepBatch) -> float:
        tokens, sampled = batch.tokens, batch.sampled
        dense = self.dense.ms(tokens, sampled)
        attn = self.attention.decode_ms(batch.decode_contexts) + sum(
            self.attention.prefill_ms(q, k) for q, k in batch.prefill_chunks)
        if cuda_graph_mode(cuda_graph_tokens(tokens), bool(batch.prefill_chunks)) != "full":
            attn += self.attention_launch_ms
        key = (cuda_graph_tokens(tokens), sampled)
        if key not in self._comm:
            self._comm[key] = self.comm(*key)
        comm = self._comm[key]
        self.steps += 1
        self.dense_ms += dense
        self.attention_ms += attn
        self.comm_ms += comm
        return dense + attn + comm
