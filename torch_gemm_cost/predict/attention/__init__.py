"""Fused attention (FlashAttention-class kernels): FLOPs, traffic, grid and time, prefill and decode.

One job a module: ``kernels`` (each kernel's traits, tiles and residency, and which kernel a
device runs), ``calls`` (the call and batch records), ``geometry`` (executed pairs, tiles,
split-KV, the grid), ``physics`` (the time of a batch on a device), ``model`` (the fitted
predictor and the roofline, their save and load), ``sdpa`` (a model's SDPA calls priced on a
GPU). docs/how-it-works.md ("The fused-attention model") explains the physics.
"""

from __future__ import annotations

from .calls import PHASES, AttentionBatch, AttentionCall
from .geometry import (
    AttentionGeometry,
    attended_pairs,
    attention_bytes,
    attention_flops,
    attention_geometry,
    fill_splits,
    fp8_converted,
    gqa_copy_kernels,
    masked_blocks,
    mha_fwd_splits,
    pack_gqa,
    side_kernels,
    single_query,
    split_kv_splits,
    triton_segmented,
    varlen_schedule_kernels,
)
from .kernels import (
    KERNELS,
    KernelTraits,
    fa2_split_tiles,
    kernel_tiles,
    resident_ctas,
    sdpa_kernel,
    vllm_kernel,
    warp_specialized,
)
from .model import AttentionPredictor, AttentionRoofline
from .physics import DeviceColumns, attention_time, kv_cache_write_s

__all__ = [
    "KERNELS",
    "PHASES",
    "AttentionBatch",
    "AttentionCall",
    "AttentionGeometry",
    "AttentionPredictor",
    "AttentionRoofline",
    "DeviceColumns",
    "KernelTraits",
    "attended_pairs",
    "attention_bytes",
    "attention_flops",
    "attention_geometry",
    "attention_time",
    "fa2_split_tiles",
    "fill_splits",
    "fp8_converted",
    "gqa_copy_kernels",
    "kernel_tiles",
    "kv_cache_write_s",
    "masked_blocks",
    "mha_fwd_splits",
    "pack_gqa",
    "resident_ctas",
    "sdpa_kernel",
    "side_kernels",
    "single_query",
    "split_kv_splits",
    "triton_segmented",
    "varlen_schedule_kernels",
    "vllm_kernel",
    "warp_specialized",
]
