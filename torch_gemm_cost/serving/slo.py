"""The largest request rate a served model meets a latency objective at: bisection on the rate
of ``ServingEngine.run``, the same requests (lengths and arrival draws) at every rate."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..suggest import check_choice
from .result import PERCENTILES, ServingSim
from .simulate import ServingEngine

__all__ = ["SLO_METRICS", "RateUnderSlo", "max_rate_under_slo"]

SLO_METRICS = tuple(f"{m}_p{q}" for m in ("ttft", "tpot", "e2e") for q in PERCENTILES)


@dataclass(frozen=True)
class RateUnderSlo:
    """The largest rate found to meet every objective (0 where even the lowest rate tried
    misses one), its run, and the rate above it found to miss (None where none was tried)."""

    rate_qps: float
    sim: ServingSim | None
    miss_rate_qps: float | None
    slo_ms: Mapping[str, float]
    runs: int


def metric_ms(sim: ServingSim, metric: str) -> float:
    """``ttft_p99`` and the like of a run."""
    name, _, q = check_choice("SLO metric", metric, SLO_METRICS).partition("_")
    return float(getattr(getattr(sim, name), q))


def meets(sim: ServingSim, slo_ms: Mapping[str, float]) -> bool:
    return all(metric_ms(sim, m) <= limit for m, limit in slo_ms.items())


def max_rate_under_slo(engine: ServingEngine, slo_ms: Mapping[str, float], *,
                       lo_qps: float = 0.25, hi_qps: float = 1024.0, rel_tol: float = 0.02,
                       **workload: Any) -> RateUnderSlo:
    """The largest Poisson rate in [``lo_qps``, ``hi_qps``] whose run meets every objective
    of ``slo_ms`` (metric -> ms, metrics of ``SLO_METRICS``), to ``rel_tol``: the rate doubled
    from ``lo_qps`` until a run misses, then bisected. ``workload``: ``run``'s other
    arguments (prompt, gen, num_requests, seed, arrival)."""
    if not slo_ms:
        raise ValueError(f"give at least one objective, e.g. {{'ttft_p99': 500}}; metrics: "
                         f"{', '.join(SLO_METRICS)}")
    for m, limit in slo_ms.items():
        check_choice("SLO metric", m, SLO_METRICS)
        if not limit > 0 or math.isinf(limit):
            raise ValueError(f"SLO {m} must be a positive number of ms, got {limit!r}")
    runs = 0

    def run(rate: float) -> ServingSim:
        nonlocal runs
        runs += 1
        return engine.run(rate_qps=rate, **workload)

    best = run(lo_qps)
    if not meets(best, slo_ms):
        return RateUnderSlo(0.0, None, lo_qps, dict(slo_ms), runs)
    good, bad = lo_qps, None
    while bad is None and good < hi_qps:
        rate = min(2 * good, hi_qps)
        sim = run(rate)
        if meets(sim, slo_ms):
            good, best = rate, sim
        else:
            bad = rate
    while bad is not None and bad - good > rel_tol * good:
        rate = math.sqrt(good * bad)
        sim = run(rate)
        if meets(sim, slo_ms):
            good, best = rate, sim
        else:
            bad = rate
    return RateUnderSlo(good, best, bad, dict(slo_ms), runs)
