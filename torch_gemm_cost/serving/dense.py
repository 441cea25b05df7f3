"""A step's dense part (every GEMM and kernel but attention) at any (tokens, sampled), priced as
``plan_llm`` prices it (``llm.pricing``: the serving records, ``price_records``, the kernels in
a CUDA graph) and cached, so a simulation of thousands of steps prices a few hundred shapes.

- ``grouped_dense_ms``: ``llm.pricing.price_step(step).dense_ms``, each distinct record priced
  once and counted as often as the step runs it (a model's layers repeat their records);
- ``DenseCurve``: the dense time of one model on one device. A step of at most
  ``CUDA_GRAPH_SIZES[-1]`` tokens runs padded to the next CUDA-graph size, in graphs, as vLLM V1
  runs it; a larger one eagerly (each kernel with its launch gap), between the two
  ``grid_tokens`` points around it, linearly. The sampled tokens
  (the lm_head's rows and the logits) are priced apart where the step separates into a part of
  the tokens and a part of the sampled tokens (``StepFamily.sampled_part``).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import replace
from typing import Any

from ..hardware.catalog import DeviceSpec
from ..hardware.dtypes import ComputeDtype
from ..llm.experts import ExpertParallel, routed
from ..llm.pricing import kernel_floors, price_records_in, serving_records
from ..llm.schedule import CUDA_GRAPH_SIZES
from ..llm.step import Step, step_family
from ..predict import Predictor
from ..predict.ops import OpCostModel
from ..records import GemmSite, OtherOp
from ..records.types import FusedKernel

__all__ = ["CUDA_GRAPH_SIZES", "GRID_PER_OCTAVE", "DenseCurve", "cuda_graph_tokens",
           "grid_tokens", "grouped_dense_ms"]

GRID_PER_OCTAVE = 16  # points a doubling of tokens is priced at above the CUDA-graph sizes


def cuda_graph_tokens(tokens: int) -> int:
    """The tokens a step of ``tokens`` runs: the next CUDA-graph size, or itself above them.

    >>> cuda_graph_tokens(3), cuda_graph_tokens(9), cuda_graph_tokens(512), cuda_graph_tokens(600)
    (4, 16, 512, 600)
    """
    i = bisect.bisect_left(CUDA_GRAPH_SIZES, tokens)
    return CUDA_GRAPH_SIZES[i] if i < len(CUDA_GRAPH_SIZES) else tokens


def grid_tokens(tokens: int) -> tuple[int, int]:
    """The two priced token counts around ``tokens`` above the CUDA-graph sizes: 2^(i/16)
    rounded, the lower at most and the upper at least ``tokens`` (equal on a grid point).

    >>> grid_tokens(1024), grid_tokens(1000)
    ((1024, 1024), (981, 1024))
    """
    i = GRID_PER_OCTAVE * math.log2(tokens)
    lo, hi = (round(2 ** (j / GRID_PER_OCTAVE)) for j in (math.floor(i), math.ceil(i)))
    lo = min(lo, tokens)
    hi = max(hi, tokens)
    return lo, hi


def grouped_dense_ms(step: Step, spec: DeviceSpec, predictor: Predictor, fmt: str | None,
                     kv: ComputeDtype, costs: OpCostModel, graph: bool = True) -> float:
    """``price_step(step, ..., graph).dense_ms``, pricing each distinct record once: the serving
    records (``serving_records``) priced by ``price_records``, in a CUDA graph (``graph``) with
    no launch cost and each kernel then at least its floor (``kernel_floors``), eagerly with
    each kernel's launch gap; the attention ops at zero and the copies the engine does not run
    left out, every record's time counted as often as the step runs it."""
    sites, others = serving_records(step, fmt, kv)
    gemms: dict[GemmSite, list[Any]] = {}
    for s in sites:
        gemms.setdefault(_anonymous(s), [s, 0])[1] += 1
    owner = {i: k for k in step.kernels for i in k.ops}
    groups: dict[Any, list[Any]] = {}  # key -> [representative kernel or op index, count]
    for k in step.kernels:
        key = (replace(k, name="", module="", ops=()),
               tuple((_anonymous(others[i]), i in step.dropped) for i in k.ops))
        groups.setdefault(key, [k, 0])[1] += 1
    for i, op in enumerate(others):
        if i not in owner:
            groups.setdefault((_anonymous(op), i in step.dropped), [i, 0])[1] += 1
    ops: list[OtherOp] = []
    kernels: list[FusedKernel] = []
    weights: list[float] = []  # per op of ``ops``: how often it runs (0: not run)
    for rep, count in groups.values():
        members = rep.ops if isinstance(rep, FusedKernel) else (rep,)
        if isinstance(rep, FusedKernel):
            kernels.append(replace(rep, ops=tuple(range(len(ops), len(ops) + len(members)))))
        for i in members:
            ops.append(others[i])
            weights.append(0.0 if i in step.dropped else float(count))
    priced = price_records_in(fmt, [g[0] for g in gemms.values()], ops, spec, predictor,
                              kernels, replace(costs, launch_ms=0.0) if graph else costs)
    times = kernel_floors(priced.ops, kernels, costs) if graph else [o.time_ms
                                                                     for o in priced.ops]
    gemm_ms = sum(e.time_ms * g[1] for e, g in zip(priced.gemms, gemms.values()))
    op_ms = sum(w * (t or 0.0) for o, t, w in zip(priced.ops, times, weights)
                if o.op.attention is None)
    return gemm_ms + op_ms


def _anonymous(record: Any) -> Any:
    """A record without the names of where it runs: alike records of two layers are equal."""
    return replace(record, module="", module_type="", node="")


class DenseCurve:
    """The dense time of one model's step on one device at any (tokens, sampled), priced
    shape by shape as a simulation asks for them, each priced shape cached."""

    def __init__(self, key: str, cd: ComputeDtype, spec: DeviceSpec, predictor: Predictor,
                 fmt: str | None, kv: ComputeDtype, costs: OpCostModel, max_tokens: int,
                 experts: ExpertParallel | None = None) -> None:
        """``experts``: the expert parallelism the config (``key``) was sharded for; each
        step's expert GEMMs then run the rows a GPU receives (``llm.experts.routed``)."""
        self.spec, self.predictor, self.fmt, self.kv, self.costs = spec, predictor, fmt, kv, costs
        self.experts = experts
        self.family = step_family(key, cd.name, max_tokens)
        self._step_ms: dict[tuple[int, int], float] = {}
        self._sampled_ms: dict[tuple[int, bool], float] = {}
        self.priced = 0  # shapes priced so far

    def ms(self, tokens: int, sampled: int) -> float:
        """The dense time of a step of ``tokens`` tokens sampling ``sampled`` of them."""
        run = cuda_graph_tokens(tokens)
        if run == tokens and run > CUDA_GRAPH_SIZES[-1]:
            lo, hi = grid_tokens(tokens)
            if lo != hi:
                w = (tokens - lo) / (hi - lo)
                return (1 - w) * self._at(lo, sampled) + w * self._at(hi, sampled)
        return self._at(run, sampled)

    def _at(self, tokens: int, sampled: int) -> float:
        graph = tokens <= CUDA_GRAPH_SIZES[-1]
        if self.family.separable:
            return (self._priced(tokens, 1) + self._sampled(sampled, graph)
                    - self._sampled(1, graph))
        return self._priced(tokens, min(sampled, tokens))

    def _priced(self, tokens: int, sampled: int) -> float:
        if (tokens, sampled) not in self._step_ms:
            step = self.family.of(tokens, sampled)
            if self.experts is not None:
                step = routed(step, self.experts, tokens)
            self._step_ms[(tokens, sampled)] = self._price(step, tokens <= CUDA_GRAPH_SIZES[-1])
        return self._step_ms[(tokens, sampled)]

    def _sampled(self, sampled: int, graph: bool) -> float:
        if (sampled, graph) not in self._sampled_ms:
            self._sampled_ms[(sampled, graph)] = self._price(self.family.sampled_part(sampled),
                                                             graph)
        return self._sampled_ms[(sampled, graph)]

    def _price(self, step: Step, graph: bool) -> float:
        self.priced += 1
        return grouped_dense_ms(step, self.spec, self.predictor, self.fmt, self.kv, self.costs,
                                graph)
