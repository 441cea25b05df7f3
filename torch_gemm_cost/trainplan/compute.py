"""One micro-batch's compute on one GPU, per segment of the model, priced through the predict
stage ``estimate`` uses (``predict.price.price_records``): every GEMM of the GPU's share in one
batched call of the GEMM predictor, the other ops by the op cost model.

Context parallelism (``cp``) runs each GPU on seq / cp of every sequence (the capture's tokens)
against all of its keys: attention's core is priced at the captured chunk and scaled by cp,
since a chunk of seq / cp queries against seq keys is cp times the work of the chunk against
itself. NB: load-balanced causal chunks (Megatron-Core's context parallelism) give every GPU
the same share; the scale holds for that split.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware.catalog import DeviceSpec
from ..predict import Predictor
from ..predict.ops import OpCostModel
from ..predict.price import price_records
from .model import TrainingStep
from .shard import shard_records

__all__ = ["SegmentTimes", "price_segments", "step_flops"]

_BACKWARD = ("backward_dx", "backward_dw", "backward")


@dataclass(frozen=True)
class SegmentTimes:
    """One micro-batch on one GPU, per segment (index segment + 1: the embeddings, each layer,
    then the head): forward and backward time, attention core's forward time (what selective
    recomputation repeats), and the GEMM FLOPs run."""

    forward_ms: tuple[float, ...]
    backward_ms: tuple[float, ...]
    core_forward_ms: tuple[float, ...]
    forward_flops: tuple[float, ...]
    backward_flops: tuple[float, ...]
    unmodelled: tuple[str, ...]  # ops with no cost model, left out


def price_segments(step: TrainingStep, tp: int, sequence_parallel: bool, cp: int,
                   spec: DeviceSpec, predictor: Predictor,
                   op_costs: OpCostModel | None = None, ep: int = 1) -> SegmentTimes:
    """``step``'s records as one GPU of the layout runs them, priced and summed per segment."""
    sites, others, kernels = shard_records(step, tp, sequence_parallel, ep)
    priced = price_records(sites, others, spec, predictor, op_costs=op_costs, kernels=kernels)
    size = step.layers + 2
    fwd, bwd, core, f_flops, b_flops = ([0.0] * size for _ in range(5))
    for g, seg, is_core in zip(priced.gemms, step.site_segment, step.site_core):
        scale = cp if is_core else 1
        i = seg + 1
        if g.site.phase == "forward":
            fwd[i] += g.time_ms * scale
            f_flops[i] += g.site.flops * scale
            if is_core:
                core[i] += g.time_ms * scale
        else:
            bwd[i] += g.time_ms * scale
            b_flops[i] += g.site.flops * scale
    for o, seg, is_core in zip(priced.ops, step.other_segment, step.other_core):
        t = (o.time_ms or 0.0) * (cp if is_core else 1)
        i = seg + 1
        if o.op.phase == "forward":
            fwd[i] += t
            if is_core:
                core[i] += t
        elif o.op.phase in _BACKWARD:
            bwd[i] += t
    return SegmentTimes(tuple(fwd), tuple(bwd), tuple(core), tuple(f_flops), tuple(b_flops),
                        tuple(sorted({o.op.op for o in priced.ops if o.time_ms is None})))


def step_flops(step: TrainingStep, cp: int, recompute: str = "none"
               ) -> tuple[float, float, float]:
    """The whole model's GEMM FLOPs of one micro-batch at full width: forward, backward, and
    the forward FLOPs ``recompute`` repeats (attention's core times cp: each chunk of
    seq / cp queries meets all seq keys)."""
    fwd = bwd = again = 0.0
    for s, seg, is_core in zip(step.sites, step.site_segment, step.site_core):
        f = s.flops * (cp if is_core else 1)
        if s.phase != "forward":
            bwd += f
            continue
        fwd += f
        if 0 <= seg < step.layers and (recompute == "full"
                                       or (recompute == "selective" and is_core)):
            again += f
    return fwd, bwd, again
