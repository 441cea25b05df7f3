"""A layout priced into a plan: compute per segment (``compute``), grouped into pipeline stages
and scheduled (``schedule``) with the collectives (``comm``), then each stage's gradient sync,
optimizer step and memory (``memory``). A ``Planner`` keeps what layouts share: each micro-batch
shape captured once (``model.StepSource``), each (tp, sequence parallelism, cp, micro-batch)
priced once, each optimizer step priced once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..hardware.catalog import DeviceSpec
from ..hardware.dtypes import ComputeDtype
from ..predict import Predictor
from ..predict.attention.sdpa import runs_fused_attention
from ..predict.ops import OpCostModel, load_op_costs
from .comm import Collectives, cp_send_ms, ep_comm_ms, overlapped_ms, send_ms, tp_comm_ms
from .compute import SegmentTimes, price_segments, step_flops
from .layout import Layout, group_per_node
from .memory import (
    MEMORY_UTILIZATION,
    MemoryBreakdown,
    layer_activation_bytes,
    param_bytes,
    shape_of,
)
from .model import StepSource, TrainingStep
from .optimizer import optimizer_ms, optimizer_step_ops
from .records import StageRow
from .schedule import in_flight, run_pipeline

__all__ = ["Planner", "StepCost"]


@dataclass(frozen=True)
class StepCost:
    """A layout's step before it becomes a plan record: the stages and the step's parts."""

    stages: tuple[StageRow, ...]
    step_ms: float
    compute_ms: float
    bubble_ms: float
    exposed_comm_ms: float
    optimizer_ms: float
    comm_ms: dict[str, float]
    model_flops: float  # the step's, all GPUs
    hardware_flops: float  # with recomputation


@dataclass
class Planner:
    """Prices layouts of one model, device, dtype, optimizer, batch and sequence."""

    source: StepSource
    spec: DeviceSpec
    cd: ComputeDtype
    optimizer: str | None
    predictor: Predictor
    global_batch: int
    seq: int
    collectives: Collectives
    op_costs: OpCostModel = field(default_factory=load_op_costs)
    _times: dict[tuple[Any, ...], SegmentTimes] = field(default_factory=dict, repr=False)
    _opt: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)

    def step_of(self, layout: Layout) -> TrainingStep:
        return self.source.step(layout.micro_batch, self.seq // layout.cp)

    def times(self, step: TrainingStep, layout: Layout) -> SegmentTimes:
        key = (layout.tp, layout.sequence_parallel, layout.cp, layout.micro_batch, layout.ep)
        if key not in self._times:
            self._times[key] = price_segments(step, layout.tp, layout.sequence_parallel,
                                              layout.cp, self.spec, self.predictor,
                                              self.op_costs, layout.ep)
        return self._times[key]

    def cost(self, layout: Layout, coll: Collectives | None = None) -> StepCost:
        """The step of ``layout`` with its collectives priced by ``coll`` (default: the
        planner's)."""
        coll = coll or self.collectives
        step = self.step_of(layout)
        t = self.times(step, layout)
        pp, v, layers = layout.pp, layout.interleave, step.layers
        m = layout.micro_batches(self.global_batch)
        per = layers // (pp * v)
        chunks = [list(range(s * per, (s + 1) * per)) for s in range(pp * v)]
        segs = [([-1] if s == 0 else []) + c + ([layers] if s == pp * v - 1 else [])
                for s, c in enumerate(chunks)]
        tp_f, tp_b = tp_comm_ms(step, layout, coll)
        ep_f, ep_b = ep_comm_ms(step, layout, coll)
        if layout.recompute == "full":  # a layer's recomputed forward runs its collectives again
            tp_b = [b + (f if 0 <= i - 1 < layers else 0.0)
                    for i, (f, b) in enumerate(zip(tp_f, tp_b))]
            ep_b = [b + (f if 0 <= i - 1 < layers else 0.0)
                    for i, (f, b) in enumerate(zip(ep_f, ep_b))]
        cp_one = cp_send_ms(step, layout, coll)
        recompute = [self._recompute_ms(t, c, layout.recompute) for c in chunks]
        f0 = [sum(t.forward_ms[i + 1] for i in sg) for sg in segs]
        b0 = [sum(t.backward_ms[i + 1] for i in sg) + r for sg, r in zip(segs, recompute)]
        cp_f = [sum(max(0.0, (layout.cp - 1) * cp_one - t.core_forward_ms[i + 1]) for i in c)
                for c in chunks]
        cp_b = [sum(max(0.0, 2 * (layout.cp - 1) * cp_one - 2 * t.core_forward_ms[i + 1])
                    for i in c) for c in chunks]
        z3_f, z3_b = self._zero3(step, layout, coll, f0, b0, per)
        st = _Stages(segs, f0, b0, recompute,
                     [sum(tp_f[i + 1] + tp_b[i + 1] for i in sg) for sg in segs],
                     [a + b for a, b in zip(cp_f, cp_b)], [a + b for a, b in zip(z3_f, z3_b)],
                     [sum(ep_f[i + 1] + ep_b[i + 1] for i in sg) for sg in segs])
        comm_f = [sum(tp_f[i + 1] + ep_f[i + 1] for i in sg) + c + z
                  for sg, c, z in zip(segs, cp_f, z3_f)]
        comm_b = [sum(tp_b[i + 1] + ep_b[i + 1] for i in sg) + c + z
                  for sg, c, z in zip(segs, cp_b, z3_b)]
        send = send_ms(step, layout, coll)
        run0 = run_pipeline(pp, v, m, f0, b0, [0.0] * (pp * v - 1))
        run1 = run_pipeline(pp, v, m, [a + b for a, b in zip(f0, comm_f)],
                            [a + b for a, b in zip(b0, comm_b)], [send] * (pp * v - 1))
        rows = [self._stage(step, layout, coll, j, m, st, send, run1.end_ms[j])
                for j in range(pp)]
        j = max(range(pp), key=lambda g: rows[g].end_ms)
        r = rows[j]
        model_f, model_b, recompute_f = step_flops(step, layout.cp, layout.recompute)
        chunks_per_step = self.global_batch // layout.micro_batch * layout.cp
        return StepCost(
            stages=tuple(rows), step_ms=r.end_ms, compute_ms=run0.busy_ms[j],
            bubble_ms=max(run0.end_ms[j] - run0.busy_ms[j], 0.0),
            exposed_comm_ms=run1.end_ms[j] - run0.end_ms[j] + r.dp_exposed_ms,
            optimizer_ms=r.optimizer_ms,
            comm_ms={"tensor": m * r.tp_comm_ms, "context": m * r.cp_comm_ms,
                     "expert": m * r.ep_comm_ms,
                     "pipeline": 2 * m * v * send if pp > 1 else 0.0, "data": r.dp_comm_ms},
            model_flops=(model_f + model_b) * chunks_per_step,
            hardware_flops=(model_f + model_b + recompute_f) * chunks_per_step)

    @staticmethod
    def _recompute_ms(t: SegmentTimes, layers: list[int], recompute: str) -> float:
        if recompute == "full":
            return sum(t.forward_ms[i + 1] for i in layers)
        if recompute == "selective":
            return sum(t.core_forward_ms[i + 1] for i in layers)
        return 0.0

    def _zero3(self, step: TrainingStep, layout: Layout, coll: Collectives, f0: list[float],
               b0: list[float], per: int) -> tuple[list[float], list[float]]:
        """ZeRO-3 / FSDP, every micro-batch: each layer's weights gathered before its forward
        and its backward, its gradients reduce-scattered, under the compute of the layers
        before (one stage: pp is 1)."""
        zeros = [0.0] * len(f0)
        ranks = layout.shard_ranks
        if layout.zero_stage < 3 or ranks == 1:
            return zeros, zeros
        pb = param_bytes(step.act_bytes, self.optimizer)
        local = self._params(step, layout, [-1, *range(step.layers), step.layers])
        g = group_per_node(ranks, layout.tp, self.spec.node_gpus)
        gather = coll.ms("all_gather", local[0] * pb.weight, ranks, g)
        scatter = coll.ms("reduce_scatter", local[1] * pb.grad, ranks, g)
        n, parts = max(per, 1), len(f0)
        return ([overlapped_ms(gather / parts, f, n) for f in f0],
                [overlapped_ms((gather + scatter) / parts, b, n) for b in b0])

    def _params(self, step: TrainingStep, layout: Layout, segments: list[int]
                ) -> tuple[int, int, int, int]:
        """Elements one GPU holds of the parameters read in ``segments``: all, trained, the
        largest layer's (ZeRO-3 gathers one whole), and of the trained the experts' (a tp-th
        and an ep-th of them)."""
        have = set(segments)
        total = trained = experts = 0
        per_layer: dict[int, int] = {}
        for p in step.params:
            if not have.intersection(p.segments):
                continue
            n = p.numel // layout.tp if p.split else p.numel
            n = n // layout.ep if p.expert else n
            total += n
            trained += n if p.trained else 0
            experts += n if p.trained and p.expert else 0
            for s in p.segments:
                if 0 <= s < step.layers:
                    per_layer[s] = per_layer.get(s, 0) + n
        return total, trained, max(per_layer.values(), default=0), experts

    def _stage(self, step: TrainingStep, layout: Layout, coll: Collectives, j: int, m: int,
               st: _Stages, send: float, end: float) -> StageRow:
        """Pipeline GPU ``j``: its chunks' compute, its gradient sync and optimizer step after
        the schedule ends for it at ``end``, its memory."""
        pp, v = layout.pp, layout.interleave
        mine = [c * pp + j for c in range(v)]
        segments = [s for c in mine for s in st.segments[c]]
        layer_ids = tuple(s for s in segments if 0 <= s < step.layers)
        params, trained, largest, experts = self._params(step, layout, segments)
        pb = param_bytes(step.act_bytes, self.optimizer)
        ranks, zero = layout.shard_ranks, layout.zero_stage
        eranks = layout.expert_shard_ranks
        fwd = sum(st.forward_ms[c] for c in mine)
        bwd = sum(st.backward_ms[c] for c in mine)
        dp_comm = dp_exposed = 0.0
        if ranks > 1 and zero < 3:
            # the dense parameters over the dp·cp ranks (tp apart), the experts' over the
            # ranks holding the same experts (dp·cp / ep of them, tp·ep apart)
            groups = [(trained - experts, ranks, group_per_node(ranks, layout.tp,
                                                                self.spec.node_gpus)),
                      (experts, eranks, group_per_node(eranks, layout.tp * layout.ep,
                                                       self.spec.node_gpus))]
            buckets = max(len(layer_ids), 1)
            rs = ag = 0.0
            for n, r, g in groups:
                if zero == 0:
                    rs += coll.ms("all_reduce", n * pb.grad, r, g)
                else:
                    rs += coll.ms("reduce_scatter", n * pb.grad, r, g)
                    ag += coll.ms("all_gather", n * pb.weight, r, g)
            dp_comm = rs + ag
            dp_exposed = overlapped_ms(rs, bwd, buckets) + overlapped_ms(ag, fwd, buckets)
        elif zero == 3:
            dp_comm = m * sum(st.zero3_ms[c] for c in mine)
        tied = [p for p in step.params
                if pp > 1 and p.trained and -1 in p.segments and step.layers in p.segments]
        if tied and (j == 0 or j == pp - 1):  # the embedding's gradient shared by both ends
            nbytes = sum(p.numel // layout.tp if p.split else p.numel for p in tied) * pb.grad
            stride = layout.tp * layout.cp * layout.dp
            emb = coll.ms("all_reduce", nbytes, 2,
                          2 if (pp - 1) * stride < self.spec.node_gpus else 1)
            dp_comm += emb
            dp_exposed += emb
        local = ((trained - experts) // ranks + experts // eranks if zero >= 1 else trained)
        if self.optimizer is None:
            opt = 0.0
        else:
            key = (local, sum(1 for p in step.params if p.trained and set(p.segments)
                              & set(segments)))
            if key not in self._opt:
                self._opt[key] = optimizer_ms(self.spec, optimizer_step_ops(
                    self.optimizer, key[0], key[1], step.act_bytes), self.op_costs)
            opt = self._opt[key]
        memory = self._memory(step, layout, j, m, segments, layer_ids, params, trained,
                              largest, pb, experts)
        return StageRow(
            stage=j, layers=layer_ids, params=params, forward_ms=fwd, backward_ms=bwd,
            recompute_ms=sum(st.recompute_ms[c] for c in mine),
            tp_comm_ms=sum(st.tp_ms[c] for c in mine),
            cp_comm_ms=sum(st.cp_ms[c] for c in mine), send_ms=send,
            dp_comm_ms=dp_comm, dp_exposed_ms=dp_exposed, optimizer_ms=opt,
            in_flight=in_flight(pp, v, m, j), memory=memory,
            fits=memory.total_bytes <= self.usable_bytes,
            end_ms=end + dp_exposed + opt, ep_comm_ms=sum(st.ep_ms[c] for c in mine))

    @property
    def usable_bytes(self) -> float:
        return MEMORY_UTILIZATION * float(self.spec.mem_bytes or 0.0)

    def _memory(self, step: TrainingStep, layout: Layout, j: int, m: int, segments: list[int],
                layer_ids: tuple[int, ...], params: int, trained: int, largest: int,
                pb: Any, experts: int = 0) -> MemoryBreakdown:
        ranks, zero, tp = layout.shard_ranks, layout.zero_stage, layout.tp
        eranks = layout.expert_shard_ranks
        sp = layout.sequence_parallel
        weights = params * pb.weight / (ranks if zero >= 3 else 1)
        if zero >= 3 and ranks > 1:
            weights += 2 * largest * pb.weight  # one layer running, the next prefetched
        dense = trained - experts  # the experts' sharded over the ranks holding the same experts
        grads = (dense / (ranks if zero >= 2 else 1) + experts / (eranks if zero >= 2 else 1)
                 ) * pb.grad
        states = (dense / (ranks if zero >= 1 else 1) + experts / (eranks if zero >= 1 else 1)
                  ) * pb.optimizer
        flash = self.source.attention == "sdpa" and runs_fused_attention(self.spec)
        shape = shape_of(self.source.config, step.shape, step.tokens, self.seq,
                         layout.micro_batch, step.act_bytes, _gated(step), flash)
        per_layer = layer_activation_bytes(shape, tp, sp, layout.recompute)
        acts = per_layer * len(layer_ids)
        if layout.recompute == "full" and layer_ids:  # one layer recomputed at a time
            acts += layer_activation_bytes(shape, tp, sp, "none")
        e, tokens, hidden = step.act_bytes, step.tokens, int(step.shape.hidden_size or 0)
        if step.layers in segments:  # final norm and head inputs, logits and log-probs
            vocab = int(step.shape.vocab_size or 0)
            acts += 2 * e * tokens * hidden / (tp if sp else 1) + tokens * vocab / tp * (e + 4)
        chunks = in_flight(layout.pp, layout.interleave, m, j)
        held = max(chunks / layout.interleave - 1.0, 0.0) * (per_layer * len(layer_ids))
        return MemoryBreakdown(weights, grads, states, acts, held)


@dataclass(frozen=True)
class _Stages:
    """Per virtual stage, one micro-batch: its segments, compute (recomputation in the
    backward), and the collectives it waits for by kind."""

    segments: list[list[int]]
    forward_ms: list[float]
    backward_ms: list[float]
    recompute_ms: list[float]
    tp_ms: list[float]
    cp_ms: list[float]
    zero3_ms: list[float]
    ep_ms: list[float]


def _gated(step: TrainingStep) -> bool:
    """A gated MLP (SwiGLU and kin): two column GEMMs of the MLP's width in a layer."""
    inter = step.shape.intermediate_size
    n = sum(1 if s.n == inter else 2 if inter and s.n == 2 * inter else 0
            for s, role, seg in zip(step.sites, step.site_role, step.site_segment)
            if seg == 0 and role == "column" and s.phase == "forward")
    return n >= 2  # two GEMMs of the width, or one of twice it (gate and up fused)
