"""``search_training_plans``: every valid layout of a GPU count for one global batch, priced,
the fastest that fit ranked, and why each other one loses.

The layouts: tp a divisor of the GPUs within a node that splits the heads and the MLP; pp a
divisor of the rest that splits the layers (and interleaved with 2 chunks a GPU where the layers
and micro-batches allow); cp > 1 only for sequences of 8192 tokens or more (4096 a GPU at
least); dp the rest; each micro-batch that divides the data-parallel batch; each recomputation;
ZeRO 0 (and 1, 2 with data parallelism, 3 without pipelining); for a MoE model each expert
parallelism that divides its experts and dp·cp (not with ZeRO 3). Sequence parallelism goes
with tp > 1 (it splits the replicated ops and their activations for the same collective bytes).
Each micro-batch shape is captured once and priced once per tensor-parallel size; every layout
of it reuses them.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from ..capture.hf_config import HfConfig
from ..hardware.catalog import DeviceLike
from ..llm.checks import check_device
from ..predict import Predictor, default_predictor
from ..predict.comm_host import check_comm_host, with_nics
from ..predict.comm_profile import CommProfile
from ..predict.profile import profile_predictor
from .layout import RECOMPUTE, Layout, check_dtype, check_layout
from .model import StepSource
from .plan import _check_optimizer, planner_for, training_plan
from .planner import Planner, StepCost
from .records import Rejected
from .result import TrainingSearch

__all__ = ["candidate_layouts", "search_training_plans"]

MICRO_BATCHES: tuple[int, ...] = (1, 2, 4, 8)
_LONG_SEQ = 8192  # context parallelism is tried from this sequence length
_CP_MIN_TOKENS = 4096  # and keeps at least this many tokens a GPU


def search_training_plans(
    model_or_config: Any,
    device: DeviceLike,
    *,
    gpus: int,
    global_batch: int,
    seq: int,
    dtype: str | torch.dtype | None = "bf16",
    optimizer: str | None = "adamw",
    attention: str = "sdpa",
    compiled: bool = False,
    micro_batches: Iterable[int] = MICRO_BATCHES,
    recompute: Iterable[str] = RECOMPUTE,
    comm_profile: CommProfile | str | os.PathLike[str] | None = None,
    comm_host: str = "fitted",
    nics_per_node: int | None = None,
    nic_gbps: float | None = None,
    predictor: Predictor | None = None,
    top: int = 5,
) -> TrainingSearch:
    """The fastest layouts of ``gpus`` GPUs of ``device`` that fit, best first (``top`` of
    them as full plans), and every other layout priced with why it loses. The other
    arguments are ``plan_training``'s."""
    for name, value in (("gpus", gpus), ("global_batch", global_batch), ("seq", seq)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}; nearest "
                             "good: 1")
    target = check_device(device)
    cd = check_dtype(dtype)
    opt = _check_optimizer(optimizer)
    comm_host = check_comm_host(comm_host)
    network = with_nics(target.spec, nics_per_node=nics_per_node, nic_gbps=nic_gbps)
    source = StepSource(model_or_config, cd.name, attention, compiled)
    planner = planner_for(source, target.spec, cd, opt, global_batch, seq, comm_profile,
                          predictor or profile_predictor(target) or default_predictor(),
                          comm_host=comm_host, network=network)
    layouts = list(candidate_layouts(source.shape, gpus, global_batch, seq,
                                     target.spec.node_gpus, tuple(micro_batches),
                                     tuple(recompute)))
    if not layouts:
        raise ValueError(f"no layout of {gpus} GPUs runs a global batch of {global_batch} "
                         f"(dp·micro_batch must divide it); nearest good global_batch: "
                         f"{gpus}")
    costs: list[tuple[Layout, StepCost | None, str]] = []
    for layout in layouts:
        try:
            costs.append((layout, planner.cost(layout), ""))
        except ValueError as e:  # a collective the device record cannot place, and the like
            costs.append((layout, None, str(e)))
    return _ranked(planner, costs, top, len(layouts), source.captures)


def candidate_layouts(shape: HfConfig, gpus: int, global_batch: int, seq: int, node_gpus: int,
                      micro_batches: Sequence[int] = MICRO_BATCHES,
                      recompute: Sequence[str] = RECOMPUTE) -> Iterator[Layout]:
    """Every layout of ``gpus`` GPUs ``check_layout`` accepts (see the module docstring)."""
    cps = [1] + [c for c in (2, 4, 8) if seq >= _LONG_SEQ and seq % (2 * c) == 0
                 and seq // c >= _CP_MIN_TOKENS]
    experts = int(shape.num_experts or 0)
    eps = _divisors(experts) if experts else [1]
    for tp in _divisors(gpus):
        if tp > node_gpus:
            continue
        for cp, pp in itertools.product(cps, _divisors(gpus // tp)):
            if (gpus // tp) % (pp * cp):
                continue
            dp = gpus // (tp * pp * cp)
            for mb, v, rec, zero, ep in itertools.product(
                    micro_batches, (1, 2) if pp > 1 else (1,), recompute, _zeros(dp * cp, pp),
                    eps):
                layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=zero, recompute=rec,
                                micro_batch=mb, interleave=v, sequence_parallel=tp > 1)
                try:
                    check_layout(layout, shape, global_batch, seq, gpus)
                except ValueError:
                    continue
                yield layout


def _zeros(ranks: int, pp: int) -> tuple[Any, ...]:
    if ranks == 1:
        return (0,)
    return (0, 1, 2) if pp > 1 else (0, 1, 2, 3)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _ranked(planner: Planner, costs: list[tuple[Layout, StepCost | None, str]], top: int,
            layouts: int, captures: int) -> TrainingSearch:
    usable = planner.usable_bytes

    def fits(c: StepCost) -> bool:
        return all(s.fits for s in c.stages)

    def peak(c: StepCost) -> float:
        return max(s.memory.total_bytes for s in c.stages)

    good = sorted(((lay, c) for lay, c, _ in costs if c is not None and fits(c)),
                  key=lambda x: (x[1].step_ms, peak(x[1])))
    shown = good[:max(top, 1)]
    plans = tuple(training_plan(planner, lay) for lay, _ in shown)
    in_plans = {lay for lay, _ in shown}
    best = good[0][1] if good else None
    rejected = []
    for lay, c, err in costs:
        if c is None:
            rejected.append(Rejected(lay, float("nan"), float("nan"), False, f"cannot run: {err}"))
        elif not fits(c):
            rejected.append(Rejected(lay, c.step_ms, peak(c), False, _memory_why(c, usable)))
        elif best is not None and lay not in in_plans:
            rejected.append(Rejected(lay, c.step_ms, peak(c), True, _slower_why(c, best)))
    rejected.sort(key=lambda r: (not r.fits, r.step_ms if r.step_ms == r.step_ms else 1e30))
    return TrainingSearch(
        model=planner.step_of(costs[0][0]).model_name,
        device=planner.spec, gpus=costs[0][0].gpus, global_batch=planner.global_batch,
        seq=planner.seq, plans=plans, rejected=tuple(rejected), captures=captures,
        layouts=layouts)


def _memory_why(c: StepCost, usable: float) -> str:
    stage = max(c.stages, key=lambda s: s.memory.total_bytes)
    m = stage.memory
    parts = {"weights": m.weights_bytes, "grads": m.grads_bytes, "optimizer": m.optimizer_bytes,
             "activations": m.activations_bytes + m.in_flight_bytes}
    most = max(parts, key=parts.__getitem__)
    return (f"memory: {m.total_bytes / 1e9:.1f} GB on stage {stage.stage} > "
            f"{usable / 1e9:.1f} GB usable ({most} {parts[most] / 1e9:.1f} GB)")


def _slower_why(c: StepCost, best: StepCost) -> str:
    deltas = {"compute": c.compute_ms - best.compute_ms, "bubble": c.bubble_ms - best.bubble_ms,
              "communication": c.exposed_comm_ms - best.exposed_comm_ms,
              "optimizer": c.optimizer_ms - best.optimizer_ms}
    kind = max(deltas, key=deltas.__getitem__)
    extra = ""
    if kind == "compute":
        recompute = max(s.recompute_ms for s in c.stages)
        if recompute > 0:
            extra = " (recomputation)"
    return f"{kind} +{deltas[kind]:.1f} ms{extra}; step +{c.step_ms - best.step_ms:.1f} ms vs #1"
