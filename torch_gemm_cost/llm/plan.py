"""``plan_llm``: a serving plan of a decoder-only model served as vLLM serves it, for each batch
size: time to first token, time per output token, throughput and memory fit.

A step costs ``dense(tokens, sampled) + attention(its sequences) + collectives(tokens)``:

- ``dense``: the step captured once per (tokens, sampled) on the meta device (``llm.step``),
  one GPU's shard of the model (``llm.shard``), priced through the predict stage ``estimate``
  uses with the serving engine's records and CUDA graphs as explicit inputs (``llm.pricing``);
- ``attention``: the serving engine's attention kernel on each step's sequences
  (``llm.attention``), chunks of a prompt against their own context;
- ``collectives``: ``predict.collectives`` on the device's usual node.

Memory is in ``llm.memory``, the schedule of steps in ``llm.schedule``, what the plan assumes in
``llm.assumptions``; ``llm.text`` renders the plan.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..hardware.catalog import DeviceLike, DeviceSpec
from ..hardware.dtypes import ComputeDtype
from ..predict import Predictor, default_predictor
from ..predict.collectives import predict_collective_ms
from ..predict.ops import OpCostModel, load_op_costs
from ..predict.price import OpEstimate
from ..predict.profile import profile_predictor
from ..records.types import AttentionShape
from ..report import CostReport
from .assumptions import assumptions
from .attention import ServingAttention
from .checks import (
    MEMORY_UTILIZATION,
    check_device,
    check_kv_dtype,
    check_serving,
    check_weights,
    serving_dtype,
)
from .memory import (
    LOGIT_BYTES,
    activation_bytes_per_token,
    kv_cache_bytes,
    max_batch_fitting,
    weights_bytes,
)
from .model import config_key, config_of, meta_model
from .pricing import PricedStep, comm_ms, price_step
from .records import LlmPlanRow
from .result import LlmPlan
from .schedule import (
    MAX_NUM_SEQS,
    TOKEN_BUDGET,
    PrefillStep,
    decode_contexts,
    prefill_order,
    prefill_steps,
)
from .shape import ServingShape, padded_vocab
from .shard import shard_config
from .step import Step, captured_step

__all__ = ["plan_llm"]


def plan_llm(
    model_or_config: Any,
    *,
    device: DeviceLike,
    dtype: str | torch.dtype | None = None,
    prompt: int,
    gen: int,
    batches: Iterable[int] | int,
    tp: int = 1,
    weights: str | None = None,
    kv_dtype: str | None = None,
    token_budget: int = TOKEN_BUDGET,
    memory_utilization: float = MEMORY_UTILIZATION,
    max_num_seqs: int = MAX_NUM_SEQS,
    predictor: Predictor | None = None,
    progress: Callable[[str], None] | None = None,
) -> LlmPlan:
    """A serving plan of a causal LM on ``device`` for each batch size of ``batches``.

    ``model_or_config``: an HF config, a model holding one, a config dict or a config JSON's
    path; the model is built on the meta device, nothing is downloaded. ``dtype``: the
    activations' (bf16 or fp16; None: the config's, else bf16). ``prompt`` and ``gen``: tokens
    in and out per request. ``tp``: tensor-parallel GPUs (the device's usual node). ``weights``:
    None (the dtype), ``"int8"``, ``"int4"`` (weight-only) or ``"fp8"`` (weights and
    activations, on a device with fp8 tensor cores). ``kv_dtype``: None (the dtype) or
    ``"fp8"``. ``token_budget``: tokens a forward pass holds; ``memory_utilization``: the share
    of the GPU's memory (``DeviceSpec.mem_bytes``) the engine uses; ``max_num_seqs``: the most
    sequences the engine schedules at once, rows of larger batches flagged. ``predictor``: the
    GEMM predictor (the default hybrid). ``progress``: called with a line on each stage
    (building, capture, pricing a batch), for a caller to show; the plan itself prints nothing.
    """
    say = progress or _silent
    say("check: the device, the config and the sizes")
    target = check_device(device)
    spec = target.spec
    config = config_of(model_or_config)
    cd = serving_dtype(dtype, config)
    fmt = check_weights(weights, spec, cd)
    kv = check_kv_dtype(kv_dtype, cd)
    full = ServingShape.of(config)
    sizes = check_serving(full, prompt, gen, batches, token_budget, memory_utilization,
                          max_num_seqs)
    gpu_config = shard_config(config, tp)
    if tp > 1:  # fail before any capture if the node cannot hold the tensor-parallel group
        try:
            predict_collective_ms(spec, "all_reduce", size_bytes=2.0, num_gpus=tp)
        except ValueError as e:
            raise ValueError(f"tp={tp} on {spec.id}: {e}") from e
    key = config_key(gpu_config)
    say(f"build: the {getattr(config, 'model_type', 'causal LM')} model on the meta device")
    model = meta_model(key, cd.name)
    pricer = StepPricer(key, spec, cd, kv, fmt, tp, full, ServingShape.of(gpu_config),
                        predictor or profile_predictor(target) or default_predictor(), say)
    shape = pricer.shape
    held = weights_bytes(model, full.experts, fmt)
    vocab = padded_vocab(full.vocab)
    kv_seq = kv_cache_bytes(shape.windows, shape.kv_heads, shape.head_dim, prompt + gen, 1,
                            kv.in_bytes)
    fixed = token_budget * activation_bytes_per_token(shape, cd.in_bytes)
    usable = memory_utilization * float(spec.mem_bytes or 0.0)  # bytes, as the spec gives them
    mid = prompt + gen // 2
    rows, reports = [], []
    # every attention call of the plan predicted in one call of the attention model
    pricer.attention.times([(n, q, k) for b in sizes
                            for (_, _, chunks) in prefill_steps(b, prompt, token_budget)
                            for (q, k), n in Counter(chunks).items()]
                           + [(b, 1, ctx) for b in sizes for ctx, _ in decode_contexts(prompt,
                                                                                     gen)])
    for i, b in enumerate(sizes, 1):
        say(f"price: batch {b} ({i} of {len(sizes)}), prefill")
        pre = pricer.prefill(b, prompt, token_budget)
        say(f"price: batch {b} ({i} of {len(sizes)}), decode")
        step, p = pricer.dense(b, b)
        attn_dec = sum(w * pricer.attention.decode(b, ctx)[0]
                       for ctx, w in decode_contexts(prompt, gen))
        comm_dec = pricer.comm_ms(b, b)
        tpot = p.dense_ms + attn_dec + comm_dec
        request = pre.ttft_max_ms + (gen - 1) * tpot
        kv_bytes = kv_seq * b
        act = fixed + b * vocab * LOGIT_BYTES
        decode_bytes = p.weight_read_bytes + kv_cache_bytes(
            shape.windows, shape.kv_heads, shape.head_dim, mid, b, kv.in_bytes)
        rows.append(LlmPlanRow(
            batch=b, ttft_mean_ms=pre.ttft_mean_ms, ttft_max_ms=pre.ttft_max_ms, tpot_ms=tpot,
            tokens_per_s=b * gen / request * 1e3, request_ms=request, weights_bytes=held,
            kv_cache_bytes=kv_bytes, activation_bytes=act, fits=held + kv_bytes + act <= usable,
            above_max_num_seqs=b > max_num_seqs,
            prefill_steps=pre.steps, prefill_attention_ms=pre.attention_ms,
            prefill_comm_ms=pre.comm_ms, decode_attention_ms=attn_dec, decode_comm_ms=comm_dec,
            prefill_flops=pre.flops, decode_bytes=decode_bytes,
            roofline_ttft_ms=pre.roofline_ms,
            roofline_tpot_ms=decode_bytes / spec.dram_bw_bytes_per_s * 1e3))
        reports.append(decode_report(step, p, spec, pricer.predictor, cd, pricer.attention, b,
                                     mid))
    return LlmPlan(
        model=type(model).__name__, device=spec, dtype=cd.name,
        weights=fmt or cd.name, kv_dtype=kv.name, tp=tp, prompt=prompt, gen=gen,
        token_budget=token_budget, memory_utilization=float(memory_utilization),
        usable_bytes=usable,
        max_batch=max_batch_fitting(usable, held, fixed, kv_seq + vocab * LOGIT_BYTES,
                                    token_budget),
        max_num_seqs=max_num_seqs, rows=tuple(rows), attention_kernel=pricer.attention.kernel,
        predictor=f"{getattr(pricer.predictor, 'name', type(pricer.predictor).__name__)} "
                  f"v{getattr(pricer.predictor, 'version', '')}",
        assumptions=assumptions(tp, fmt, pricer.attention.kernel, token_budget,
                                memory_utilization, max_num_seqs),
        decode_reports=tuple(reports))


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


# priced dense steps, most recently used last; the predictor is kept so that its id stays its own
_PRICED: OrderedDict[tuple[Any, ...], tuple[Predictor, PricedStep]] = OrderedDict()
_PRICED_MAX = 128


class StepPricer:
    """One plan's forward passes priced: each distinct (tokens, sampled) dense step captured and
    priced once, attention per layer kind, and the tensor-parallel collectives."""

    def __init__(self, key: str, spec: DeviceSpec, cd: ComputeDtype, kv: ComputeDtype,
                 fmt: str | None, tp: int, full: ServingShape, shape: ServingShape,
                 predictor: Predictor, say: Callable[[str], None] | None = None) -> None:
        self.key, self.spec, self.cd, self.kv, self.fmt, self.tp = key, spec, cd, kv, fmt, tp
        self.full, self.shape, self.predictor = full, shape, predictor
        self.say = say or _silent
        self.costs: OpCostModel = load_op_costs()
        self.attention = ServingAttention(spec, shape, cd, kv)

    def dense(self, tokens: int, sampled: int) -> tuple[Step, PricedStep]:
        """The step of ``tokens`` tokens sampling ``sampled``, and its price but attention
        (shared by the plans of one process: a sweep prices each shape once)."""
        key = (self.key, self.cd.name, self.spec, id(self.predictor), self.fmt, self.kv.name,
               tokens, sampled)
        if key not in _PRICED:
            self.say(f"capture: a forward pass of {tokens} token{'s' * (tokens > 1)}, "
                     f"sampling {sampled}")
        step = captured_step(self.key, self.cd.name, tokens, sampled)
        if key in _PRICED:
            _PRICED.move_to_end(key)
        else:
            _PRICED[key] = (self.predictor, price_step(step, self.spec, self.predictor,
                                                       self.fmt, self.kv, self.costs))
            if len(_PRICED) > _PRICED_MAX:
                _PRICED.popitem(last=False)
        return step, _PRICED[key][1]

    def comm_ms(self, tokens: int, sampled: int) -> float:
        """Two all-reduces a layer and one after the embedding, and the logits' all-gather."""
        return comm_ms(self.spec, self.shape, self.full.vocab, self.tp, self.cd.in_bytes,
                       tokens, sampled)

    def prefill(self, batch: int, prompt: int, token_budget: int) -> Prefill:
        """Every prefill pass of ``batch`` prompts under the token budget, in order: a
        request's first token comes at the end of the pass that finishes its prompt."""
        clock = first_tokens = attn = comm = flops = roof = 0.0
        order = prefill_order(batch, prompt, token_budget)
        priced: dict[PrefillStep, tuple[float, float, float, float, float]] = {}
        for step in order:
            if step not in priced:
                priced[step] = self._prefill_pass(step)
            ms, a_ms, c_ms, f, r = priced[step]
            clock += ms
            first_tokens += step[1] * clock  # the requests whose prompt this pass finishes
            attn += a_ms
            comm += c_ms
            flops += f
            roof += r
        return Prefill(first_tokens / batch, clock, attn, comm, flops, roof, len(order))

    def _prefill_pass(self, step: PrefillStep) -> tuple[float, float, float, float, float]:
        """One prefill pass: (ms, attention ms, collectives ms, FLOPs, roofline ms)."""
        tokens, sampled, chunks = step
        _, p = self.dense(tokens, sampled)
        a_ms, a_flops = self.attention.prefill(chunks)
        c_ms = self.comm_ms(tokens, sampled)
        peak = self.spec.peak_flops_per_s(self.cd)
        return (p.dense_ms + a_ms + c_ms, a_ms, c_ms, p.flops + a_flops,
                p.roofline_ms + a_flops / peak * 1e3)


def decode_report(step: Step, p: PricedStep, spec: DeviceSpec, predictor: Predictor,
                  cd: ComputeDtype, attention: ServingAttention, batch: int, context: int
                  ) -> CostReport:
    """The decode step of ``batch`` sequences at ``context`` keys as a cost report of one GPU:
    each layer's attention op carries its call at that context (shape and time)."""
    s = attention.shape
    ops = []
    for o in p.ops:
        a = o.op.attention
        if a is None:
            ops.append(o)
            continue
        window = s.windows[_layer_of(o.op.module, len(s.windows))]
        shape = AttentionShape(batch=batch, heads=a.heads, kv_heads=a.kv_heads, q_len=1,
                               kv_len=context, head_dim=a.head_dim, head_dim_v=a.head_dim_v,
                               causal=True)
        ops.append(OpEstimate(replace(o.op, attention=shape),
                              attention.per_layer_ms(batch, context, window),
                              f"flash attention ({attention.kernel})"))
    return CostReport(
        model=step.model_name, device=spec, dtype=cd.name, mode="inference",
        predictor=getattr(predictor, "name", type(predictor).__name__),
        predictor_version=str(getattr(predictor, "version", "")), gemms=p.gemms,
        others=tuple(ops), config=step.config, module_types=step.module_types, compiled=True)


def _layer_of(module: str, layers: int) -> int:
    """The decoder layer index in a module path ("model.layers.3.self_attn" -> 3)."""
    for part in module.split("."):
        if part.isdigit() and int(part) < layers:
            return int(part)
    return 0


def _silent(message: str) -> None:
    """No progress shown."""
