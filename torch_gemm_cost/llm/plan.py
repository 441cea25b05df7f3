"""``plan_llm``: a serving plan of a decoder-only model served as vLLM serves it, for each batch
size: time to first token, time per output token, throughput and memory fit.

A step costs ``dense(tokens, sampled) + attention(its sequences) + launches + collectives``:

- ``dense``: the step captured once per (tokens, sampled) on the meta device (``llm.step``),
  one GPU's shard of the model (``llm.shard``), priced through the predict stage ``estimate``
  uses with the serving engine's records and CUDA graphs as explicit inputs (``llm.pricing``);
- ``attention``: the serving engine's attention kernel on each step's sequences
  (``llm.attention``), chunks of a prompt against their own context;
- ``launches``: what vLLM's CUDA-graph mode leaves to the host (``schedule.cuda_graph_mode``);
- ``collectives``: ``llm.comm``, by the collective model on the device's usual node or from a
  measured profile.

With pipeline parallelism each step is split over the stages and passes through them
(``llm.pipeline``); ``llm.pricer`` prices the passes. Memory is in ``llm.memory``, the schedule
of steps in ``llm.schedule``, what the plan assumes in ``llm.assumptions``; ``llm.text``
renders the plan.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import torch

from ..hardware.catalog import DeviceLike, DeviceSpec
from ..hardware.dtypes import ComputeDtype
from ..predict import Predictor, default_predictor
from ..predict.comm_host import check_comm_host, with_nics
from ..predict.comm_profile import CommProfile, load_comm_profile
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
from .comm import StepCollectives
from .experts import check_ep
from .memory import (
    LOGIT_BYTES,
    activation_bytes_per_token,
    kv_cache_bytes,
    max_batch_fitting,
    stage_weights_bytes,
)
from .model import config_key, config_of, meta_model
from .pipeline import check_pp, stage_layers
from .pricer import StepPricer
from .pricing import PricedStep
from .records import LlmPlanRow
from .result import LlmPlan
from .schedule import MAX_NUM_SEQS, TOKEN_BUDGET, decode_contexts, prefill_steps
from .shape import ServingShape, padded_vocab
from .shard import shard_config
from .step import Step

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
    pp: int = 1,
    ep: int = 1,
    weights: str | None = None,
    kv_dtype: str | None = None,
    token_budget: int = TOKEN_BUDGET,
    memory_utilization: float = MEMORY_UTILIZATION,
    max_num_seqs: int = MAX_NUM_SEQS,
    comm_profile: CommProfile | str | os.PathLike[str] | None = None,
    comm_host: str = "fitted",
    nics_per_node: int | None = None,
    nic_gbps: float | None = None,
    predictor: Predictor | None = None,
    progress: Callable[[str], None] | None = None,
) -> LlmPlan:
    """A serving plan of a causal LM on ``device`` for each batch size of ``batches``.

    ``model_or_config``: an HF config, a model holding one, a config dict or a config JSON's
    path; the model is built on the meta device, nothing is downloaded. ``dtype``: the
    activations' (bf16 or fp16; None: the config's, else bf16). ``prompt`` and ``gen``: tokens
    in and out per request. ``tp``: tensor-parallel GPUs a stage (the device's usual node);
    ``pp``: pipeline stages (vLLM's pipeline_parallel_size; ``tp`` · ``pp`` GPUs in all).
    ``ep``: expert-parallel GPUs of an MoE (vLLM's --enable-expert-parallel, EP = TP × DP): a
    multiple of ``tp`` dividing the experts, ep / tp data-parallel attention ranks each serving
    its share of a batch (``llm.experts``; ``ep`` · ``pp`` GPUs in all).
    ``weights``: None (the dtype), ``"int8"``, ``"int4"`` (weight-only), ``"fp8"`` (weights and
    activations, on a device with fp8 tensor cores), ``"w4a8"``, ``"nvfp4"`` or ``"mxfp4"``
    (``llm.weights``). ``kv_dtype``: None (the dtype) or ``"fp8"``. ``token_budget``: tokens a
    forward pass holds; ``memory_utilization``: the share of the GPU's memory
    (``DeviceSpec.mem_bytes``) the engine uses; ``max_num_seqs``: the most sequences the engine
    schedules at once, rows of larger batches flagged. ``comm_profile``: a collective profile
    (``torch-gemm-cost calibrate-comm``, or its JSON file) that prices the collectives it
    measured instead of the collective model; ``comm_host``, ``nics_per_node`` and ``nic_gbps``
    what the user states of the cluster's network for the rest, as ``plan_training`` takes them
    (``predict.comm_host``). ``predictor``: the GEMM predictor (the default
    hybrid). ``progress``: called with a line on each stage (building, capture, pricing a
    batch), for a caller to show; the plan itself prints nothing.
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
    check_pp(pp, full.layers)
    experts = check_ep(ep, tp, full)
    dp = experts.dp if experts is not None else 1
    gpu_config = shard_config(config, tp, experts)
    shape = ServingShape.of(gpu_config)
    profile = load_comm_profile(comm_profile) if comm_profile is not None else None
    comm = StepCollectives(with_nics(spec, nics_per_node=nics_per_node, nic_gbps=nic_gbps),
                           shape, full.vocab, tp, cd.in_bytes, pp, profile, experts,
                           check_comm_host(comm_host))
    comm.check()  # fail before any capture if the node cannot hold the groups
    key = config_key(gpu_config)
    say(f"build: the {getattr(config, 'model_type', 'causal LM')} model on the meta device")
    model = meta_model(key, cd.name)
    pricer = StepPricer(key, spec, cd, kv, fmt, full, shape,
                        predictor or profile_predictor(target) or default_predictor(), comm, say)
    stages = stage_layers(full.layers, pp)
    held = stage_weights_bytes(model, shape.experts, fmt, stages)
    vocab = padded_vocab(full.vocab)
    # per stage: a sequence's KV cache over the stage's layers (sliding windows as they fall)
    starts = [sum(stages[:s]) for s in range(pp)]
    kv_seq = [kv_cache_bytes(shape.windows[a:a + n], shape.kv_heads, shape.head_dim,
                             prompt + gen, 1, kv.in_bytes) for a, n in zip(starts, stages)]
    logits = [0] * (pp - 1) + [vocab * LOGIT_BYTES]  # the sampler runs on the last stage
    fixed = token_budget * activation_bytes_per_token(shape, cd.in_bytes)
    usable = memory_utilization * float(spec.mem_bytes or 0.0)  # bytes, as the spec gives them
    mid = prompt + gen // 2
    rows, reports = [], []
    # a data-parallel rank's share of each batch (all of it without expert parallelism)
    rank = {b: -(-b // dp) for b in sizes}
    # every attention call of the plan predicted in one call of the attention model
    micro = {b: -(-rank[b] // min(pp, rank[b])) for b in sizes}
    pricer.attention.times([(n, q, k) for b in sizes
                            for (_, _, chunks) in prefill_steps(rank[b], prompt, token_budget)
                            for (q, k), n in Counter(chunks).items()]
                           + [(micro[b], 1, ctx) for b in sizes
                              for ctx, _ in decode_contexts(prompt, gen)])
    for i, b in enumerate(sizes, 1):
        say(f"price: batch {b} ({i} of {len(sizes)}), prefill")
        pre = pricer.prefill(rank[b], prompt, token_budget)
        say(f"price: batch {b} ({i} of {len(sizes)}), decode")
        dec, step, p = pricer.decode(rank[b], prompt, gen)
        tpot = dec.tpot_ms
        request = pre.ttft_max_ms + (gen - 1) * tpot
        # the stage whose weights, KV cache and logits take the most memory at this batch
        r_b = rank[b]
        per_stage = [held[s] + kv_seq[s] * r_b + fixed + r_b * logits[s] for s in range(pp)]
        worst = max(range(pp), key=per_stage.__getitem__)
        decode_bytes = p.weight_read_bytes + kv_cache_bytes(
            shape.windows, shape.kv_heads, shape.head_dim, mid, dec.micro_batch, kv.in_bytes)
        rows.append(LlmPlanRow(
            batch=b, ttft_mean_ms=pre.ttft_mean_ms, ttft_max_ms=pre.ttft_max_ms, tpot_ms=tpot,
            tokens_per_s=b * gen / request * 1e3, request_ms=request,
            weights_bytes=held[worst], kv_cache_bytes=kv_seq[worst] * r_b,
            activation_bytes=fixed + r_b * logits[worst], fits=max(per_stage) <= usable,
            above_max_num_seqs=b > max_num_seqs,
            prefill_steps=pre.steps, prefill_attention_ms=pre.attention_ms,
            prefill_comm_ms=pre.comm_ms, decode_attention_ms=dec.attention_ms,
            decode_comm_ms=dec.comm_ms, prefill_flops=pre.flops, decode_bytes=decode_bytes,
            roofline_ttft_ms=pre.roofline_ms,
            roofline_tpot_ms=decode_bytes / spec.dram_bw_bytes_per_s * 1e3))
        reports.append(decode_report(step, p, spec, pricer.predictor, cd, pricer.attention,
                                     dec.micro_batch, mid))
    return LlmPlan(
        model=type(model).__name__, device=spec, dtype=cd.name,
        weights=fmt or cd.name, kv_dtype=kv.name, tp=tp, pp=pp, ep=ep, prompt=prompt, gen=gen,
        token_budget=token_budget, memory_utilization=float(memory_utilization),
        usable_bytes=usable,
        max_batch=dp * min(max_batch_fitting(usable, held[s], fixed,
                                             kv_seq[s] + logits[s], token_budget)
                           for s in range(pp)),
        max_num_seqs=max_num_seqs, rows=tuple(rows), attention_kernel=pricer.attention.kernel,
        predictor=f"{getattr(pricer.predictor, 'name', type(pricer.predictor).__name__)} "
                  f"v{getattr(pricer.predictor, 'version', '')}",
        assumptions=assumptions(tp, fmt, pricer.attention.kernel, token_budget,
                                memory_utilization, max_num_seqs, pp=pp, stages=stages,
                                comm=comm.source(), spec=spec, experts=experts),
        decode_reports=tuple(reports))


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
