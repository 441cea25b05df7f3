"""``plan_training``: one training step of a model on many GPUs of one kind, for one layout of
tensor, pipeline, data and context parallelism, ZeRO and recomputation.

The step is captured once per micro-batch shape (``model``), split per GPU (``shard``), priced
through the predict stage ``estimate`` uses (``compute``), scheduled as Megatron-LM's pipeline
runs it (``schedule``) with its collectives (``comm``), and its memory counted per GPU
(``memory``); ``planner`` puts these together, ``text`` renders the plan.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..hardware.catalog import DeviceLike, DeviceSpec
from ..hardware.dtypes import ComputeDtype
from ..llm.checks import check_device
from ..predict import Predictor, default_predictor
from ..predict.comm_host import check_comm_host, describe_comm_host, with_nics
from ..predict.comm_profile import CommProfile, load_comm_profile
from ..predict.profile import profile_predictor
from ..suggest import check_choice
from .assumptions import assumptions
from .comm import Collectives
from .layout import OPTIMIZERS, Layout, check_dtype, check_layout
from .model import StepSource
from .planner import Planner, StepCost
from .result import TrainingPlan

__all__ = ["plan_training", "planner_for", "training_plan"]


def plan_training(
    model_or_config: Any,
    device: DeviceLike,
    *,
    gpus: int | None = None,
    tp: int = 1,
    pp: int = 1,
    dp: int | None = None,
    cp: int = 1,
    ep: int = 1,
    zero: int | str = 0,
    recompute: str = "none",
    micro_batch: int = 1,
    global_batch: int | None = None,
    seq: int,
    dtype: str | torch.dtype | None = "bf16",
    optimizer: str | None = "adamw",
    attention: str = "sdpa",
    compiled: bool = False,
    interleave: int = 1,
    sequence_parallel: bool = False,
    comm_profile: CommProfile | str | os.PathLike[str] | None = None,
    comm_host: str = "fitted",
    nics_per_node: int | None = None,
    nic_gbps: float | None = None,
    predictor: Predictor | None = None,
) -> TrainingPlan:
    """A training step of ``model_or_config`` on ``gpus`` GPUs of ``device``.

    ``model_or_config``: an HF config, a config dict or JSON path (its causal LM built on the
    meta device in ``dtype``), or a model (captured as it is). ``tp`` × ``pp`` × ``dp`` ×
    ``cp`` = ``gpus`` (give ``gpus`` or ``dp``; the other follows). ``zero``: 0, 1, 2, 3 or
    "fsdp"; ``recompute``: "none", "selective" or "full"; ``micro_batch``: sequences per
    forward; ``global_batch``: sequences per step over all GPUs (default: one micro-batch per
    data-parallel rank); ``seq``: tokens per sequence. ``dtype``: bf16/fp16 (mixed precision)
    or fp32/tf32. ``optimizer``: "adamw", "adam", "fused_adam", or None for forward and
    backward alone. ``attention``: "sdpa" or "eager", as transformers builds the model;
    ``compiled``: its other ops fused into kernels as ``torch.compile`` fuses them (as
    ``estimate(compiled=True)`` prices them).
    ``interleave``: pipeline chunks per GPU (the interleaved schedule for 2 or more);
    ``sequence_parallel``: Megatron's sequence parallelism with tp. ``comm_profile``: a
    cluster's measured collectives (``torch-gemm-cost calibrate-comm``), which price every call
    they cover. ``comm_host``: the host class that prices the rest (``predict.comm_host``):
    "fitted" (the default: the shipped fit, from one cloud A100 cluster across nodes) or
    "reference" (NCCL's own constants, 0.8 of each link's datasheet bandwidth, as a
    reference-architecture DGX/HGX cluster with GPUDirect RDMA on every NIC runs).
    ``nics_per_node`` NICs of ``nic_gbps`` Gb/s each restate the device record's network
    (``nics_per_node`` defaults to one a GPU). ``ep``: expert
    parallelism of a MoE model (Mixtral-style configs: ``num_local_experts``,
    ``num_experts_per_tok``), its ranks drawn from the data-parallel ones as Megatron-Core
    draws them: it divides the experts and dp·cp, and needs ``sequence_parallel`` with tp > 1.
    """
    target = check_device(device)
    cd = check_dtype(dtype)
    optimizer = _check_optimizer(optimizer)
    comm_host = check_comm_host(comm_host)
    network = with_nics(target.spec, nics_per_node=nics_per_node, nic_gbps=nic_gbps)
    source = StepSource(model_or_config, cd.name, attention, compiled)
    dp = _dp(gpus, tp, pp, dp, cp)
    batch = global_batch if global_batch is not None else dp * micro_batch
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=zero, recompute=recompute,
                    micro_batch=micro_batch, interleave=interleave,
                    sequence_parallel=bool(sequence_parallel))
    check_layout(layout, source.shape, batch, seq, gpus)
    planner = planner_for(source, target.spec, cd, optimizer, batch, seq, comm_profile,
                          predictor or profile_predictor(target) or default_predictor(),
                          comm_host=comm_host, network=network)
    return training_plan(planner, layout)


def planner_for(source: StepSource, spec: DeviceSpec, cd: ComputeDtype,
                optimizer: str | None, global_batch: int, seq: int,
                comm_profile: CommProfile | str | os.PathLike[str] | None,
                predictor: Predictor, *, comm_host: str = "fitted",
                network: DeviceSpec | None = None) -> Planner:
    """The planner of one model, device and batch; its collectives priced on ``network``
    (``spec`` with the network the user states, ``predict.comm_host.with_nics``; default
    ``spec``) by ``comm_profile`` where it covers a call, else at the host class
    ``comm_host``."""
    profile = load_comm_profile(comm_profile) if comm_profile is not None else None
    return Planner(source=source, spec=spec, cd=cd, optimizer=optimizer, predictor=predictor,
                   global_batch=global_batch, seq=seq,
                   collectives=Collectives(network or spec, profile,
                                           check_comm_host(comm_host)))


def training_plan(planner: Planner, layout: Layout) -> TrainingPlan:
    """The plan of ``layout``: its step, the same step at both ends of the hosts' spread."""
    cost = planner.cost(layout)
    lo = planner.cost(layout, planner.collectives.with_host("low")).step_ms
    hi = planner.cost(layout, planner.collectives.with_host("high")).step_ms
    return _record(planner, layout, cost, (min(lo, hi, cost.step_ms), max(lo, hi, cost.step_ms)))


def _record(planner: Planner, layout: Layout, cost: StepCost,
            interval: tuple[float, float]) -> TrainingPlan:
    spec, seq, batch = planner.spec, planner.seq, planner.global_batch
    step = planner.step_of(layout)
    fullest = max(cost.stages, key=lambda s: s.memory.total_bytes)
    step_s = cost.step_ms * 1e-3
    gpus = layout.gpus
    model_tflops = cost.model_flops / step_s / gpus / 1e12
    coll = planner.collectives
    profile = coll.profile
    net = coll.spec.network_bw_bytes_per_s
    where = ("predict_collective_ms on the device record's node and the network ("
             + (f"{coll.spec.network}: {net / 1e9:g} GB/s a GPU" if net is not None
                else "none: one node") + ")")
    measured = ("" if profile is None else f"measured where the comm profile "
                f"({', '.join(profile.sources)}) covers a call, else ")
    source = f"{measured}{where} at host class '{coll.host}'"
    stated = f"{measured}{where} at the {describe_comm_host(coll.host)}"
    name = getattr(planner.predictor, "name", type(planner.predictor).__name__)
    return TrainingPlan(
        model=step.model_name, device=spec, dtype=planner.cd.name,
        optimizer=planner.optimizer, attention=planner.source.attention, layout=layout,
        global_batch=batch, micro_batches=layout.micro_batches(batch), seq=seq,
        step_ms=cost.step_ms, compute_ms=cost.compute_ms, bubble_ms=cost.bubble_ms,
        exposed_comm_ms=cost.exposed_comm_ms, optimizer_ms=cost.optimizer_ms,
        memory_per_gpu_bytes=fullest.memory.total_bytes, memory=fullest.memory,
        usable_bytes=planner.usable_bytes, fits=all(s.fits for s in cost.stages),
        tokens_per_s_per_gpu=batch * seq / step_s / gpus,
        model_tflops_per_gpu=model_tflops,
        hardware_tflops_per_gpu=cost.hardware_flops / step_s / gpus / 1e12,
        mfu=model_tflops * 1e12 / spec.peak_flops_per_s(planner.cd),
        stages=cost.stages, comm_ms=cost.comm_ms, step_interval_ms=interval,
        comm_source=source, comm_host=coll.host,
        predictor=f"{name} v{getattr(planner.predictor, 'version', '')}",
        assumptions=assumptions(layout, planner.optimizer, planner.source.attention,
                                planner.source.compiled, stated))


def _check_optimizer(optimizer: Any) -> str | None:
    if optimizer is None or optimizer == "none":
        return None
    if not isinstance(optimizer, str):
        raise TypeError(f"optimizer must be a name or None, got {type(optimizer).__name__}")
    return check_choice("optimizer", optimizer.lower(), OPTIMIZERS)


def _dp(gpus: int | None, tp: int, pp: int, dp: int | None, cp: int) -> int:
    if dp is not None:
        return dp
    if gpus is None:
        return 1
    model = tp * pp * cp
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1 or gpus % model:
        good = max(model, (gpus // model) * model if isinstance(gpus, int) else model)
        raise ValueError(f"gpus={gpus!r} is not a multiple of tp·pp·cp = {model}; nearest "
                         f"good: {good}")
    return gpus // model
