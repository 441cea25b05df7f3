"""The serving engine's schedule: the forward passes that prefill a batch's prompts under a
token budget, and the context lengths a decode step is averaged at."""

from __future__ import annotations

from collections import Counter

__all__ = ["CUDA_GRAPH_SIZES", "DECODE_POINTS", "MAX_NUM_SEQS", "TOKEN_BUDGET", "PrefillStep",
           "cuda_graph_mode", "decode_contexts", "prefill_order", "prefill_steps"]

TOKEN_BUDGET = 8192  # tokens a forward pass holds (vLLM's max_num_batched_tokens)
# sequences the scheduler runs at once (vLLM's max_num_seqs; its OpenAI server's default
# outside GPUs of 70 GiB or more, where recent versions raise it to 1024)
MAX_NUM_SEQS = 256
DECODE_POINTS = 5  # context lengths a plan prices decode attention at (Simpson's rule)
# vLLM V1's CUDA-graph batch sizes (vllm/config.py, cuda_graph_sizes default 512): a step of at
# most 512 tokens runs its graph padded to the next size; a larger one runs without graphs
CUDA_GRAPH_SIZES: tuple[int, ...] = (1, 2, 4, *range(8, 513, 8))


def cuda_graph_mode(tokens: int, prefill: bool) -> str:
    """How vLLM V1 runs a step of ``tokens`` tokens (its default ``cudagraph_mode``
    FULL_AND_PIECEWISE): ``"full"``, one CUDA graph with attention inside, for a decode-only
    step of at most the largest captured size; ``"piecewise"``, graphs between the layers'
    attention calls, which run eagerly, for a step holding a prefill chunk; ``"eager"`` above
    the largest captured size, every kernel launched from the host.

    >>> cuda_graph_mode(64, False), cuda_graph_mode(512, True), cuda_graph_mode(513, False)
    ('full', 'piecewise', 'eager')
    """
    if tokens > CUDA_GRAPH_SIZES[-1]:
        return "eager"
    return "piecewise" if prefill else "full"


PrefillStep = tuple[int, int, tuple[tuple[int, int], ...]]  # (tokens, finished, chunks)


def prefill_order(batch: int, prompt: int, budget: int) -> list[PrefillStep]:
    """The forward passes that prefill ``batch`` prompts of ``prompt`` tokens under a token
    budget, in the order they run: sequence after sequence, a prompt split where a pass fills;
    each (tokens, sequences that finish their prompt in it, ((chunk tokens, context after the
    chunk), ...)). A sequence's first token is sampled at the end of the pass that finishes it.

    >>> prefill_order(3, 3000, 8192)
    [(8192, 2, ((3000, 3000), (3000, 3000), (2192, 2192))), (808, 1, ((808, 3000),))]
    """
    steps: list[PrefillStep] = []
    seq, done = 0, 0
    while seq < batch:
        room, finished, chunks = budget, 0, []
        while room > 0 and seq < batch:
            take = min(room, prompt - done)
            done += take
            room -= take
            chunks.append((take, done))
            if done == prompt:
                seq, done, finished = seq + 1, 0, finished + 1
        steps.append((budget - room, finished, tuple(chunks)))
    return steps


def prefill_steps(batch: int, prompt: int, budget: int) -> Counter[PrefillStep]:
    """``prefill_order``'s passes counted: each distinct pass -> how many times it runs.

    >>> dict(prefill_steps(3, 3000, 8192))
    {(8192, 2, ((3000, 3000), (3000, 3000), (2192, 2192))): 1, (808, 1, ((808, 3000),)): 1}
    """
    return Counter(prefill_order(batch, prompt, budget))


def decode_contexts(prompt: int, gen: int, points: int = DECODE_POINTS
                    ) -> list[tuple[int, float]]:
    """(KV length, weight) pairs whose weighted sum averages a decode cost over the ``gen - 1``
    steps after the first token, at KV lengths prompt + 1 .. prompt + gen − 1: each step when
    there are at most ``points``, else Simpson's rule on ``points`` (odd) lengths.

    >>> decode_contexts(2048, 3)
    [(2049, 0.5), (2050, 0.5)]
    >>> [(c, round(w, 4)) for c, w in decode_contexts(2048, 257)]
    [(2049, 0.0833), (2113, 0.3333), (2176, 0.1667), (2240, 0.3333), (2304, 0.0833)]
    """
    steps = gen - 1
    if steps <= points:
        return [(prompt + t, 1.0 / steps) for t in range(1, steps + 1)]
    lo, hi = prompt + 1, prompt + steps
    intervals = points - 1 if points % 2 else points - 2
    coef = [1.0] + [4.0 if i % 2 else 2.0 for i in range(1, intervals)] + [1.0]
    total = 3.0 * intervals  # Σ coef = 3·intervals for composite Simpson
    return [(round(lo + (hi - lo) * i / intervals), c / total) for i, c in enumerate(coef)]
