"""The kernel that casts a GEMM's 16-bit input to fp8 before vLLM's fp8 GEMM, priced from its
launch and its bytes. Nothing here is fitted.

vLLM's fp8 Linear quantizes its bf16 activations with a static per-tensor scale
(``static_scaled_fp8_quant``, vllm-project/vllm csrc/quantization/fp8/common.cu): one CTA of 256
threads per token row, each thread converting one 16-byte vector (8 elements) per pass, so a row
of K elements takes ⌈K / 2048⌉ passes, each a dependent DRAM round trip.

- **CTAs resident per SM.** The SMs work through the rows ⌈rows / (SMs · resident)⌉ deep. By its
  256 threads an SM could hold 8 such CTAs (6 on Ada), but this kernel's rows run one at a
  time on an SM (``CTAS_PER_SM``): each is a chain of dependent memory round trips (the scale,
  the row, the store), and the rows of one SM do not overlap. docs/how-it-works.md gives the
  measurements that say so.
- **Latency.** A row costs ``CTA_US`` for its first pass and ``PASS_US`` for each further one:
  latencies, in µs, the same on every GPU.
- **Bytes.** Every element is read (2 bytes) and written (1 byte) once at the sustained DRAM
  bandwidth, on top of the latency: the rows of a pass wait on their round trip before they
  stream.
"""

from __future__ import annotations

import torch

__all__ = ["CTAS_PER_SM", "CTA_US", "ELEMENTS_PER_PASS", "PASS_US", "cast_times"]

# elements of a row one pass converts: 256 threads × one 16-byte vector of 16-bit elements
ELEMENTS_PER_PASS = 256 * 16 // 2
# rows an SM works on at once, as measured (see the module docstring)
CTAS_PER_SM = 1
# a row's first pass, and each further one, in µs (latencies; see the module docstring)
CTA_US = 0.92
PASS_US = 0.51
# bytes an element moves: 2 read (16-bit), 1 written (fp8)
BYTES_PER_ELEMENT = 3.0


def cast_times(elements: torch.Tensor, k: torch.Tensor, sm_count: torch.Tensor,
               dram_bytes_per_s: torch.Tensor) -> dict[str, torch.Tensor]:
    """The cast of ``elements`` (N,) 16-bit elements in rows of ``k`` (N,) on GPUs of
    ``sm_count`` SMs and ``dram_bytes_per_s`` sustained bandwidth, launch aside: ``cast_ms``,
    and its parts ``cast_latency_ms``, ``cast_bytes_ms``, ``cast_rows_per_sm`` (how deep the
    SMs work through the rows) and ``cast_passes`` (per row), (N,) each; zeros where
    ``elements`` is 0. Broadcasts; differentiable in ``dram_bytes_per_s``."""
    live = elements > 0
    # NB: a stand-in of one element where none is cast, so no 0/0 reaches a gradient
    elems = torch.where(live, elements, torch.ones_like(elements))
    k = k.clamp(min=1.0)
    rows = torch.round(elems / k)  # elements are rows · k; round off float32's error
    depth = torch.ceil(rows / (sm_count * CTAS_PER_SM))
    passes = torch.ceil(k / ELEMENTS_PER_PASS)
    latency_ms = depth * (CTA_US + (passes - 1.0) * PASS_US) * 1e-3
    bytes_ms = BYTES_PER_ELEMENT * elems / dram_bytes_per_s * 1e3
    zero = torch.zeros_like(latency_ms)
    return {
        "cast_ms": torch.where(live, latency_ms + bytes_ms, zero),
        "cast_latency_ms": torch.where(live, latency_ms, zero),
        "cast_bytes_ms": torch.where(live, bytes_ms, zero),
        "cast_rows_per_sm": torch.where(live, depth, zero),
        "cast_passes": torch.where(live, passes, zero),
    }
