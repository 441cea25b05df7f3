"""Pipeline parallelism as vLLM runs it: the decoder layers split into stages
(``vllm/distributed/utils.py: get_pp_indices``), and batches in flight through the stages, at
most one a stage (V1's engine core keeps ``pipeline_parallel_size`` batches in its batch queue,
``vllm/v1/engine/core.py: step_with_batch_queue``).

A step's time on one stage is its share of the whole step (the stage's layers over the model's,
``stage_shares``) plus the send of its hidden states to the next stage; a batch's latency is
the sum over its stages; batches in flight follow one another stage by stage
(``pipelined_finish_ms``, a flow shop).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["check_pp", "decode_cycle_ms", "pipelined_finish_ms", "stage_layers",
           "stage_ms", "stage_shares"]


def check_pp(pp: object, layers: int) -> int:
    """``pp`` checked: a positive integer of at most the model's layers (vLLM splits any count
    of layers, unevenly where ``pp`` does not divide them, but a stage holds at least one)."""
    if isinstance(pp, bool) or not isinstance(pp, int) or pp < 1:
        raise ValueError(f"pp must be a positive integer, got {pp!r}; nearest good: 1")
    if pp > layers:
        raise ValueError(f"pp={pp} exceeds the model's {layers} decoder layers: a stage would "
                         f"hold none; nearest good pp: {layers}")
    return pp


def stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """The decoder layers of each stage, as vLLM's ``get_pp_indices`` splits them: evenly,
    the remainder one a stage from the second-to-last backwards (the last stage runs the final
    norm and the lm_head, the first the embedding).

    >>> stage_layers(32, 4), stage_layers(22, 4), stage_layers(61, 4)
    ((8, 8, 8, 8), (5, 6, 6, 5), (15, 15, 16, 15))
    """
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_shares(layers: int, pp: int) -> tuple[float, ...]:
    """Each stage's share of a step: its layers over the model's.

    >>> stage_shares(22, 4)
    (0.22727272727272727, 0.2727272727272727, 0.2727272727272727, 0.22727272727272727)
    """
    return tuple(n / layers for n in stage_layers(layers, pp))


def stage_ms(step_ms: float, shares: Sequence[float], send_ms: float) -> list[float]:
    """A step's time on each stage: its share of ``step_ms``, and the send of its hidden
    states to the next stage on every stage but the last.

    >>> stage_ms(10.0, (0.5, 0.5), 0.25)
    [5.25, 5.0]
    """
    last = len(shares) - 1
    return [step_ms * w + (send_ms if s < last else 0.0) for s, w in enumerate(shares)]


def pipelined_finish_ms(batches: Sequence[Sequence[float]]) -> list[float]:
    """When each batch, in order, leaves the last stage, given its time on each stage: a
    batch enters a stage when the stage is free and the batch has left the stage before (a
    flow shop, ``C(i, s) = max(C(i - 1, s), C(i, s - 1)) + t(i, s)``).

    >>> pipelined_finish_ms([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])   # 2, then one a step
    [2.0, 3.0, 4.0]
    >>> pipelined_finish_ms([[3.0], [2.0]])                         # one stage: the sum
    [3.0, 5.0]
    """
    free: list[float] = []
    out = []
    for times in batches:
        if not free:
            free = [0.0] * len(times)
        t = 0.0
        for s, dt in enumerate(times):
            t = max(t, free[s]) + dt
            free[s] = t
        out.append(t)
    return out


def decode_cycle_ms(times: Sequence[float], in_flight: int) -> float:
    """The time between two tokens of a sequence when ``in_flight`` micro-batches, each with
    ``times`` on the stages, cycle through the pipeline: a micro-batch's trip through every
    stage, or, when the busiest stage cannot serve every micro-batch in that time, its time
    for all of them.

    >>> decode_cycle_ms([2.0, 2.0], 2), decode_cycle_ms([1.0, 3.0], 2), decode_cycle_ms([5.0], 1)
    (4.0, 6.0, 5.0)
    """
    return max(sum(times), in_flight * max(times))
