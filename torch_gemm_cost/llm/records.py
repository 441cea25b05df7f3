"""The records of a serving plan: one ``LlmPlanRow`` per batch size and the ``LlmPlanRecord`` that holds
them, with its JSON-ready data. ``llm.plan.plan_llm`` computes them; ``llm.text`` renders them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..hardware.catalog import DeviceSpec
from ..report import CostReport

__all__ = ["LlmPlanRecord", "LlmPlanRow"]


@dataclass(frozen=True)
class LlmPlanRow:
    """One batch size of a serving plan: its latencies, throughput and memory, per GPU.

    The batch's prompts are prefilled in passes of at most the token budget; a request's time
    to first token ends with the pass that finishes its prompt. ``ttft_mean_ms`` is the mean
    over the batch's requests, the TTFT serving benchmarks quote (vLLM's benchmark_serving:
    "Mean TTFT"); ``ttft_max_ms``, the last request's, is every prefill pass. ``tpot_ms`` is
    one decode step averaged over the ``gen - 1`` steps after the first token, as the KV cache
    grows from ``prompt`` to ``prompt + gen`` tokens; ``request_ms`` = ttft_max + (gen − 1)·tpot,
    the batch's latency, and ``tokens_per_s`` is the batch's generated tokens over it. Memory is
    per GPU: the weights (quantized sizes, group scales included), the KV cache at
    ``prompt + gen`` tokens, and the activation workspace; ``fits`` compares their sum with the
    usable share of the GPU's memory. ``above_max_num_seqs``: the batch is larger than the
    plan's ``max_num_seqs``, the most sequences the engine schedules at once.
    """

    batch: int
    ttft_mean_ms: float
    ttft_max_ms: float
    tpot_ms: float
    tokens_per_s: float
    request_ms: float
    weights_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    fits: bool
    above_max_num_seqs: bool
    prefill_steps: int  # forward passes of at most the token budget each
    prefill_attention_ms: float  # of ttft_ms
    prefill_comm_ms: float  # of ttft_ms: the tensor-parallel all-reduces and logit gathers
    decode_attention_ms: float  # of tpot_ms, averaged over the decode steps
    decode_comm_ms: float  # of tpot_ms
    prefill_flops: float  # per GPU: the GEMMs' and the attention's
    decode_bytes: float  # per GPU and decode step: weights read, KV cache read at mid context
    roofline_ttft_ms: float  # prefill FLOPs over each GEMM dtype's dense peak: of ttft_max_ms
    roofline_tpot_ms: float  # decode bytes over the DRAM bandwidth

    @property
    def memory_bytes(self) -> int:
        """Weights, KV cache and activations on one GPU."""
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes


@dataclass(frozen=True)
class LlmPlanRecord:
    """A serving plan of one model on one device: a row per batch size, ``max_batch`` (the
    largest batch whose memory fits, from the HBM arithmetic), ``max_num_seqs`` (the most
    sequences the engine schedules at once; rows above it are flagged), and what the plan
    assumes.

    ``decode_reports`` holds each row's decode step (mid context) as a ``CostReport`` of one
    GPU (every stage's layers, of one micro-batch with pipeline parallelism). ``LlmPlan``
    (``llm.result``) is this record with its text.
    """

    model: str
    device: DeviceSpec
    dtype: str  # activations and unquantized weights
    weights: str  # the linear layers' weight format: the dtype's name, int8, int4 or fp8
    kv_dtype: str
    tp: int
    prompt: int
    gen: int
    token_budget: int
    memory_utilization: float
    usable_bytes: float  # per GPU: memory_utilization × the device's memory in bytes (mem_bytes)
    max_batch: int
    max_num_seqs: int
    rows: tuple[LlmPlanRow, ...]
    attention_kernel: str  # the attention kernel structure the plan prices (vLLM's choice)
    predictor: str
    assumptions: tuple[str, ...] = ()
    pp: int = 1  # pipeline stages, tp GPUs each (ep with expert parallelism)
    ep: int = 1  # expert-parallel GPUs a stage: tp x the data-parallel attention ranks
    decode_reports: tuple[CostReport, ...] = field(default=(), compare=False, repr=False)

    def row(self, batch: int) -> LlmPlanRow:
        """The row of ``batch``."""
        for r in self.rows:
            if r.batch == batch:
                return r
        have = [r.batch for r in self.rows]
        near = min(have, key=lambda b: abs(b - batch))
        raise ValueError(f"no row for batch {batch}; the plan has {have} (nearest {near})")

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data: ``{"rows": [...], "max_batch": ..., "device": ...}``."""
        return {
            "model": self.model,
            "device": self.device.id,
            "device_name": self.device.name,
            "dtype": self.dtype,
            "weights": self.weights,
            "kv_dtype": self.kv_dtype,
            "tp": self.tp,
            "pp": self.pp,
            "ep": self.ep,
            "prompt": self.prompt,
            "gen": self.gen,
            "token_budget": self.token_budget,
            "memory_utilization": self.memory_utilization,
            "usable_bytes": self.usable_bytes,
            "max_batch": self.max_batch,
            "max_num_seqs": self.max_num_seqs,
            "attention_kernel": self.attention_kernel,
            "predictor": self.predictor,
            "rows": [{**asdict(r), "memory_bytes": r.memory_bytes} for r in self.rows],
            "assumptions": list(self.assumptions),
        }

    def to_json(self, path: str | Path | None = None, indent: int = 2) -> str:
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text
