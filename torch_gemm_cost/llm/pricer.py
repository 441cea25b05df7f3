"""A plan's forward passes priced: ``StepPricer`` captures and prices each distinct dense step
once (``llm.pricing``), adds attention (``llm.attention``), the launches vLLM's CUDA-graph mode
leaves (``schedule.cuda_graph_mode``) and the collectives (``llm.comm``), and runs the passes
through the pipeline stages (``llm.pipeline``)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..hardware.catalog import DeviceSpec
from ..hardware.dtypes import ComputeDtype
from ..predict import Predictor
from ..predict.ops import OpCostModel, load_op_costs
from .attention import ServingAttention
from .comm import StepCollectives
from .experts import routed
from .pipeline import decode_cycle_ms, pipelined_finish_ms, stage_ms, stage_shares
from .pricing import PricedStep, price_step
from .schedule import PrefillStep, cuda_graph_mode, decode_contexts, prefill_order
from .shape import ServingShape
from .step import Step, captured_step

__all__ = ["Decode", "Prefill", "StepPricer"]


@dataclass(frozen=True)
class Prefill:
    """A batch's prompts prefilled: the time to the first token, mean over the batch's
    requests and the last one's (every prefill pass), and what the passes are made of."""

    ttft_mean_ms: float
    ttft_max_ms: float
    attention_ms: float
    comm_ms: float
    flops: float
    roofline_ms: float
    steps: int


@dataclass(frozen=True)
class Decode:
    """A batch decoding: the time between two tokens of a sequence, and of it the attention's
    and the collectives' (sends between stages included), for one micro-batch of
    ``micro_batch`` sequences, ``in_flight`` of them through the pipeline."""

    tpot_ms: float
    attention_ms: float
    comm_ms: float
    micro_batch: int
    in_flight: int


# priced dense steps, most recently used last; the predictor is kept so that its id stays its own
_PRICED: OrderedDict[tuple[Any, ...], tuple[Predictor, PricedStep]] = OrderedDict()
_PRICED_MAX = 128


def _silent(message: str) -> None:
    """No progress shown."""


class StepPricer:
    """One plan's forward passes priced: each distinct (tokens, sampled, graph) dense step
    captured and priced once, attention per layer kind, launches, the collectives and the
    pipeline's stages."""

    def __init__(self, key: str, spec: DeviceSpec, cd: ComputeDtype, kv: ComputeDtype,
                 fmt: str | None, full: ServingShape, shape: ServingShape, predictor: Predictor,
                 comm: StepCollectives, say: Callable[[str], None] | None = None) -> None:
        self.key, self.spec, self.cd, self.kv, self.fmt = key, spec, cd, kv, fmt
        self.ep = comm.ep  # the key names the config, and the config its expert parallelism
        self.full, self.shape, self.predictor, self.comm = full, shape, predictor, comm
        self.say = say or _silent
        self.costs: OpCostModel = load_op_costs()
        self.attention = ServingAttention(spec, shape, cd, kv)
        self.shares = stage_shares(shape.layers, comm.pp)

    def dense(self, tokens: int, sampled: int, graph: bool = True) -> tuple[Step, PricedStep]:
        """The step of ``tokens`` tokens sampling ``sampled``, and its price but attention, in
        a CUDA graph or eagerly (shared by the plans of one process)."""
        key = (self.key, self.cd.name, self.spec, id(self.predictor), self.fmt, self.kv.name,
               tokens, sampled, graph)
        if key not in _PRICED:
            self.say(f"capture: a forward pass of {tokens} token{'s' * (tokens > 1)}, "
                     f"sampling {sampled}")
        step = captured_step(self.key, self.cd.name, tokens, sampled)
        if self.ep is not None:
            step = routed(step, self.ep, tokens)
        if key in _PRICED:
            _PRICED.move_to_end(key)
        else:
            _PRICED[key] = (self.predictor, price_step(step, self.spec, self.predictor,
                                                       self.fmt, self.kv, self.costs, graph))
            if len(_PRICED) > _PRICED_MAX:
                _PRICED.popitem(last=False)
        return step, _PRICED[key][1]

    def launch_ms(self, tokens: int, prefill: bool) -> float:
        """The launch gaps a step pays beyond its kernels' own times: none in a full CUDA graph,
        one a layer for its attention call outside the piecewise graphs or in an eager step
        (the op model's launch gap); an eager step's other kernels carry theirs in ``dense``."""
        if cuda_graph_mode(tokens, prefill) == "full":
            return 0.0
        return self.shape.layers * self.costs.launch_ms

    def stages(self, latency_ms: float, tokens: int) -> list[float]:
        """A step's time on each pipeline stage (one stage without pipeline parallelism)."""
        return stage_ms(latency_ms, self.shares, self.comm.send_ms(tokens))

    def prefill(self, batch: int, prompt: int, token_budget: int) -> Prefill:
        """Every prefill pass of ``batch`` prompts under the token budget, in order, through
        the pipeline's stages (each pass a batch in flight): a request's first token comes at
        the end of the pass that finishes its prompt."""
        order = prefill_order(batch, prompt, token_budget)
        priced: dict[PrefillStep, tuple[float, float, float, float, float]] = {}
        for step in order:
            if step not in priced:
                priced[step] = self._prefill_pass(step)
        ends = pipelined_finish_ms([self.stages(priced[step][0], step[0]) for step in order])
        first_tokens = sum(step[1] * end for step, end in zip(order, ends))
        attn, comm, flops, roof = (sum(priced[step][i] for step in order) for i in (1, 2, 3, 4))
        return Prefill(first_tokens / batch, ends[-1], attn, comm, flops, roof, len(order))

    def _prefill_pass(self, step: PrefillStep) -> tuple[float, float, float, float, float]:
        """One prefill pass: (ms through every stage but the sends, attention ms, collectives
        ms, FLOPs, roofline ms)."""
        tokens, sampled, chunks = step
        _, p = self.dense(tokens, sampled, cuda_graph_mode(tokens, True) != "eager")
        a_ms, a_flops = self.attention.prefill(chunks)
        c_ms = self.comm.step_ms(tokens, sampled)
        peak = self.spec.peak_flops_per_s(self.cd)
        return (p.dense_ms + a_ms + c_ms + self.launch_ms(tokens, True), a_ms,
                c_ms + (self.comm.pp - 1) * self.comm.send_ms(tokens), p.flops + a_flops,
                p.roofline_ms + a_flops / peak * 1e3)

    def decode(self, batch: int, prompt: int, gen: int) -> tuple[Decode, Step, PricedStep]:
        """A decode step of ``batch`` sequences averaged over the ``gen - 1`` steps after the
        first token: the batch in ``min(pp, batch)`` micro-batches in flight, each of
        ⌈batch / in flight⌉ sequences; with its dense step and price (for the layer report)."""
        in_flight = min(self.comm.pp, batch)
        m = math.ceil(batch / in_flight)
        step, p = self.dense(m, m, cuda_graph_mode(m, False) != "eager")
        attn = sum(w * self.attention.decode(m, ctx)[0] for ctx, w in decode_contexts(prompt,
                                                                                      gen))
        tp_ms = self.comm.step_ms(m, m)
        latency = p.dense_ms + attn + tp_ms + self.launch_ms(m, False)
        tpot = decode_cycle_ms(self.stages(latency, m), in_flight)
        comm = tp_ms + (self.comm.pp - 1) * self.comm.send_ms(m)
        return Decode(tpot, attn, comm, m, in_flight), step, p
