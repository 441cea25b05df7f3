"""The records of a training plan: a ``StageRow`` per pipeline stage and the
``TrainingPlanRecord`` that holds them, with JSON-ready data; ``plan.plan_training`` computes
them, ``text`` renders them. A search's result is a ``TrainingSearchRecord``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..hardware.catalog import DeviceSpec
from .layout import Layout
from .memory import MemoryBreakdown

__all__ = ["Rejected", "StageRow", "TrainingPlanRecord", "TrainingSearchRecord"]


@dataclass(frozen=True)
class StageRow:
    """One pipeline stage (one GPU of each pipeline): its layers, and per micro-batch its
    compute and the collectives it waits for; per step its gradient sync, optimizer and
    memory."""

    stage: int
    layers: tuple[int, ...]  # its decoder layers (the first also holds the embeddings, the
    # last the head)
    params: int  # parameter elements on one GPU of the stage (its tensor-parallel share)
    forward_ms: float  # one micro-batch's compute
    backward_ms: float  # one micro-batch's compute, recomputation included
    recompute_ms: float  # of backward_ms
    tp_comm_ms: float  # one micro-batch's tensor-parallel collectives, forward and backward
    cp_comm_ms: float  # one micro-batch's ring-attention sends the compute does not hide
    send_ms: float  # one micro-batch's send to the next stage
    dp_comm_ms: float  # the step's data-parallel collectives
    dp_exposed_ms: float  # of them, what the step waits for
    optimizer_ms: float
    in_flight: int  # micro-batch chunks whose activations the stage holds at its peak
    memory: MemoryBreakdown
    fits: bool
    end_ms: float  # when the stage's step ends
    ep_comm_ms: float = 0.0  # one micro-batch's expert-parallel all-to-alls, forward and backward


@dataclass(frozen=True)
class TrainingPlanRecord:
    """One training step of a model on ``layout.gpus`` GPUs of one kind.

    ``step_ms`` = ``compute_ms`` + ``bubble_ms`` + ``exposed_comm_ms`` + ``optimizer_ms``,
    read on the stage that ends the step: its own compute (recomputation included), its idle
    time in the pipeline schedule without communication, the time communication adds (the
    schedule with the collectives and sends, then the gradient sync), and its optimizer step.
    Memory is the fullest GPU's. ``model_tflops_per_gpu`` counts the model's GEMM FLOPs once
    (no recomputation), ``hardware_tflops_per_gpu`` those run; ``mfu`` is the first over the
    dtype's dense peak. ``step_interval_ms`` repeats the step with each collective at the low
    and the high end of how far hosts spread (equal where a comm profile measured them all).
    """

    model: str
    device: DeviceSpec
    dtype: str
    optimizer: str | None
    attention: str
    layout: Layout
    global_batch: int
    micro_batches: int
    seq: int
    step_ms: float
    compute_ms: float
    bubble_ms: float
    exposed_comm_ms: float
    optimizer_ms: float
    memory_per_gpu_bytes: float
    memory: MemoryBreakdown
    usable_bytes: float
    fits: bool
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    stages: tuple[StageRow, ...]
    comm_ms: Mapping[str, float]  # the ending stage's collectives a step, by kind
    step_interval_ms: tuple[float, float]
    comm_source: str
    predictor: str
    assumptions: tuple[str, ...] = field(default=(), compare=False)
    comm_host: str = "fitted"  # the host class that priced what no comm profile covers

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data."""
        stages = []
        for s in self.stages:
            row = asdict(s)
            row["memory"] = {**asdict(s.memory), "total_bytes": s.memory.total_bytes}
            row["layers"] = list(s.layers)
            stages.append(row)
        return {
            "model": self.model, "device": self.device.id, "device_name": self.device.name,
            "dtype": self.dtype, "optimizer": self.optimizer, "attention": self.attention,
            "layout": {**asdict(self.layout), "gpus": self.gpus, "label": self.layout.label()},
            "global_batch": self.global_batch, "micro_batches": self.micro_batches,
            "seq": self.seq, "step_ms": self.step_ms, "compute_ms": self.compute_ms,
            "bubble_ms": self.bubble_ms, "exposed_comm_ms": self.exposed_comm_ms,
            "optimizer_ms": self.optimizer_ms, "step_interval_ms": list(self.step_interval_ms),
            "memory_per_gpu_bytes": self.memory_per_gpu_bytes,
            "memory": {**asdict(self.memory), "total_bytes": self.memory.total_bytes},
            "usable_bytes": self.usable_bytes, "fits": self.fits,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu, "mfu": self.mfu,
            "comm_ms": dict(self.comm_ms), "comm_source": self.comm_source,
            "comm_host": self.comm_host,
            "predictor": self.predictor, "stages": stages,
            "assumptions": list(self.assumptions),
        }

    def to_json(self, path: str | Path | None = None, indent: int = 2) -> str:
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text


@dataclass(frozen=True)
class Rejected:
    """A layout the search priced and ranked below the best, or that does not fit, and why."""

    layout: Layout
    step_ms: float
    memory_per_gpu_bytes: float
    fits: bool
    why: str


@dataclass(frozen=True)
class TrainingSearchRecord:
    """The layouts of ``gpus`` GPUs for one global batch: the fastest that fit, best first, and
    every other layout priced with why it loses; ``captures``: the model captures the search
    ran (one per micro-batch shape), ``layouts``: the layouts priced."""

    model: str
    device: DeviceSpec
    gpus: int
    global_batch: int
    seq: int
    plans: tuple[Any, ...]  # TrainingPlan, best first
    rejected: tuple[Rejected, ...]
    captures: int
    layouts: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "device": self.device.id, "gpus": self.gpus,
            "global_batch": self.global_batch, "seq": self.seq, "captures": self.captures,
            "layouts": self.layouts, "plans": [p.to_dict() for p in self.plans],
            "rejected": [{"layout": r.layout.label(), "step_ms": r.step_ms,
                          "memory_per_gpu_bytes": r.memory_per_gpu_bytes, "fits": r.fits,
                          "why": r.why} for r in self.rejected],
        }
