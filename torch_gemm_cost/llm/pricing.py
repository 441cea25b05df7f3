"""A step priced through the predict stage ``estimate`` uses (``predict.price.
price_records``), with what the serving engine adds as explicit inputs and records:

- the records it runs (``serving_records``): each weight GEMM in the plan's weight format
  (``llm.weights``), the SDPA GEMMs left to the attention kernel (``llm.attention``), and one
  KV-cache write a layer (``kv_writes``);
- CUDA graphs (``kernel_floors``): the ops priced without launch cost, each kernel then at
  least its floor;
- the attention ops at zero here, each layer's attention priced as the serving engine's
  kernel (``llm.attention``); the copies of an attention output it does not run left out;
- the tensor-parallel collectives (``comm_ms``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..hardware.catalog import DeviceSpec
from ..hardware.dtypes import DTYPES, ComputeDtype
from ..predict import Predictor
from ..predict.collectives import predict_collective_ms
from ..predict.ops import OpCostModel
from ..predict.price import GemmEstimate, OpEstimate, PricedRecords, price_records
from ..records import GemmSite, OtherOp
from ..records.types import FusedKernel
from .shape import ServingShape, padded_vocab
from .step import Step
from .weights import is_weight_gemm, quantized

__all__ = ["PricedStep", "comm_ms", "kernel_floors", "kv_writes", "price_step",
           "serving_records", "step_ms"]

log = logging.getLogger(__name__)

_FLOOR_OP = "add"  # the fused op whose floor a kernel without constants of its own takes
_ATTENTION_GEMMS = ("sdpa_qk", "sdpa_pv")


@dataclass(frozen=True)
class PricedStep:
    """A step's dense part on a device: every GEMM and kernel but attention."""

    gemms: tuple[GemmEstimate, ...]
    ops: tuple[OpEstimate, ...]  # the dense ops, each layer's attention op (time 0), KV writes
    dense_ms: float
    flops: float  # of the dense GEMMs
    roofline_ms: float  # their FLOPs over each dtype's dense peak
    weight_read_bytes: float  # B operands of the dense GEMMs at their stored size


def serving_records(step: Step, fmt: str | None, kv: ComputeDtype
                    ) -> tuple[tuple[GemmSite, ...], tuple[OtherOp, ...]]:
    """The GEMMs and ops the serving engine runs for ``step``: the weight GEMMs in ``fmt``
    (None: the activations' dtype), no SDPA GEMMs (the attention kernel runs them), and the
    step's ops followed by one KV-cache write a layer in the cache dtype ``kv``."""
    sites = tuple(quantized(s, fmt) if is_weight_gemm(s, step.lm_head, step.experts) else s
                  for s in step.sites)
    dense = tuple(s for s in sites if s.op not in _ATTENTION_GEMMS)
    return dense, (*step.others, *kv_writes(step, kv))


def kv_writes(step: Step, kv: ComputeDtype) -> tuple[OtherOp, ...]:
    """Each layer's KV-cache write (vLLM's ``reshape_and_cache_flash``): the step's new K and V
    rows read and written into the cache in its dtype, one copy kernel."""
    out = []
    for op in step.others:
        a = op.attention
        if a is None:
            continue
        elements = 2 * a.batch * a.q_len * a.kv_heads * a.head_dim
        out.append(OtherOp(
            module=op.module, module_type=op.module_type, op="reshape_and_cache",
            node=f"{op.node}.kv_write", phase="forward", op_class="copy", dtype=op.dtype,
            numel=elements, dram_bytes=elements * (DTYPES[op.dtype].in_bytes + kv.in_bytes)))
    return tuple(out)


def kernel_floors(ops: Sequence[OpEstimate], kernels: Sequence[FusedKernel],
                  costs: OpCostModel) -> list[float | None]:
    """Each op's time when its kernel runs inside a CUDA graph (decode) or behind a host that
    runs ahead (prefill): the kernel's own GPU time, at least its floor (the shortest a vidur
    kernel of its fused op ran, joined by the op model's soft maximum), no launch gap. ``ops``
    are priced with no launch cost."""
    times = [o.time_ms for o in ops]
    default = costs.fused[_FLOOR_OP].floor_ms if _FLOOR_OP in costs.fused else costs.launch_ms
    inside: set[int] = set()
    for k in kernels:
        inside.update(k.ops)
        members = [i for i in k.ops if times[i] is not None]
        if k.launches == 0 or not members:
            continue
        cost = costs.fused.get(k.op_class)
        floor = cost.floor_ms if cost is not None else default
        alone = sum(times[i] or 0.0 for i in members)
        each = _pnorm(alone / k.launches, floor, costs.roof_p) * k.launches
        for i in members:
            share = (times[i] or 0.0) / alone if alone else 1.0 / len(members)
            times[i] = each * share
    for i, o in enumerate(ops):
        t = times[i]
        if i not in inside and t and o.op.attention is None:
            times[i] = _pnorm(t, default, costs.roof_p)
    return times


def price_step(step: Step, spec: DeviceSpec, predictor: Predictor, fmt: str | None,
               kv: ComputeDtype, costs: OpCostModel) -> PricedStep:
    """``step``'s GEMMs and kernels but attention on ``spec``: ``price_records`` of its serving
    records, the ops without launch cost, then each kernel at least its floor."""
    sites, others = serving_records(step, fmt, kv)
    # each distinct GEMM predicted once (a model's layers repeat theirs), then given to each site
    unique = {_unnamed(s): s for s in reversed(sites)}
    priced = price_records(list(unique.values()), others, spec, predictor, kernels=step.kernels,
                           op_costs=replace(costs, launch_ms=0.0))
    by_shape = {_unnamed(g.site): g for g in priced.gemms}
    priced = replace(priced, gemms=tuple(replace(by_shape[_unnamed(s)], site=s) for s in sites))
    ops = _in_a_cuda_graph(step, priced, costs)
    unmodelled = sorted({o.op.op for o in ops if o.time_ms is None})
    if unmodelled:
        log.warning("%s: ops with no cost model are left out of the plan: %s",
                    step.model_name, ", ".join(unmodelled))
    return PricedStep(
        gemms=priced.gemms, ops=ops, dense_ms=step_ms(priced.gemms, ops),
        flops=float(sum(s.flops for s in sites)),
        roofline_ms=sum(s.flops / spec.peak_flops_per_s(s.dtype) for s in sites) * 1e3,
        weight_read_bytes=float(sum(
            s.batch * s.k * s.n * (DTYPES[s.dtype].in_bytes if s.b_bytes is None else s.b_bytes)
            for s in sites)))


def _unnamed(site: GemmSite) -> GemmSite:
    """A site without the names of where it runs: alike GEMMs of two layers are equal."""
    return replace(site, module="", module_type="", node="")


def step_ms(gemms: Sequence[GemmEstimate], ops: Sequence[OpEstimate]) -> float:
    """A step's time from its priced records: the GEMMs' and the modelled ops'."""
    return sum(g.time_ms for g in gemms) + sum(o.time_ms or 0.0 for o in ops)


def comm_ms(spec: DeviceSpec, shape: ServingShape, vocab: int, tp: int, act_bytes: int,
            tokens: int, sampled: int) -> float:
    """A step's tensor-parallel collectives on ``spec``'s usual node: two all-reduces a layer
    and one after the embedding of ``tokens`` × hidden activations, and the all-gather of the
    ``sampled`` tokens' logits over the (padded) vocabulary ``vocab``; 0 without tp."""
    if tp == 1:
        return 0.0
    reduce = predict_collective_ms(spec, "all_reduce", size_bytes=float(
        tokens * shape.hidden * act_bytes), num_gpus=tp)
    gather = predict_collective_ms(spec, "all_gather", size_bytes=float(
        sampled * padded_vocab(vocab) * act_bytes), num_gpus=tp)
    return (2 * shape.layers + 1) * reduce + gather


def _in_a_cuda_graph(step: Step, priced: PricedRecords, costs: OpCostModel
                     ) -> tuple[OpEstimate, ...]:
    """The priced ops as the serving engine runs them: each kernel at least its floor
    (``kernel_floors``), the attention ops at zero (the attention kernel is priced apart), the
    attention-output copies it does not run left out."""
    times = kernel_floors(priced.ops, step.kernels, costs)
    return tuple(OpEstimate(o.op, 0.0 if o.op.attention is not None else t, o.kernel)
                 for i, (o, t) in enumerate(zip(priced.ops, times)) if i not in step.dropped)


def _pnorm(a: float, b: float, p: float) -> float:
    hi = max(a, b)
    return 0.0 if hi <= 0 else hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)
