"""A pipeline's step, scheduled op by op: Megatron-LM's 1F1B schedule (PipeDream-Flush) and its
interleaved variant (Narayanan et al. 2021, §2.2).

Each of ``pp`` GPUs holds ``v`` chunks of consecutive layers (virtual stages s = chunk·pp + gpu:
the interleaved schedule for v > 1). Every micro-batch runs forward through the virtual stages
in order and backward in reverse; a forward waits for the previous stage's forward of the same
micro-batch and the point-to-point send after it, a backward for the next stage's backward
(the last stage's for its own forward). Each GPU runs its ops in Megatron's order:

- 1F1B: ``pp - gpu - 1`` warm-up forwards, then one forward and one backward in turn, then the
  remaining backwards (megatron/core/pipeline_parallel/schedules.py,
  forward_backward_pipelining_without_interleaving);
- interleaved: ``(pp - gpu - 1)·2 + (v - 1)·pp`` warm-up forwards, micro-batches taken pp at a
  time through each chunk in turn (forward_backward_pipelining_with_interleaving; the
  micro-batches must be a multiple of pp).

The step ends when the last GPU's last backward ends. With equal stages and no sends, 1F1B
takes (m + pp - 1)·(t_f + t_b): the bubble is (pp - 1)/m of the ideal m·(t_f + t_b); the
interleaved schedule cuts it to (pp - 1)/(m·v).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PipelineRun", "in_flight", "op_order", "run_pipeline"]


@dataclass(frozen=True)
class PipelineRun:
    """A scheduled step: when it ends, and each GPU's busy time."""

    makespan_ms: float
    busy_ms: tuple[float, ...]  # per GPU: the sum of its ops' times
    end_ms: tuple[float, ...]  # per GPU: when its last op ends


@functools.lru_cache(maxsize=4096)
def op_order(pp: int, v: int, m: int, gpu: int) -> tuple[tuple[str, int, int], ...]:
    """The ops GPU ``gpu`` runs, in order: ("F" or "B", chunk, micro-batch). Cached: a search
    schedules many layouts of the same (pp, v, m)."""
    total = m * v
    if v == 1:
        warm = min(pp - gpu - 1, m)
    else:
        warm = min((pp - gpu - 1) * 2 + (v - 1) * pp, total)

    def forward(k: int) -> tuple[str, int, int]:
        if v == 1:
            return "F", 0, k
        group, within = divmod(k, pp * v)
        return "F", within // pp, group * pp + within % pp

    def backward(k: int) -> tuple[str, int, int]:
        if v == 1:
            return "B", 0, k
        group, within = divmod(k, pp * v)
        return "B", v - 1 - within // pp, group * pp + within % pp

    ops = [forward(k) for k in range(warm)]
    for i in range(total - warm):
        ops.append(forward(warm + i))
        ops.append(backward(i))
    ops += [backward(k) for k in range(total - warm, total)]
    return tuple(ops)


def in_flight(pp: int, v: int, m: int, gpu: int) -> int:
    """The most chunks' activations GPU ``gpu`` holds at once: forwards run whose backward has
    not (1F1B: min(pp - gpu, m) micro-batches)."""
    held = peak = 0
    for kind, _, _ in op_order(pp, v, m, gpu):
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


def run_pipeline(pp: int, v: int, m: int, forward_ms: Sequence[float],
                 backward_ms: Sequence[float], send_ms: Sequence[float]) -> PipelineRun:
    """The step of ``m`` micro-batches over ``pp`` GPUs of ``v`` chunks each. ``forward_ms``,
    ``backward_ms``: one micro-batch's time on each virtual stage (pp·v of them, in model order);
    ``send_ms``: the send from virtual stage s to s + 1 (pp·v - 1 of them; the same back)."""
    stages = pp * v
    if not len(forward_ms) == len(backward_ms) == stages or len(send_ms) != stages - 1:
        raise ValueError(f"need {stages} stage times and {stages - 1} sends, got "
                         f"{len(forward_ms)}, {len(backward_ms)} and {len(send_ms)}")
    if v > 1 and m % pp:
        raise ValueError(f"the interleaved schedule needs micro-batches a multiple of pp={pp}, "
                         f"got {m}")
    orders = [op_order(pp, v, m, g) for g in range(pp)]
    done: dict[tuple[str, int, int], float] = {}  # (kind, virtual stage, micro-batch) -> end
    free = [0.0] * pp
    nxt = [0] * pp
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for g in range(pp):
            while nxt[g] < len(orders[g]):
                kind, chunk, mb = orders[g][nxt[g]]
                s = chunk * pp + g
                if kind == "F":
                    dep = ("F", s - 1, mb) if s > 0 else None
                    lag = send_ms[s - 1] if s > 0 else 0.0
                    cost = forward_ms[s]
                else:
                    dep = ("B", s + 1, mb) if s < stages - 1 else ("F", s, mb)
                    lag = send_ms[s] if s < stages - 1 else 0.0
                    cost = backward_ms[s]
                if dep is not None and dep not in done:
                    break
                start = max(free[g], done[dep] + lag if dep is not None else 0.0)
                free[g] = start + cost
                done[(kind, s, mb)] = free[g]
                nxt[g] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"the pipeline schedule (pp={pp}, v={v}, m={m}) deadlocked")
    busy = tuple(m * sum(forward_ms[c * pp + g] + backward_ms[c * pp + g] for c in range(v))
                 for g in range(pp))
    return PipelineRun(max(free), busy, tuple(free))
