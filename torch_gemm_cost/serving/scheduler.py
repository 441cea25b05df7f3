"""vLLM V1's scheduler, step by step (vllm/v1/core/sched/scheduler.py, FCFS): continuous
batching, chunked prefill mixed with decode under a token budget, at most ``max_num_seqs``
running requests, KV blocks of ``block_size`` tokens, and preemption by recomputation when the
cache fills. What a step costs comes from a ``StepTimer``; this module only counts tokens.

Each step:

1. the running requests, oldest first, each get the tokens it still lacks (1 while decoding,
   the rest of its prompt while prefilling), at most what is left of the budget. Where the
   cache cannot hold them, the newest running request is preempted (its blocks freed, its
   computed tokens dropped, back to the front of the waiting queue), until they fit or the
   request itself was the one preempted;
2. if no request was preempted, waiting requests (arrived, oldest first) start while the
   budget and ``max_num_seqs`` allow and the cache holds their first chunk;
3. the step runs; a request whose tokens are all computed samples one: its first is its
   time to first token, its ``gen``-th finishes it and frees its blocks.

Every scheduled request samples a token in vLLM V1 (a partial prefill's is dropped), so a step
samples as many tokens as it schedules requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .host import FrontEnd, HostPath
from .workload import Request

__all__ = ["BLOCK_SIZE", "EngineLimits", "Outcome", "StageTimer", "StepBatch", "StepTimer",
           "run_engine"]

BLOCK_SIZE = 16  # tokens a KV-cache block holds (vLLM's default block_size on CUDA)


@dataclass(frozen=True)
class StepBatch:
    """What one step runs: each decoding request's context (its KV length after the step), and
    each prefill chunk as (tokens, context after the chunk)."""

    decode_contexts: tuple[int, ...]
    prefill_chunks: tuple[tuple[int, int], ...]

    @property
    def tokens(self) -> int:
        return len(self.decode_contexts) + sum(q for q, _ in self.prefill_chunks)

    @property
    def sampled(self) -> int:
        return len(self.decode_contexts) + len(self.prefill_chunks)


StepTimer = Callable[[StepBatch], float]  # a step's time in ms
# a step's time on each pipeline stage (ms), from its batch and its StepTimer's time
StageTimer = Callable[[StepBatch, float], list[float]]


@dataclass(frozen=True)
class EngineLimits:
    """The scheduler's limits: ``token_budget`` (max_num_batched_tokens), ``max_num_seqs``,
    and the KV cache's ``kv_blocks`` of ``block_size`` tokens."""

    token_budget: int
    max_num_seqs: int
    kv_blocks: int
    block_size: int = BLOCK_SIZE


@dataclass
class _Live:
    """A request in the engine (mutable: the scheduler's own state)."""

    req: Request
    computed: int = 0  # tokens whose KV is in the cache
    output: int = 0  # tokens generated
    blocks: int = 0
    first_token_ms: float | None = None
    preemptions: int = 0

    @property
    def tokens(self) -> int:
        return self.req.prompt + self.output


@dataclass(frozen=True)
class Outcome:
    """A finished request: when it arrived, got its first token and finished (ms), and how
    often it was preempted."""

    request: Request
    first_token_ms: float
    finish_ms: float
    preemptions: int


@dataclass
class EngineTrace:
    """What a run saw, step by step: each step's end (ms), KV blocks in use after it, and the
    tokens it ran."""

    step_end_ms: list[float] = field(default_factory=list)
    blocks_used: list[int] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    preemptions: int = 0


def run_engine(requests: Sequence[Request], limits: EngineLimits, step_ms: StepTimer,
               concurrency: int | None = None, stages: StageTimer | None = None,
               host: HostPath | None = None) -> tuple[list[Outcome], EngineTrace]:
    """Serve ``requests`` to the end. With ``concurrency``, a closed loop: that many clients,
    each sending its next request (in ``requests`` order) when its last one finishes; the
    requests' own arrival times are then ignored.

    ``host``: the API server the requests and their tokens pass through, and the engine's
    host time a step (``serving.host``); the outcomes are then the times the clients saw.
    None: the GPU's time alone. NB: with ``stages`` the step's host time is shared out among
    them as the rest of the step is, where the engine core spends it once a batch.

    ``stages``: the engine's pipeline stages, a step's time on each from its batch and its
    ``step_ms`` (None: one stage). As vLLM V1's engine core does (``step_with_batch_queue``),
    up to one batch a stage is in flight: the scheduler forms the next batch while the queue
    has room, of the requests with tokens not yet scheduled (a decoding request's next token
    waits for its last; a prompt's next chunk may follow its last one), and otherwise waits
    for the oldest batch to finish. A batch enters a stage once the stage is free."""
    door = FrontEnd(requests, host, concurrency)
    if host is not None and host.step_ms:
        gpu_ms, step_ms = step_ms, lambda batch: gpu_ms(batch) + host.step_ms
    arrived: deque[_Live] = deque()
    running: list[_Live] = []
    free = limits.kv_blocks
    now = 0.0
    done: list[Outcome] = []
    trace = EngineTrace()
    bs = limits.block_size
    timer = stages or (lambda batch, ms: [ms])
    stage_free: list[float] = []  # when each stage is next free
    # batches in flight, oldest first: (end ms, [(request, its preemptions then, samples)])
    in_flight: deque[tuple[float, list[tuple[_Live, int, bool]], int]] = deque()
    depth = 1
    while door.waiting or arrived or running or in_flight:
        arrived.extend(_Live(r) for r in door.admit(now))
        if not arrived and not running and not in_flight:  # idle until the next arrival
            nxt = door.next_ms()
            if nxt is None:
                raise RuntimeError("the engine is idle and no request is on its way")
            now = nxt
            continue
        scheduled: list[tuple[_Live, int]] = []
        if len(in_flight) < depth:
            scheduled, freed = _schedule(running, arrived, limits, free, trace)
            free = freed
        if scheduled:
            batch = StepBatch(
                decode_contexts=tuple(live.computed + n for live, n in scheduled
                                      if n == 1 and live.computed >= live.req.prompt),
                prefill_chunks=tuple((n, live.computed + n) for live, n in scheduled
                                     if not (n == 1 and live.computed >= live.req.prompt)))
            times = timer(batch, step_ms(batch))
            if not stage_free:
                stage_free, depth = [0.0] * len(times), len(times)
            t = now
            for i, dt in enumerate(times):
                t = max(t, stage_free[i]) + dt
                stage_free[i] = t
            entries = []
            for live, n in scheduled:
                live.computed += n
                entries.append((live, live.preemptions, live.computed >= live.tokens))
            in_flight.append((t, entries, batch.tokens))
            continue
        if not in_flight:
            if not running and arrived:
                r = arrived[0].req
                raise ValueError(f"request {r.id} ({r.prompt} + {r.gen} tokens) cannot start: "
                                 f"the KV cache holds {limits.kv_blocks} blocks of {bs} tokens")
            nxt = door.next_ms()
            now = nxt if nxt is not None else now
            continue
        end, entries, tokens = in_flight.popleft()  # wait for the oldest batch
        now = max(now, end)
        sampled = []
        for live, preemptions, samples in entries:
            if not samples or live.preemptions != preemptions:  # a partial chunk, or dropped
                continue
            live.output += 1
            sampled.append((live.req, live.output))
            if live.first_token_ms is None:
                live.first_token_ms = now
            if live.output >= live.req.gen:
                running.remove(live)
                free += live.blocks
                done.append(Outcome(live.req, live.first_token_ms, now, live.preemptions))
        door.tokens(now, sampled)
        trace.step_end_ms.append(now)
        trace.blocks_used.append(limits.kv_blocks - free)
        trace.step_tokens.append(tokens)
    seen = door.seen()
    done = [Outcome(Request(o.request.id, seen[o.request.id].sent_ms, o.request.prompt,
                            o.request.gen), seen[o.request.id].first_ms,
                    seen[o.request.id].last_ms, o.preemptions) for o in done]
    return sorted(done, key=lambda o: o.request.id), trace


def _schedule(running: list[_Live], arrived: deque[_Live], limits: EngineLimits, free: int,
              trace: EngineTrace) -> tuple[list[tuple[_Live, int]], int]:
    """One step's requests and their new tokens, and the free KV blocks after: the running
    requests oldest first (the newest preempted while the cache cannot hold them), then, if
    none was preempted, waiting ones while the budget, ``max_num_seqs`` and the cache allow.
    A request with no token left to schedule (in flight) is passed over."""
    bs = limits.block_size
    budget = limits.token_budget
    scheduled: list[tuple[_Live, int]] = []
    preempted = False
    i = 0
    while i < len(running) and budget > 0:
        live = running[i]
        n = min(live.tokens - live.computed, budget)
        if n <= 0:
            i += 1
            continue
        need = -(-(live.computed + n) // bs) - live.blocks
        itself = False
        while need > free and not itself:  # preempt the newest running request
            victim = running.pop()
            free += victim.blocks
            victim.blocks, victim.computed = 0, 0
            victim.preemptions += 1
            trace.preemptions += 1
            arrived.appendleft(victim)
            preempted, itself = True, victim is live
            scheduled = [(q, m) for q, m in scheduled if q is not victim]
        if itself:
            break
        live.blocks += need
        free -= need
        scheduled.append((live, n))
        budget -= n
        i += 1
    if not preempted:
        while arrived and budget > 0 and len(running) < limits.max_num_seqs:
            live = arrived[0]
            n = min(live.tokens - live.computed, budget)
            need = -(-(live.computed + n) // bs) - live.blocks
            if need > free:
                break
            arrived.popleft()
            running.append(live)
            live.blocks += need
            free -= need
            scheduled.append((live, n))
            budget -= n
    return scheduled, free

