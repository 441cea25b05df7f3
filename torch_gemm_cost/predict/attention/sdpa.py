"""Scaled-dot-product attention inside a model on a GPU: one fused attention kernel.

On a GPU, ``scaled_dot_product_attention`` runs a FlashAttention-class kernel, compiled or
not (inductor calls the same kernel). Its time is the fused-attention model's
(``attention.AttentionPredictor``, fitted on vLLM's kernels): the FLOPs of QKᵀ and PV with the
causal saving, Q/K/V/O traffic, GQA, split-KV in decode, its own efficiency, with a cold L2
(each layer reads other K/V). An explicit mask the kernel reads adds its bytes at the
elementwise rate. The call's two GEMM records keep their FLOPs for the totals and the padding
advice; their time is the kernel's (``estimates.estimate_gemms`` marks them ``fused``).

On a CPU (a calibrated host) SDPA stays as today: its two GEMMs priced by the GEMM predictor
and an on-chip softmax. Eager attention (``attn_implementation="eager"``) is no SDPA call and
is priced op by op. NB: the backward of a training step keeps its GEMM records; no measured
attention backward kernel checks a model of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...hardware.catalog import DeviceSpec, is_cpu
from ...records.types import OtherOp
from ..ops import OP_CLASSES, OpCostModel, load_op_costs
from . import AttentionBatch, AttentionCall, AttentionPredictor, sdpa_kernel

__all__ = ["FLASH_PREFIX", "runs_fused_attention", "sdpa_calls", "sdpa_times_ms",
           "shipped_attention"]

FLASH_PREFIX = "flash_attention_"  # the kernel an SDPA call runs as: "flash_attention_torch_fa2_7"


def runs_fused_attention(device: DeviceSpec) -> bool:
    """Whether SDPA on ``device`` is priced as one fused attention kernel: a GPU with the
    clock and DRAM bandwidth the attention model reads."""
    return (not is_cpu(device) and bool(device.boost_clock_mhz)
            and math.isfinite(device.dram_bw_bytes_per_s) and device.sm_count > 0)


def shipped_attention() -> AttentionPredictor:
    """The shipped attention weights (and their interval calibration), read once
    (``registry.load_shipped``)."""
    return AttentionPredictor.shipped()


def sdpa_calls(ops: Sequence[OtherOp], device: DeviceSpec) -> list[AttentionCall]:
    """The attention call of each SDPA record (``OtherOp.attention``), as the kernel PyTorch
    runs on ``device`` (``attention.sdpa_kernel``), writing no paged KV cache. A query of one
    token is a decode step; head sizes of Q/K and V that differ count as their mean (the FLOPs
    are 2·d_qk + 2·d_v per pair)."""
    kernel = sdpa_kernel(device)
    calls = []
    for op in ops:
        a = op.attention
        if a is None:
            raise ValueError(f"op {op.op} at {op.node} carries no attention shape")
        calls.append(AttentionCall(
            phase="decode" if a.q_len == 1 else "prefill", batch=a.batch, q_len=a.q_len,
            kv_len=a.kv_len, heads=a.heads, kv_heads=a.kv_heads,
            head_dim=-(-(a.head_dim + a.head_dim_v) // 2), causal=a.causal, dtype=op.dtype,
            kv_dtype=op.dtype, kernel=kernel, cache_write=False, dropout=a.dropout))
    return calls


def sdpa_times_ms(ops: Sequence[OtherOp], device: DeviceSpec,
                  predictor: AttentionPredictor | None = None,
                  op_costs: OpCostModel | None = None) -> tuple[list[float], list[str]]:
    """Each SDPA call's kernel time (ms) on ``device`` and the kernel it is priced as
    (``FLASH_PREFIX`` and the kernel's name): the attention model's time, cold L2, plus any
    explicit mask's bytes at the elementwise η."""
    if not ops:
        return [], []
    predictor = predictor or shipped_attention()
    costs = op_costs or load_op_costs()
    pred = predictor.predict(AttentionBatch.from_calls(sdpa_calls(ops, device)), device)
    eta = costs.eta_on(device)[OP_CLASSES.index("elementwise")]
    times = [float(t) + (op.attention.mask_bytes if op.attention else 0)
             / (eta * device.dram_bw_bytes_per_s) * 1e3
             for t, op in zip(pred.time_ms.tolist(), ops)]
    return times, [f"{FLASH_PREFIX}{k}" for k in pred.kernel]
