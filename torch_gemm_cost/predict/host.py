"""The host's side of a call: what the CPU spends issuing each op, and how one CUDA stream
overlaps it with the GPU.

An eager ``model(*inputs)`` timed by a CUDA event pair (as KernelBench and most users time it)
measures more than its kernels: the host runs Python, the dispatcher and the launch of each op
before the GPU can start it. With one stream the host issues op i at

    h_i = call + host_1 + ... + host_i

and the GPU runs it from max(h_i + L, e_{i-1}) to e_i = that + g_i (``g_i`` its kernel time,
``L`` the launch latency). The first event is recorded at host time 0 and reached by the GPU at
L, the end event after the last op, so the call measures e_N - L: the latency cancels, and

    e_N - L = max_j (h_j + g_j + ... + g_N)      (the j = 0 term: call + every kernel)

which ``event_time_ms`` evaluates as one batched max over a suffix sum. A host that issues
faster than the GPU runs hides under it (the GPU-bound case: the kernels' sum plus the first
issue); one that issues slower shows in full (the host-bound case: the issues' sum plus the
last kernel).

A CUDA graph replay (``torch.compile(mode="reduce-overhead")``, the ``cudagraphs`` backend)
issues no op: the call costs a floor of its own (dynamo's guards, cudagraph trees' bookkeeping
and the graph launch), then the copies of its inputs, then the kernels back to back
(``graph_time_ms``). The copies are torch's: cudagraph trees copy every input that is not a
parameter or buffer into the graph's static buffer on each replay
(``torch/_inductor/cudagraph_trees.py``, ``CUDAGraphNode.run`` ->
``_copy_inputs_and_remove_from_src``: one ``torch._foreach_copy_`` over the non-static
inputs).

The per-op costs are a host's, not a GPU's: ``HostCosts`` holds one host's, fitted on
KernelBench's timings (``train/host.py``, ``data/host_costs.json``) or measured by
``torch-gemm-cost calibrate --host``; ``HostCostTable.prior`` is the median over the fitted hosts
of the newest software generation (KernelBench v0.1's, a newer PyTorch than v0's), with the
range of every generation's as the interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import DeviceSpec
from .registry import check_format, load_file, load_shipped

__all__ = [
    "COST_FIELDS",
    "VERSION",
    "HostCostTable",
    "HostCosts",
    "HostPrior",
    "event_time_ms",
    "graph_time_ms",
    "host_prior",
    "load_host_costs",
    "measured_prior",
    "point_prior",
]

VERSION = 1  # of the host cost tables this module reads and ``train.host`` writes


@dataclass(frozen=True)
class HostCosts:
    """One host's costs, in ms.

    Eager: ``eager_call_ms`` enters ``model(*inputs)`` (the module call, the event record),
    ``eager_op_ms`` issues one op that launches a kernel (its Python, the dispatcher, the
    launch), ``eager_view_ms`` one that launches none (a view, a reshape, an allocation, a
    composite's inner op: a dispatcher hop, mostly from C++, no launch). Compiled without
    CUDA graphs (inductor's default mode): ``compiled_call_ms`` runs dynamo's guards and
    the compiled entry, ``compiled_kernel_ms`` launches one of inductor's kernels (or an extern
    GEMM) from its generated code. ``graph_call_ms``: a CUDA graph replay's floor. None where
    no measurement covers a cost (a host fitted on eager timings only)."""

    eager_call_ms: float
    eager_op_ms: float
    eager_view_ms: float
    compiled_call_ms: float | None = None
    compiled_kernel_ms: float | None = None
    graph_call_ms: float | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostCosts:
        missing = [f for f in ("eager_call_ms", "eager_op_ms", "eager_view_ms") if f not in d]
        if missing:
            raise ValueError(f"host costs lack {missing}; they have {sorted(d)}")

        def opt(name: str) -> float | None:
            return None if d.get(name) is None else float(d[name])

        return cls(float(d["eager_call_ms"]), float(d["eager_op_ms"]),
                   float(d["eager_view_ms"]), opt("compiled_call_ms"),
                   opt("compiled_kernel_ms"), opt("graph_call_ms"))

    def to_dict(self) -> dict[str, float | None]:
        return {f: None if (v := getattr(self, f)) is None else round(v, 5) for f in COST_FIELDS}

    def scaled(self, factor: float) -> HostCosts:
        """Every cost times ``factor`` (a host that issues ``factor`` times as slowly)."""
        return HostCosts.from_dict({f: None if (v := getattr(self, f)) is None else v * factor
                                    for f in COST_FIELDS})


COST_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(HostCosts))


@dataclass(frozen=True)
class HostPrior:
    """The host costs a prediction uses (``mid``) and the range it allows (``lo``, ``hi``),
    and where they come from (``source``: the fitted hosts, or a calibration profile)."""

    mid: HostCosts
    lo: HostCosts
    hi: HostCosts
    source: str


@dataclass(frozen=True)
class HostCostTable:
    """Fitted hosts (``data/host_costs.json``): each host's ``HostCosts`` by name (a
    KernelBench board: one GPU at one cloud, in one problem set's timings), the chip of the GPU
    it drove, and its software generation (``generations``: the problem set whose timings it
    was fitted on, ``v0`` or ``v0.1``; ``dates``: when they were taken)."""

    hosts: Mapping[str, HostCosts]
    chips: Mapping[str, str]
    provenance: Mapping[str, Any]
    generations: Mapping[str, str] = field(default_factory=dict)
    dates: Mapping[str, str] = field(default_factory=dict)

    def newest(self) -> str:
        """The generation of the most recently timed host."""
        return self.generation(max(self.hosts, key=lambda h: (self.dates.get(h, ""), h)))

    def generation(self, host: str) -> str:
        return self.generations.get(host, "v0")

    def without_chips(self, chips: Iterable[str]) -> HostCostTable:
        """The table without the hosts whose GPU is one of ``chips``."""
        out = set(chips)
        kept = [h for h in self.hosts if self.chips[h] not in out]
        return HostCostTable({h: self.hosts[h] for h in kept}, {h: self.chips[h] for h in kept},
                             self.provenance, {h: self.generation(h) for h in kept},
                             {h: self.dates.get(h, "") for h in kept})

    def prior(self, exclude_chips: Iterable[str] = (), generation: str | None = None
              ) -> HostPrior:
        """The median of each cost over the hosts of ``generation`` (default: the newest,
        what a user of today's PyTorch runs) whose GPU's chip is not in ``exclude_chips``,
        with the minimum and maximum over such hosts of every generation as the range. A cost
        none of them has falls back to the other chips' hosts of any generation, then to
        every host (None where none has it). A prediction for a GPU takes the prior without
        its own chip's hosts: what it is scored against was never in its fit."""
        gen = generation or self.newest()
        out = set(exclude_chips)
        others = [h for h in self.hosts if self.chips[h] not in out] or list(self.hosts)
        kept = [h for h in others if self.generation(h) == gen] or others

        def pick(pools: tuple[list[str], ...], name: str) -> list[float]:
            for pool in pools:
                vals = [v for h in pool if (v := getattr(self.hosts[h], name)) is not None]
                if vals:
                    return vals
            return []  # a cost no fitted host has (an eager-only table's compiled ones)

        mid: dict[str, float | None] = {}
        lo: dict[str, float | None] = {}
        hi: dict[str, float | None] = {}
        for name in COST_FIELDS:
            vals = pick((kept, others, list(self.hosts)), name)
            span = pick((others, list(self.hosts)), name)
            mid[name] = statistics.median(vals) if vals else None
            lo[name], hi[name] = (min(span), max(span)) if span else (None, None)
        left = sorted(set(self.chips.values()) & out)
        return HostPrior(HostCosts.from_dict(mid), HostCosts.from_dict(lo),
                         HostCosts.from_dict(hi),
                         f"KernelBench {gen} hosts ({len(kept)}"
                         + (f", {', '.join(left)} held out)" if left else ")"))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostCostTable:
        hosts = d["hosts"]
        if not hosts:
            raise ValueError("host cost table holds no host")
        return cls({h: HostCosts.from_dict(v["costs"]) for h, v in hosts.items()},
                   {h: str(v["chip"]) for h, v in hosts.items()}, dict(d.get("provenance", {})),
                   {h: str(v.get("generation", "v0")) for h, v in hosts.items()},
                   {h: str(v.get("date", "")) for h, v in hosts.items()})

    @classmethod
    def read(cls, doc: Mapping[str, Any]) -> HostCostTable:
        check_format(doc, "host_costs", VERSION)
        return cls.from_dict(doc)

    @classmethod
    def load(cls, path: str | Path | None = None) -> HostCostTable:
        """The shipped table or one written by ``train.host``."""
        if path is None:
            return load_host_costs()
        return load_file("host_costs", path, cls.read)


def load_host_costs() -> HostCostTable:
    """The shipped table, read once."""
    return load_shipped("host_costs", HostCostTable.read)


def event_time_ms(host_ms: torch.Tensor, gpu_ms: torch.Tensor,
                  call_ms: torch.Tensor | float, overlap: bool = True) -> torch.Tensor:
    """The event-timed time of calls whose ops take ``host_ms`` to issue and ``gpu_ms`` to run,
    each (..., N) in issue order, after ``call_ms`` (...) to enter the call: (...).

    With ``overlap`` (a GPU behind one stream): max_j (h_j + g_j + ... + g_N), h_j the host
    time when op j is issued (the module's docstring derives it). Without (a CPU, which runs
    each op as it issues it): the sum of everything. Differentiable in every input.

    >>> # host-bound: 3 ops of 10 µs host, 2 µs GPU each, 5 µs call: 5 + 30 + 2 = 37 µs
    >>> round(float(event_time_ms(torch.full((3,), 0.010), torch.full((3,), 0.002), 0.005)), 4)
    0.037
    """
    call = torch.as_tensor(call_ms, dtype=gpu_ms.dtype)
    if not overlap:
        return call + host_ms.sum(-1) + gpu_ms.sum(-1)
    issued = call.unsqueeze(-1) + host_ms.cumsum(-1)  # (..., N) h_j
    left = gpu_ms.flip(-1).cumsum(-1).flip(-1)  # (..., N) g_j + ... + g_N
    at_call = call + gpu_ms.sum(-1)  # the j = 0 term
    if gpu_ms.shape[-1] == 0:
        return at_call
    return torch.maximum((issued + left).amax(-1), at_call)


def graph_time_ms(gpu_ms: torch.Tensor, copy_ms: torch.Tensor | float,
                  call_ms: torch.Tensor | float) -> torch.Tensor:
    """A CUDA graph replay's time: its floor, its input copies, then its kernels back to back
    (``gpu_ms`` (..., N)): (...).

    >>> round(float(graph_time_ms(torch.tensor([0.01, 0.02]), 0.5, 0.06)), 4)  # 0.06+0.5+0.03
    0.59
    """
    def t(x: torch.Tensor | float) -> torch.Tensor:
        return torch.as_tensor(x, dtype=gpu_ms.dtype)

    return t(call_ms) + t(copy_ms) + gpu_ms.sum(-1)



def point_prior(costs: HostCosts, source: str) -> HostPrior:
    """A prior of one host's costs, its range the point itself."""
    return HostPrior(costs, costs, costs, source)


def host_prior(profile: Mapping[str, Any] | None, device: DeviceSpec) -> HostPrior:
    """The host costs a run on ``device`` uses: the ``host`` section a calibration profile
    measured (``calibrate --host``: its repeats' range as the interval), else the shipped
    table's prior without ``device``'s chip (``HostCostTable.prior``)."""
    section = (profile or {}).get("host")
    if section is not None:
        return measured_prior(section)
    return load_host_costs().prior([device.chip] if device.chip else [])


def measured_prior(section: Mapping[str, Any], where: str = "") -> HostPrior:
    """The prior of a calibration profile's ``host`` section (``calibrate --host``): its
    costs, and its repeats' range as the interval; ``where`` names the profile in the
    source. A ValueError names what the section lacks."""
    try:
        return HostPrior(HostCosts.from_dict(section["costs"]), HostCosts.from_dict(section["lo"]),
                         HostCosts.from_dict(section["hi"]),
                         f"measured on {section.get('device', 'this host')}{where}")
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"the calibration profile's host section is invalid: {e}") from None
