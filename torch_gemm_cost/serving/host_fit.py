"""A host profile (``serving.host.HostPath``) from one ``vllm bench serve --save-result`` run
of the user's own server (``measured.vllm_bench``), at the load it was measured at:

1. the run is simulated on the GPU alone (no host path), its requests' lengths and load as
   measured (``completed`` requests, at most ``MAX_REQUESTS``);
2. ``step_ms``, the engine core's host time a step not hidden behind the GPU: the measured
   median gap between tokens less the simulated median TPOT, 0 where the GPU's alone is as long;
3. ``request_ms``, the API server's time a request: the cost at which the simulation with the
   host path (the server and its queue inside the event simulation, ``serving.host``) meets
   the measured median TTFT, by bisection between 0 and that TTFT (0 where even the GPU's
   alone is as long).

``token_ms``, the API server's time a streamed token, is not read off one load where the
server keeps up: one token a step at concurrency 1 streams while the next step runs, so it
moves neither the gap between tokens nor, apart from the first token's, the TTFT. It is 0
unless given (a first token's streaming is then in ``request_ms``; a given one is taken out
of it by the bisection).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from ..measured.vllm_bench import BenchServe, read_vllm_bench
from .host import HostPath
from .result import ServingSim
from .workload import Lengths

__all__ = ["MAX_REQUESTS", "host_from_bench", "host_path_of"]

MAX_REQUESTS = 1000  # requests of a profile's run simulated at most
TOLERANCE_MS = 0.01  # the bisection's last bracket on request_ms


class Serves(Protocol):
    """A served model (``simulate.ServingEngine``): a copy with another host path, and a run."""

    def with_host(self, host: HostPath | None) -> Serves: ...

    def run(self, *, rate_qps: float | None = ..., concurrency: int | None = ...,
            prompt: Any = ..., gen: Any = ..., num_requests: int = ...) -> ServingSim: ...


def host_path_of(profile: HostPath | BenchServe | str | os.PathLike[str], engine: Serves,
                 token_ms: float = 0.0) -> HostPath:
    """A ``HostPath`` as given, or calibrated from a ``vllm bench serve`` result (a file or
    read)."""
    if isinstance(profile, HostPath):
        if token_ms:
            raise ValueError(f"a HostPath states its own token_ms ({profile.token_ms:g}); the "
                             f"token cost {token_ms:g} ms is for a calibrated profile: give "
                             "HostPath(..., token_ms=...) instead")
        return profile
    HostPath(0.0, token_ms)  # a bad token_ms named before the calibration runs
    bench = profile if isinstance(profile, BenchServe) else read_vllm_bench(profile)
    return host_from_bench(engine, bench, token_ms)


def _lengths(values: tuple[int, ...], what: str) -> int | Lengths:
    if len(set(values)) == 1:
        return values[0]
    return Lengths("file", values=values, path=what)


def bench_workload(bench: BenchServe) -> dict[str, Any]:
    """``ServingEngine.run``'s arguments for the measured run: its load and lengths."""
    if bench.concurrency is not None and bench.rate_qps is not None:
        raise ValueError(f"{bench.source}: a rate ({bench.rate_qps:g} QPS) under a concurrency "
                         f"cap ({bench.concurrency}) is not simulated; profile a closed loop "
                         "(--request-rate inf --max-concurrency C) or a Poisson rate")
    load: dict[str, Any] = {"concurrency": bench.concurrency} if bench.concurrency is not None \
        else {"rate_qps": bench.rate_qps}
    return {**load, "prompt": _lengths(bench.prompt_lens, f"{bench.source} input_lens"),
            "gen": _lengths(bench.output_lens, f"{bench.source} output_lens"),
            "num_requests": min(bench.completed, MAX_REQUESTS)}


def host_from_bench(engine: Serves, bench: BenchServe, token_ms: float = 0.0) -> HostPath:
    """The host path that, simulated with ``engine`` at the load ``bench`` measured, gives its
    median TTFT and gap between tokens (see the module)."""
    workload = bench_workload(bench)
    gpu = engine.with_host(None).run(**workload)
    step_ms = max(0.0, bench.itl_p50_ms - gpu.tpot.p50)

    def ttft_ms(request_ms: float) -> float:
        host = HostPath(request_ms, token_ms, step_ms)
        return engine.with_host(host).run(**workload).ttft.p50

    lo, hi = 0.0, bench.ttft_p50_ms
    if ttft_ms(lo) >= bench.ttft_p50_ms:
        hi = 0.0
    while hi - lo > TOLERANCE_MS:
        mid = (lo + hi) / 2
        if ttft_ms(mid) < bench.ttft_p50_ms:
            lo = mid
        else:
            hi = mid
    lengths = f"prompt {workload['prompt']}, gen {workload['gen']}"
    return HostPath(round((lo + hi) / 2, 3), token_ms, round(step_ms, 3),
                    source=f"{bench.source} ({bench.load}, {lengths}: TTFT p50 "
                           f"{bench.ttft_p50_ms:g} ms, ITL p50 {bench.itl_p50_ms:g} ms)")
