"""GEMV: a GEMM with n = 1 or m = 1 on the CUDA cores, priced as the stream it is. Nothing here is
fitted.

For such a shape cuBLAS runs no GEMM tile. torch's mm, mv, bmm and linear with one dim of 1
reach its gemv kernels (``gemv2T_kernel_val``, ``internal::gemvx::kernel``, ``gemvNSP_kernel``;
a dot product's ``dot_kernel``): every fp32 and tf32 GEMV of the H200's measurements
(benchmarks/data/h200) whose kernel was recorded ran one, the same kernel in about the same time
in both precisions, since these kernels use the CUDA cores whatever the TF32 math mode. Each
element of the matrix is read once and feeds one FMA: 2 FLOPs per 4 bytes, far below any GPU's
fp32 ridge (ten FLOP/B or more), so the time is the DRAM stream of A, B and C at the sustained
bandwidth:

    t = max(Bytes / (η·BW), FLOPs / Peak)

with η the hybrid's fitted DRAM share and Peak the dtype's sustained one. KernelBench's
2048 x 2^20 fp32 matrix-vector product moves 8.59 GB in 10.2 ms on an L40S, 0.97 of its 864 GB/s.
The tile model would price the shape as 32- to 128-wide tiles: 32 to 128 times the FMAs that
run, at the utilization its MLP learned on GEMMs that tile.

The rule covers every GEMV the hybrid runs on the CUDA cores (its SIMT engine: fp32, fp64, and a
precision the GPU has no matrix unit for, such as a P100's fp16) and tf32 GEMVs. The 16- and
8-bit GEMVs of matrix units stay with the tile model: there cuBLAS often runs narrow tensor-core
tiles (the H200's ``nvjet_sm90_*_64x8`` kernels), and the fitted model follows LLM decode GEMMs
(m = 1) on chips it never saw. A skinny GEMM with m and n of 2 or more is no GEMV: cuBLAS runs
SGEMM tiles for it (all 1,316 of NeuSight's fp32 GEMMs with m or n of 2 to 4 ran ``*_sgemm_*``
kernels).

NB: measured GEMVs on the CUDA cores are the H200's fp32 and tf32 ones; fp64 and the other
precisions without matrix units take the same physics unmeasured.

NB: the operands are read from DRAM; a matrix warm in L2 streams faster than this.
"""

from __future__ import annotations

import torch

__all__ = ["gemv_rows", "gemv_seconds"]


def gemv_rows(m: torch.Tensor, n: torch.Tensor, cuda_core: torch.Tensor) -> torch.Tensor:
    """(N,) bool: the GEMMs a gemv kernel runs, those with an output dim of 1 (a dot product has
    both) among ``cuda_core``, the rows whose GEMV runs on the CUDA cores (fp32 and tf32, or a
    precision with no matrix unit)."""
    return ((m == 1.0) | (n == 1.0)) & cuda_core


def gemv_seconds(dram_bytes: torch.Tensor, dram_bytes_per_s: torch.Tensor, flops: torch.Tensor,
                 peak_flops_per_s: torch.Tensor) -> torch.Tensor:
    """(N,) seconds of a GEMV: its compulsory DRAM bytes at the sustained bandwidth, or its FLOPs
    at the sustained peak where those are slower (a CPU's vector units, never a GPU's)."""
    return torch.maximum(dram_bytes / dram_bytes_per_s, flops / peak_flops_per_s)
