"""The host's share of serving latency: the request's path through vLLM's API server, and the
engine core's host time a step.

vLLM V1 serves from two processes (vllm/v1/engine/async_llm.py, core.py). The API server is
one asyncio event loop: it receives a request over HTTP, tokenizes it and hands it to the
engine core over ZMQ (``AsyncLLM.add_request``); its ``output_handler`` task takes each step's
outputs from the engine core, detokenizes them (``OutputProcessor.process_outputs``) and the
request's stream handler writes each token to the client as a server-sent event. The engine
core steps on its own (scheduler, input preparation, the forward pass, the sampler), whether
or not the API server keeps up.

The model here, ``FrontEnd``: the API server is one first-come-first-served server. A request
takes ``request_ms`` of it when it arrives (the engine sees the request when that is done),
and every token a step samples takes ``token_ms`` of it from the step's end (the client sees
the token when that is done), jobs served in the order they arrive. The engine's step takes
``step_ms`` more than the GPU's time (host work not hidden behind the GPU). In a closed loop a
client sends its next request when it has seen the last token of its previous one.

Without a ``HostPath`` the server costs nothing: the engine sees a request as it arrives and
the client a token as the step that sampled it ends (the GPU's time alone).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from .workload import Request

__all__ = ["FrontEnd", "HostPath", "Seen", "host_assumption", "host_line"]


@dataclass(frozen=True)
class HostPath:
    """The host's costs, ms: ``request_ms`` of the API server a request (HTTP receive,
    tokenizing, the hand-off to the engine core), ``token_ms`` of it an output token
    (detokenizing, streaming), and ``step_ms`` of the engine core's host time a step, serial
    with the GPU's. ``source``: where the figures come from."""

    request_ms: float
    token_ms: float = 0.0
    step_ms: float = 0.0
    source: str = "given"

    def __post_init__(self) -> None:
        for name in ("request_ms", "token_ms", "step_ms"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
                raise ValueError(f"HostPath {name} must be a number of ms of at least 0, got "
                                 f"{v!r}; nearest good: 0")


@dataclass(frozen=True)
class Seen:
    """What a request's client saw: when it sent the request, its first token and its last
    (ms)."""

    sent_ms: float
    first_ms: float
    last_ms: float


# a job of the API server: (arrival ms, order of arrival, request, tokens it has then or -1)
_Job = tuple[float, int, Request, int]


class FrontEnd:
    """The API server between the clients and one engine, simulated job by job (see the
    module). ``concurrency``: a closed loop of that many clients, each sending its next
    request (in ``requests`` order) when it has seen the last token of its last; else every
    request is sent at its own ``arrival_ms``.

    The engine asks ``admit(now)`` for the requests it has by ``now``, ``next_ms()`` for when
    the next one reaches it while it has nothing to run, and tells ``tokens(now, ...)`` the
    tokens a step sampled; ``seen()`` is what every client saw once the run is over."""

    def __init__(self, requests: Sequence[Request], host: HostPath | None = None,
                 concurrency: int | None = None) -> None:
        self.host = host
        self._jobs: list[_Job] = []  # heap by arrival, then order of arrival
        self._order = 0
        self._free_ms = 0.0  # when the server is next free
        self._entered: deque[Request] = deque()  # handed to the engine, not yet admitted
        self._entered_ms: deque[float] = deque()
        self._unserved = 0  # requests sent, not yet through the server
        self._sent: dict[int, float] = {}
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        if concurrency is None:
            self._pending: deque[Request] = deque()
            for r in sorted(requests, key=lambda r: (r.arrival_ms, r.id)):
                self._send(r, r.arrival_ms)
        else:
            self._pending = deque(requests)
            for _ in range(min(concurrency, len(self._pending))):
                self._send(self._pending.popleft(), 0.0)

    @property
    def waiting(self) -> bool:
        """Whether any request has yet to reach the engine (sent or not)."""
        return bool(self._pending or self._entered or self._unserved)

    def admit(self, now: float) -> list[Request]:
        """The requests that reach the engine by ``now``, in the order they reach it."""
        self._serve(now)
        out = []
        while self._entered_ms and self._entered_ms[0] <= now:
            self._entered_ms.popleft()
            out.append(self._entered.popleft())
        return out

    def next_ms(self) -> float | None:
        """When the next request reaches the engine (None: none will before the engine
        samples a token). Called while the engine has nothing in flight, so no job can arrive
        before the server has served those it holds."""
        while not self._entered_ms and self._jobs:
            self._serve_one()
        return self._entered_ms[0] if self._entered_ms else None

    def tokens(self, now: float, sampled: Sequence[tuple[Request, int]]) -> None:
        """A step ending at ``now`` sampled these tokens: (request, its tokens now)."""
        for r, n in sampled:
            if self.host is None:  # a free server: the client sees the token now
                self._delivered(r, n, now)
            else:
                self._push(now, r, n)

    def seen(self) -> dict[int, Seen]:
        """Every request's times as its client saw them (the server runs to its end)."""
        self._serve(math.inf)
        return {i: Seen(self._sent[i], self._first[i], self._last[i]) for i in self._last}

    # ------------------------------------------------------------------ the server
    def _send(self, r: Request, at_ms: float) -> None:
        self._sent[r.id] = at_ms
        self._unserved += 1
        self._push(at_ms, Request(r.id, at_ms, r.prompt, r.gen), -1)

    def _push(self, at_ms: float, r: Request, tokens: int) -> None:
        heapq.heappush(self._jobs, (at_ms, self._order, r, tokens))
        self._order += 1

    def _serve(self, up_to_ms: float) -> None:
        """Serve every job that arrives by ``up_to_ms`` (their ends may fall after it)."""
        while self._jobs and self._jobs[0][0] <= up_to_ms:
            self._serve_one()

    def _serve_one(self) -> None:
        at_ms, _, r, tokens = heapq.heappop(self._jobs)
        host = self.host
        cost = 0.0 if host is None else host.request_ms if tokens < 0 else host.token_ms
        end = max(at_ms, self._free_ms) + cost
        self._free_ms = end
        if tokens < 0:  # the request reaches the engine
            self._unserved -= 1
            self._entered.append(r)
            self._entered_ms.append(end)
            return
        self._delivered(r, tokens, end)

    def _delivered(self, r: Request, tokens: int, at_ms: float) -> None:
        """The client of ``r`` sees its ``tokens``-th token at ``at_ms``."""
        self._first.setdefault(r.id, at_ms)
        if tokens >= r.gen:
            self._last[r.id] = at_ms
            if self._pending:  # the client sends its next request
                self._send(self._pending.popleft(), at_ms)


def host_line(host: HostPath | None) -> str:
    """The host path of a run, in one line."""
    if host is None:
        return ("host path unpriced: GPU time only (TTFT and latency are lower bounds; "
                "--host-profile prices it)")
    return (f"host path: {host.request_ms:g} ms a request, {host.token_ms:g} ms a streamed "
            f"token on the API server, {host.step_ms:g} ms a step on the engine core "
            f"(from {host.source})")


def host_assumption(host: HostPath | None) -> str:
    """What a run assumes of the host."""
    if host is None:
        return (
            "Host: unpriced. The times are the GPU's; not in them: the request's path through "
            "vLLM's API server (HTTP receive, tokenizing, the hand-off to the engine core over "
            "ZMQ; detokenizing and streaming each output token, in one asyncio process whose "
            "work queues as the token rate grows) and the engine core's host time a step "
            "(scheduler, input preparation, sampler) where the GPU does not hide it. The TTFT, "
            "TPOT and latency are lower bounds; on a small model the host's share can be the "
            "larger part of the TTFT. No public per-request or per-token figure is taken as a "
            "prior: a `vllm bench serve --save-result` JSON of the user's own server "
            "(host_profile=, --host-profile) prices it.")
    return (
        f"Host: vLLM's API server as one first-come-first-served server inside the event "
        f"simulation: a request takes {host.request_ms:g} ms of it before the engine sees it "
        f"(HTTP receive, tokenizing, the hand-off over ZMQ), an output token {host.token_ms:g} "
        "ms from the end of the step that sampled it before its client sees it (detokenizing, "
        "streaming); a closed loop's client sends its next request when it has seen the last "
        f"token of its last. The engine core adds {host.step_ms:g} ms of host time to every "
        f"step. From {host.source}; such figures hold for that host, vLLM version, model and "
        "tokenizer. A profile of one load sets the request's cost from its median TTFT and "
        "the step's from its median gap between tokens; the token's cost does not show at a "
        "load the server keeps up with, so it is 0 unless given. With replicas each engine "
        "has an API server of its own.")
