"""GEMM records: one GEMM, or one other op, of a model's run, as frozen dataclasses.

Convention (standard BLAS): ``C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]``; ``k`` is the
reduction dim and FLOPs = 2·batch·m·n·k.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GemmSite", "OtherOp", "alignment_bytes"]


def alignment_bytes(leading_dim: int, elem_bytes: int, cap: int = 16) -> int:
    """Largest power of two ≤ ``cap`` dividing the leading dimension's size in bytes.

    This is the widest vector load the operand allows: 16 bytes (e.g. 8 fp16 elements) when
    ``leading_dim * elem_bytes`` is a multiple of 16.

    >>> alignment_bytes(50257, 2)   # 100514 bytes = 2 · 50257: only 2-byte loads
    2
    >>> alignment_bytes(4096, 2)
    16
    """
    row_bytes = int(leading_dim) * int(elem_bytes)
    if row_bytes <= 0:
        return cap
    align = 1
    while align < cap and row_bytes % (align * 2) == 0:
        align *= 2
    return align


@dataclass(frozen=True)
class GemmSite:
    """One GEMM the model runs, in the standard convention, under the requested compute dtype."""

    module: str  # dotted module path, e.g. "model.layers.0.self_attn.q_proj"; "" at top level
    module_type: str  # class name of that module, e.g. "Linear"
    op: str  # linear, addmm, mm, bmm, baddbmm, addbmm, mv, addmv, dot, matmul, einsum,
    # conv1d (HF Conv1D), sdpa_qk, sdpa_pv, grouped_mm (MoE experts), convolution and
    # conv_transpose (nn.ConvNd and ConvTransposeNd, as implicit GEMMs)
    node: str  # FX node name (or recorder op index) that produced it
    phase: str  # "forward", "backward_dx" or "backward_dw"
    batch: int
    m: int
    n: int
    k: int
    dtype: str  # compute dtype, canonical name (see dtypes.DTYPES)
    out_dtype: str
    a_transposed: bool  # A is read as (k, m) column-major
    b_transposed: bool  # B is read as (n, k), as a Linear weight is
    a_align_bytes: int  # widest vector load along A's contiguous dim (2, 4, 8 or 16)
    b_align_bytes: int
    c_align_bytes: int
    bias: bool  # a bias add is fused into the GEMM
    flops: int  # 2·batch·m·n·k, times the kept fraction under a causal mask
    dram_bytes: int  # compulsory bytes: A, B and C each moved once
    causal: bool = False  # attention scores under a causal mask (about half the tiles skipped)
    # a convolution's kernel taps: its unfolded dim (k forward: C_in/groups·taps; n forward for a
    # transposed one: C_out/groups·taps) holds this many elements per channel; 1 elsewhere
    taps: int = 1

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.m, self.n, self.k)

    @property
    def dense_flops(self) -> int:
        """2·batch·m·n·k, with no causal discount (what FLOP counters report)."""
        return 2 * self.batch * self.m * self.n * self.k


@dataclass(frozen=True)
class OtherOp:
    """A non-GEMM op: its bytes moved, so it can get a memory-bound time."""

    module: str
    module_type: str
    op: str  # the aten overload packet, e.g. "aten.add", "aten.native_layer_norm"
    node: str
    phase: str
    op_class: str  # elementwise, norm, softmax, reduction, copy, embedding, view, attention, other
    dtype: str
    numel: int  # elements of the largest output
    dram_bytes: int  # bytes read plus bytes written, each tensor once
    flops: int = 0

