"""Expert parallelism as vLLM runs it (``--enable-expert-parallel``): an MoE's experts whole
on each of ``ep`` = tp × dp GPUs, E / ep of them a GPU, attention tensor-parallel over ``tp``
GPUs and data-parallel over dp = ep / tp ranks, each rank serving its share of the sequences.

- ``check_ep``: the sizes checked (an MoE model, ep a multiple of tp dividing its experts);
- ``expert_config``: one GPU's config of the experts (E / ep whole experts, top k at most
  that), for the capture;
- ``routed``: a captured step's expert GEMMs with the rows one GPU receives: each of the step's
  ``tokens`` on a rank sends top-k copies, the dp ranks alike, spread over the ep GPUs, so a
  GPU computes tokens · k / tp rows, spread over its experts as routing spreads them
  (``records.handlers.active_groups``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..hardware.dtypes import DTYPES
from ..records.handlers import active_groups
from .shape import ServingShape

__all__ = ["ExpertParallel", "check_ep", "expert_config", "expert_width_field", "routed"]


@dataclass(frozen=True)
class ExpertParallel:
    """``ep`` GPUs holding ``experts`` experts between them, ``tp`` GPUs a data-parallel rank,
    each token routed to ``top_k`` experts."""

    ep: int
    tp: int
    experts: int
    top_k: int

    @property
    def dp(self) -> int:
        """Data-parallel attention ranks: ep / tp."""
        return self.ep // self.tp

    @property
    def local_experts(self) -> int:
        """Experts a GPU holds."""
        return self.experts // self.ep

    def rows(self, tokens: int) -> int:
        """Rows one GPU's experts compute when every rank runs ``tokens`` tokens: each token's
        top-k copies, dp ranks of tokens, over ep GPUs, ⌈tokens · k / tp⌉.

        >>> ExpertParallel(8, 1, 64, 6).rows(100), ExpertParallel(2, 2, 8, 2).rows(5)
        (600, 5)
        """
        return math.ceil(tokens * self.top_k / self.tp)


def check_ep(ep: object, tp: int, shape: ServingShape) -> ExpertParallel | None:
    """``ep`` checked against the model (``shape``, the whole model's) and ``tp``: None for
    ep = 1; else an MoE model whose experts ep divides, ep a multiple of tp (vLLM's EP size is
    TP × DP). Each bad value is named with the nearest good one."""
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise ValueError(f"ep must be a positive integer, got {ep!r}; nearest good: 1")
    if ep == 1:
        return None
    if not shape.experts:
        raise ValueError(f"ep={ep}: the model has a dense MLP, no experts to shard; nearest "
                         "good ep: 1")
    if shape.experts % ep:
        near = sorted((d for d in range(1, shape.experts + 1)
                       if shape.experts % d == 0 and d % tp == 0),
                      key=lambda d: (abs(d - ep), d))
        raise ValueError(f"ep={ep} does not divide the model's {shape.experts} experts; "
                         f"nearest good ep: {' or '.join(map(str, near[:2])) or tp}")
    if ep % tp:
        multiple = max(tp, round(ep / tp) * tp)
        raise ValueError(f"ep={ep} is not a multiple of tp={tp}: vLLM's expert-parallel group "
                         f"is the tp x dp GPUs; nearest good ep: {multiple}")
    return ExpertParallel(ep, tp, shape.experts, shape.top_k)


_EXPERT_COUNTS = ("num_local_experts", "num_experts")  # Mixtral's, Qwen-MoE's
_EXPERT_WIDTHS = ("moe_intermediate_size", "intermediate_size")  # the experts' own first


def expert_config(config: Any, ep: ExpertParallel) -> None:
    """``config`` (one GPU's, in place) holding E / ep experts, each whole, top k at most
    that many (the rows are set by ``routed``)."""
    for name in _EXPERT_COUNTS:
        if isinstance(getattr(config, name, None), int):
            setattr(config, name, ep.local_experts)
    if isinstance(getattr(config, "num_experts_per_tok", None), int):
        config.num_experts_per_tok = min(ep.top_k, ep.local_experts)


def expert_width_field(config: Any) -> str | None:
    """The config field of the experts' own MLP width, which expert parallelism keeps whole."""
    for name in _EXPERT_WIDTHS:
        if isinstance(getattr(config, name, None), int):
            return name
    return None


def routed(step: Any, ep: ExpertParallel, tokens: int) -> Any:
    """``step`` (an ``llm.step.Step`` of ``tokens`` tokens) with each expert GEMM
    (``grouped_mm``) on the rows one GPU computes (``ExpertParallel.rows``), over the experts
    they reach; its FLOPs and compulsory bytes (A, the reached experts' weights, C) recounted.
    NB: the router's GEMM and the routing ops keep the capture's E / ep experts."""
    rows = ep.rows(tokens)
    reached = active_groups(ep.local_experts, rows)
    each = math.ceil(rows / reached)
    sites = []
    for s in step.sites:
        if s.op != "grouped_mm" or s.phase != "forward":
            sites.append(s)
            continue
        ab, ob = DTYPES[s.dtype].in_bytes, DTYPES[s.out_dtype].in_bytes

        def moved(groups: int, m: int, s: Any = s, ab: int = ab, ob: int = ob) -> int:
            return groups * (m * s.k * ab + s.k * s.n * ab + m * s.n * ob)

        sites.append(replace(s, batch=reached, m=each,
                             flops=2 * reached * each * s.n * s.k,
                             dram_bytes=s.dram_bytes - moved(s.batch, s.m)
                             + moved(reached, each)))
    return replace(step, sites=tuple(sites))
