"""The plan's arguments checked at the boundary, before anything is captured: each bad value
named with the nearest good one."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..hardware.catalog import DeviceSpec, is_cpu, list_devices
from ..hardware.dtypes import ComputeDtype, resolve_dtype
from ..hardware.target import Target, resolve_target
from ..predict.attention.sdpa import runs_fused_attention
from ..suggest import check_choice
from .shape import ServingShape
from .weights import FP4_FORMATS, FP8_DTYPE, WEIGHT_FORMATS

__all__ = ["MEMORY_UTILIZATION", "check_device", "check_kv_dtype", "check_serving",
           "check_weights", "serving_dtype"]

MEMORY_UTILIZATION = 0.9  # vLLM's gpu_memory_utilization default


def check_device(device: Any) -> Target:
    """The device resolved (its spec, and the profile it may bring), if it is a GPU the plan
    can price."""
    target = resolve_target(device)
    spec = target.spec
    if is_cpu(spec) or not runs_fused_attention(spec):
        raise ValueError(f"device {spec.id!r} is no GPU the attention model prices; plan on a "
                         "catalog GPU, e.g. 'h100_sxm5_80gb'")
    if not spec.mem_bytes:
        raise ValueError(f"device {spec.id!r} ({target.source}) has no memory size; a plan "
                         "needs it to fit weights and KV cache (a spec file's memory size)")
    return target


def check_serving(full: ServingShape, prompt: int, gen: int, batches: Iterable[int] | int,
                  token_budget: int, memory_utilization: float, max_num_seqs: int
                  ) -> tuple[int, ...]:
    """The request sizes, the scheduler's limits and the memory share checked; the batch sizes
    to plan, sorted, each once."""
    _check_int("prompt", prompt, 1)
    _check_int("gen", gen, 2)
    _check_int("token_budget", token_budget, 1)
    _check_int("max_num_seqs", max_num_seqs, 1)
    if isinstance(memory_utilization, bool) or not isinstance(memory_utilization, (int, float)) \
            or not 0 < memory_utilization <= 1:
        raise ValueError(f"memory_utilization must be in (0, 1], got {memory_utilization!r}; "
                         f"nearest good: {MEMORY_UTILIZATION}")
    sizes = _check_batches(batches, token_budget)
    if full.max_positions and prompt + gen > full.max_positions:
        raise ValueError(f"prompt + gen = {prompt + gen} exceeds the model's "
                         f"{full.max_positions} positions; nearest good gen: "
                         f"{max(full.max_positions - prompt, 2)}")
    return sizes


def serving_dtype(dtype: Any, config: Any) -> ComputeDtype:
    """The activations' dtype; None as vLLM's ``--dtype auto``: bf16 for a bf16 checkpoint,
    fp16 for an fp16 or fp32 one, bf16 where the config names none."""
    if dtype is None:
        own = getattr(config, "dtype", None)
        dtype = "bf16" if own is None or resolve_dtype(own).name == "bfloat16" else "fp16"
    cd = resolve_dtype(dtype)
    if cd.name not in ("bfloat16", "float16"):
        raise ValueError(f"dtype {cd.name!r}: serving runs 16-bit activations; use 'bf16' or "
                         "'fp16' (and weights='fp8' or 'int4' for narrower weights)")
    return cd


def check_weights(weights: Any, spec: DeviceSpec, cd: ComputeDtype) -> str | None:
    """The weight format of the linear layers (None: the activations' dtype), one the device
    runs."""
    if weights is None:
        return None
    if not isinstance(weights, str):
        raise TypeError(f"weights must be None or a name, got {type(weights).__name__}")
    if weights in ("bf16", "fp16", "bfloat16", "float16") and resolve_dtype(weights) == cd:
        return None
    fmt = "fp8" if weights in ("fp8", FP8_DTYPE, "e4m3") else weights
    fmt = check_choice("weights format", fmt, WEIGHT_FORMATS)
    if fmt == "fp8" and not spec.supports(FP8_DTYPE):
        have = [k for k, v in spec.peak_flops if v is not None]
        raise ValueError(f"weights='fp8' needs fp8 tensor cores; {spec.id} ({spec.name}) "
                         f"supports {', '.join(have)}: use weights='int8' or 'int4'")
    if fmt in FP4_FORMATS and spec.peak("fp4") is None:
        raise ValueError(f"weights={fmt!r} needs fp4 tensor cores; {spec.id} ({spec.name}) has "
                         f"none. Catalog devices with them: {', '.join(_with_peak('fp4'))}; "
                         "on this device use weights='fp8' or 'int4'")
    if fmt == "w4a8" and (spec.vendor != "NVIDIA" or not spec.supports(FP8_DTYPE)):
        raise ValueError(f"weights='w4a8' runs int4 weights against fp8 activations on NVIDIA "
                         f"fp8 tensor cores; {spec.id} ({spec.name}) has none. Catalog devices "
                         f"with them: {', '.join(_with_peak('fp8', 'NVIDIA'))}; on this device "
                         "use weights='int4'")
    if fmt in ("int8", "int4"):
        major = spec.compute_capability.split(".")[0]
        if spec.vendor != "NVIDIA" or not major.isdigit() or int(major) < 8:
            raise ValueError(f"weights={fmt!r} runs on Marlin/Machete kernels, which need an "
                             f"NVIDIA GPU of compute capability 8.0 or newer; {spec.id} is "
                             f"{spec.vendor} {spec.compute_capability}: use weights=None")
    return fmt


def _with_peak(key: str, vendor: str | None = None) -> list[str]:
    """The catalog devices with a ``key`` tensor rate (of ``vendor``)."""
    return [d.id for d in list_devices() if d.peak(key) is not None
            and (vendor is None or d.vendor == vendor)]


def check_kv_dtype(kv_dtype: Any, cd: ComputeDtype) -> ComputeDtype:
    """The KV cache's dtype: the activations' (None) or fp8."""
    if kv_dtype is None:
        return cd
    kv = resolve_dtype(kv_dtype)
    if kv.name not in (cd.name, FP8_DTYPE):
        raise ValueError(f"kv_dtype {kv.name!r}: the KV cache is stored in the activations' "
                         f"dtype ({cd.name}) or in fp8; nearest: 'fp8'")
    return kv


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        near = max(low, int(value)) if isinstance(value, (int, float)) and math.isfinite(
            value) else low
        raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}; "
                         f"nearest good: {near}")
    return value


def _check_batches(batches: Any, budget: int) -> tuple[int, ...]:
    values = [batches] if isinstance(batches, int) else list(batches)
    if not values:
        raise ValueError("batches is empty; give at least one batch size, e.g. [1, 8, 64]")
    out = []
    for b in values:
        _check_int("each batch size", b, 1)
        if b > budget:
            raise ValueError(f"batch {b} exceeds the token budget {budget}: a decode step runs "
                             f"one token of every sequence; raise token_budget to at least {b}"
                             f" or use batch {budget}")
        out.append(b)
    return tuple(sorted(set(out)))
