"""The records of a serving simulation: each request's latencies (``RequestLatency``), their
percentiles (``Percentiles``), and the run (``ServingSim``) with its JSON-ready data. The
definitions are vLLM's benchmark_serving's: TTFT from a request's arrival to its first token,
TPOT = (latency − TTFT) / (output tokens − 1), throughput over the span from the first arrival
to the last finish."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PERCENTILES", "Percentiles", "RequestLatency", "ServingSim", "percentile"]

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, linear between the sorted values (numpy's default); NaN for
    none.

    >>> percentile([10.0, 20.0, 30.0, 40.0], 50), percentile([10.0, 20.0, 30.0, 40.0], 90)
    (25.0, 37.0)
    """
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Percentiles:
    """The mean and the 50th, 90th and 99th percentiles of one latency, ms."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        mean = sum(values) / len(values) if values else math.nan
        return cls(mean, *(percentile(values, q) for q in PERCENTILES))


@dataclass(frozen=True)
class RequestLatency:
    """One request served: its lengths, when it arrived, got its first token and finished (ms
    from the run's start), its latencies, and how often the engine preempted it."""

    id: int
    prompt: int
    gen: int
    arrival_ms: float
    first_token_ms: float
    finish_ms: float
    preemptions: int

    @property
    def ttft_ms(self) -> float:
        return self.first_token_ms - self.arrival_ms

    @property
    def e2e_ms(self) -> float:
        return self.finish_ms - self.arrival_ms

    @property
    def tpot_ms(self) -> float | None:
        """(latency − TTFT) / (gen − 1); None for a request of one output token."""
        return (self.finish_ms - self.first_token_ms) / (self.gen - 1) if self.gen > 1 else None


@dataclass(frozen=True)
class ServingSim:
    """A simulated serving run of one model on ``replicas`` copies of an engine of ``tp`` ·
    ``pp`` GPUs: every request, their latency percentiles, the throughput, and the KV cache's
    occupancy after each step of the first copy (``kv_times_ms``, ``kv_used``: a share of its
    ``kv_blocks``)."""

    model: str
    device: str
    dtype: str
    tp: int
    replicas: int
    workload: str  # e.g. "poisson 10 QPS" or "concurrency 8"
    prompt: str  # the prompt lengths' distribution
    gen: str
    seed: int
    token_budget: int
    max_num_seqs: int
    kv_blocks: int
    block_size: int
    requests: tuple[RequestLatency, ...]
    ttft: Percentiles
    tpot: Percentiles
    e2e: Percentiles
    duration_ms: float  # first arrival to last finish
    output_tokens_per_s: float
    total_tokens_per_s: float  # prompt and output tokens
    requests_per_s: float
    steps: int
    preemptions: int
    priced_shapes: int  # dense step shapes priced (the rest read from the cache)
    kv_times_ms: tuple[float, ...] = field(repr=False)
    kv_used: tuple[float, ...] = field(repr=False)
    assumptions: tuple[str, ...] = field(default=(), repr=False)
    pp: int = 1  # pipeline stages of tp GPUs each
    ep: int = 1  # expert-parallel GPUs a stage: tp x the data-parallel attention ranks
    host: str = ""  # the host path priced (serving.host), in one line

    @property
    def gpus(self) -> int:
        """GPUs the run holds: max(tp, ep) · pp a replica, every replica."""
        return max(self.tp, self.ep) * self.pp * self.replicas

    @property
    def kv_peak(self) -> float:
        """The largest share of the KV cache in use after any step."""
        return max(self.kv_used, default=0.0)

    def to_dict(self, requests: bool = True) -> dict[str, Any]:
        """The run as JSON-ready data (``requests=False`` leaves the per-request rows and the
        occupancy trace out)."""
        out: dict[str, Any] = {
            k: v for k, v in asdict(self).items()
            if k not in ("requests", "kv_times_ms", "kv_used", "assumptions")}
        out["kv_peak"] = self.kv_peak
        out["gpus"] = self.gpus
        if requests:
            out["requests"] = [{**asdict(r), "ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms,
                                "e2e_ms": r.e2e_ms} for r in self.requests]
            out["kv_occupancy"] = {"time_ms": list(self.kv_times_ms),
                                   "used": list(self.kv_used)}
        out["assumptions"] = list(self.assumptions)
        return out

    def to_json(self, path: str | Path | None = None, indent: int = 2) -> str:
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    def __str__(self) -> str:
        from .text import format_serving

        return format_serving(self)
