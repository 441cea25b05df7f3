"""A step priced through the predict stage ``estimate`` uses (``predict.price.
price_records``), with what the serving engine adds as explicit inputs and records:

- the records it runs (``serving_records``): each weight GEMM in the plan's weight format
  (``llm.weights``), the SDPA GEMMs left to the attention kernel (``llm.attention``), and one
  KV-cache write a layer (``kv_writes``);
- CUDA graphs (``kernel_floors``): the ops of a step vLLM runs in graphs priced without launch
  cost, each kernel then at least its floor; a step above the largest captured size
  (``schedule.cuda_graph_mode``) runs eagerly, each kernel with the op model's launch gap;
- the attention ops at zero here, each layer's attention priced as the serving engine's
  kernel (``llm.attention``); the copies of an attention output it does not run left out;
- the collectives are ``llm.comm``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..hardware.catalog import DeviceSpec
from ..hardware.dtypes import DTYPES, ComputeDtype
from ..predict import Predictor
from ..predict.ops import OpCostModel
from ..predict.price import GemmEstimate, OpEstimate, PricedRecords, price_records
from ..records import GemmSite, OtherOp
from ..records.types import FusedKernel
from .step import Step
from .weights import FP4_FORMATS, FP8_DTYPE, fp4_device, is_weight_gemm, quantized

__all__ = ["PricedStep", "gemm_peak_flops_per_s", "kernel_floors", "kv_writes", "price_records_in",
           "price_step", "serving_records", "step_ms"]

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
               kv: ComputeDtype, costs: OpCostModel, graph: bool = True) -> PricedStep:
    """``step``'s GEMMs and kernels but attention on ``spec``: ``price_records`` of its serving
    records; in a CUDA graph (``graph``) the ops without launch cost, then each kernel at least
    its floor; eagerly, each kernel with the op model's launch gap (``OpCostModel.launch_ms``),
    as ``estimate`` prices an eager model."""
    sites, others = serving_records(step, fmt, kv)
    # each distinct GEMM predicted once (a model's layers repeat theirs), then given to each site
    unique = {_unnamed(s): s for s in reversed(sites)}
    priced = price_records_in(fmt, list(unique.values()), others, spec, predictor,
                              step.kernels, replace(costs, launch_ms=0.0) if graph else costs)
    by_shape = {_unnamed(g.site): g for g in priced.gemms}
    priced = replace(priced, gemms=tuple(replace(by_shape[_unnamed(s)], site=s) for s in sites))
    ops = _in_a_cuda_graph(step, priced, costs) if graph else _eager(step, priced)
    unmodelled = sorted({o.op.op for o in ops if o.time_ms is None})
    if unmodelled:
        log.warning("%s: ops with no cost model are left out of the plan: %s",
                    step.model_name, ", ".join(unmodelled))
    return PricedStep(
        gemms=priced.gemms, ops=ops, dense_ms=step_ms(priced.gemms, ops),
        flops=float(sum(s.flops for s in sites)),
        roofline_ms=sum(s.flops / gemm_peak_flops_per_s(spec, s, fmt) for s in sites) * 1e3,
        weight_read_bytes=float(sum(
            s.batch * s.k * s.n * (DTYPES[s.dtype].in_bytes if s.b_bytes is None else s.b_bytes)
            for s in sites)))


def price_records_in(fmt: str | None, sites: Sequence[GemmSite], others: Sequence[OtherOp],
                     spec: DeviceSpec, predictor: Predictor, kernels: Sequence[FusedKernel],
                     op_costs: OpCostModel) -> PricedRecords:
    """``price_records`` of a step's serving records in weight format ``fmt``: an fp4
    format's GEMMs (fp8-typed, ``weights.quantized``) priced on the device at its fp4 rate
    (``weights.fp4_device``), the rest as they are; the GEMMs in ``sites``' order."""
    if fmt not in FP4_FORMATS:
        return price_records(list(sites), list(others), spec, predictor, kernels=kernels,
                             op_costs=op_costs)
    fp4 = [s for s in sites if s.dtype == FP8_DTYPE]
    rest = [s for s in sites if s.dtype != FP8_DTYPE]
    priced = price_records(rest, list(others), spec, predictor, kernels=kernels,
                           op_costs=op_costs)
    narrow = iter(price_records(fp4, [], fp4_device(spec), predictor, op_costs=op_costs).gemms
                  if fp4 else ())
    wide = iter(priced.gemms)
    return replace(priced, gemms=tuple(next(narrow) if s.dtype == FP8_DTYPE else next(wide)
                                       for s in sites))


def gemm_peak_flops_per_s(spec: DeviceSpec, site: GemmSite, fmt: str | None) -> float:
    """The dense peak a serving GEMM runs at: its dtype's, the fp4 rate for an fp4 format's."""
    if fmt in FP4_FORMATS and site.dtype == FP8_DTYPE:
        return float(spec.peak("fp4") or 0.0)
    return spec.peak_flops_per_s(site.dtype)


def _unnamed(site: GemmSite) -> GemmSite:
    """A site without the names of where it runs: alike GEMMs of two layers are equal."""
    return replace(site, module="", module_type="", node="")


def step_ms(gemms: Sequence[GemmEstimate], ops: Sequence[OpEstimate]) -> float:
    """A step's time from its priced records: the GEMMs' and the modelled ops'."""
    return sum(g.time_ms for g in gemms) + sum(o.time_ms or 0.0 for o in ops)


def _in_a_cuda_graph(step: Step, priced: PricedRecords, costs: OpCostModel
                     ) -> tuple[OpEstimate, ...]:
    """The priced ops as the serving engine runs them: each kernel at least its floor
    (``kernel_floors``), the attention ops at zero (the attention kernel is priced apart), the
    attention-output copies it does not run left out."""
    times = kernel_floors(priced.ops, step.kernels, costs)
    return tuple(OpEstimate(o.op, 0.0 if o.op.attention is not None else t, o.kernel)
                 for i, (o, t) in enumerate(zip(priced.ops, times)) if i not in step.dropped)


def _eager(step: Step, priced: PricedRecords) -> tuple[OpEstimate, ...]:
    """The priced ops as an eager step runs them: each with its launch gap as priced, the
    attention ops at zero, the attention-output copies the engine does not run left out."""
    return tuple(OpEstimate(o.op, 0.0 if o.op.attention is not None else o.time_ms, o.kernel)
                 for i, o in enumerate(priced.ops) if i not in step.dropped)


def _pnorm(a: float, b: float, p: float) -> float:
    hi = max(a, b)
    return 0.0 if hi <= 0 else hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)
