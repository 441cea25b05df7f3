"""GEMM records: one GEMM, or one other op, of a model's run, as frozen dataclasses, and a
batch of GEMMs as tensors for the predictor.

Convention (standard BLAS): ``C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]``; ``k`` is the
reduction dim and FLOPs = 2·batch·m·n·k.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import overload

import torch

from ..hardware.dtypes import DTYPES, ComputeDtype, fp8_kernel_index, resolve_dtype
from ..suggest import unknown

__all__ = [
    "DTYPE_NAMES",
    "LAYOUT_LEADS",
    "OP_LAYOUT",
    "AttentionShape",
    "DepthwiseShape",
    "FusedKernel",
    "GemmBatch",
    "GemmSite",
    "OtherOp",
    "alignment_bytes",
    "operand_leads",
]

DTYPE_NAMES: tuple[str, ...] = tuple(DTYPES)  # what ``GemmBatch.dtype_index`` indexes

# layout -> which dim is the leading (contiguous-stride) dim of A, B and C (DATA.md's layouts)
LAYOUT_LEADS: dict[str, tuple[str, str, str]] = {
    "A@B": ("k", "n", "n"),  # A (m, k) row-major, B (k, n) row-major, C (m, n)
    "x@W^T": ("k", "k", "n"),  # W stored (n, k): its rows have k elements
    "colmajor_NN": ("m", "k", "m"),  # BLAS column-major: lda = m, ldb = k, ldc = m
    "colmajor_NT": ("m", "n", "m"),  # B^T stored n x k column-major: ldb = n
    "colmajor_TN": ("k", "k", "m"),  # A^T stored k x m column-major: lda = k
}

# op -> the layout it runs in (the measured data's ``layout`` column where it has none)
OP_LAYOUT: dict[str, str] = {
    "matmul": "A@B",
    "mm": "A@B",
    "bmm": "A@B",
    "linear": "x@W^T",
    "addmm": "x@W^T",
    "gemm_NN": "colmajor_NN",
    "gemm_NT": "colmajor_NT",
    "gemm_TN": "colmajor_TN",
}


@overload
def alignment_bytes(leading_dim: int, elem_bytes: int, cap: int = 16) -> int: ...
@overload
def alignment_bytes(leading_dim: torch.Tensor, elem_bytes: torch.Tensor | int,
                    cap: int = 16) -> torch.Tensor: ...
def alignment_bytes(leading_dim: int | torch.Tensor, elem_bytes: int | torch.Tensor,
                    cap: int = 16) -> int | torch.Tensor:
    """Largest power of two ≤ ``cap`` (a power of two) dividing the leading dimension's size in
    bytes; ``cap`` for an empty dim. For ints an int; for tensors a float64 tensor, elementwise.

    This is the widest vector load the operand allows: 16 bytes (e.g. 8 fp16 elements) when
    ``leading_dim * elem_bytes`` is a multiple of 16.

    >>> alignment_bytes(50257, 2)   # 100514 bytes = 2 · 50257: only 2-byte loads
    2
    >>> alignment_bytes(4096, 2)
    16
    >>> alignment_bytes(torch.tensor([50257.0, 4096.0, 0.0]), 2).tolist()
    [2.0, 16.0, 16.0]
    """
    if isinstance(leading_dim, torch.Tensor) or isinstance(elem_bytes, torch.Tensor):
        row = (torch.as_tensor(leading_dim).long() * torch.as_tensor(elem_bytes).long()).clamp(min=0)
        low_bit = row & (-row)  # the largest power of two dividing row; 0 where row == 0
        return torch.where(row > 0, low_bit.clamp(max=cap), torch.full_like(row, cap)).double()
    row_bytes = int(leading_dim) * int(elem_bytes)
    return min(row_bytes & -row_bytes, cap) if row_bytes > 0 else cap


def operand_leads(op: str) -> tuple[int, int, int]:
    """Which dim (0 = m, 1 = n, 2 = k) is the leading dim of A, B and C for ``op``, an op of
    ``OP_LAYOUT`` or a layout of ``LAYOUT_LEADS``.

    >>> operand_leads("linear")   # x (m, k), W stored (n, k), y (m, n)
    (2, 2, 1)
    """
    layout = OP_LAYOUT.get(op, op if op in LAYOUT_LEADS else None)
    if layout is None:
        known = sorted(set(OP_LAYOUT) | set(LAYOUT_LEADS))
        raise ValueError(unknown("op", op, known))
    a, b, c = ("mnk".index(d) for d in LAYOUT_LEADS[layout])
    return a, b, c


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
    # 2·batch·m·n·k, times the kept fraction under a causal mask; a strided transposed
    # convolution's needed FLOPs, fewer than its dgrad GEMM runs (records.handlers)
    flops: int
    dram_bytes: int  # compulsory bytes: A, B and C each moved once
    causal: bool = False  # attention scores under a causal mask (about half the tiles skipped)
    # a convolution's kernel taps: its unfolded dim (k forward: C_in/groups·taps, transposed
    # or not) holds this many elements per channel; 1 elsewhere
    taps: int = 1
    # bytes per element of B as stored, where it differs from the compute dtype's: a weight
    # quantized to int4 or int8 with its group scales (0.5 + 2/128 for int4 in groups of 128),
    # dequantized in the GEMM's main loop; None: the compute dtype's
    b_bytes: float | None = None
    # elements of A cast to the compute dtype by a kernel of its own before the GEMM (vLLM's
    # fp8 Linear quantizes its bf16 input first); 0: none
    quantized_elements: int = 0
    # which fp8 GEMM kernel runs it (``hardware.dtypes.FP8_KERNELS``); read for fp8 dtypes only
    fp8_kernel: str = "torch_scaled_mm"

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.m, self.n, self.k)

    @property
    def dense_flops(self) -> int:
        """2·batch·m·n·k, with no causal discount (what FLOP counters report)."""
        return 2 * self.batch * self.m * self.n * self.k


@dataclass(frozen=True)
class AttentionShape:
    """What a scaled-dot-product-attention call computes, as a fused attention kernel sees it:
    ``batch`` sequences of ``heads`` query heads over ``kv_heads`` K/V heads (GQA when fewer),
    ``q_len`` queries against ``kv_len`` keys, head sizes ``head_dim`` (Q, K) and ``head_dim_v``.

    ``causal``: query i of ``q_len`` sees keys up to position kv_len − q_len + i (a KV cache's
    bottom-right alignment; a top-left ``is_causal`` call is recorded with the keys it can reach).
    ``mask_bytes``: an explicit mask the kernel reads (0 without one). ``dropout``: the call
    drops attention probabilities (``dropout_p`` > 0, a training step's attention dropout).
    """

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    head_dim_v: int
    causal: bool
    mask_bytes: int = 0
    dropout: bool = False


@dataclass(frozen=True)
class DepthwiseShape:
    """A depthwise convolution as ATen's own CUDA kernel runs it (``predict.stencil``): one
    thread per output element, ``kernel`` taps per spatial dim as the kernel sees them (a 1D
    convolution viewed as 2D: (1, k)), each input channel feeding ``channel_multiplier``
    output channels."""

    kernel: tuple[int, ...]
    channel_multiplier: int = 1


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
    # the attention an SDPA call computes; its GEMMs are the node's ``sdpa_qk``/``sdpa_pv`` sites
    attention: AttentionShape | None = None
    # elements of one row a row-wise kernel reduces (softmax, log-softmax and layer norm run a
    # block per row; ``predict.rows``); 0 for any other op
    row_elems: int = 0
    # a batch, instance or group norm that computes its statistics (training mode; group norm
    # always): a statistics pass over the input, then the normalizing pass (``predict.rows``)
    computes_stats: bool = False
    # a depthwise convolution that PyTorch runs in its own CUDA kernel, not cuDNN's
    # (``records.handlers.depthwise_shape``); None for any other op
    depthwise: DepthwiseShape | None = None


@dataclass(frozen=True)
class FusedKernel:
    """One kernel that runs several of a run's non-GEMM ops, as ``torch.compile`` fuses them
    (``compiled.fusion``): the ops at positions ``ops`` of the run's ``OtherOp`` records.

    ``dram_bytes`` is what the kernel reads from outside plus what it writes that is used
    outside; its intermediates stay in registers. ``op_class`` names what prices it: the fused
    op it computes (an RMSNorm, a SiLU·mul, ...: ``predict.ops.FUSED_OPS``), else the
    ``OtherOp`` class of its costliest kind of op (a kernel with a softmax runs at its rate).
    """

    name: str  # e.g. "triton_red_fused_add_native_layer_norm_3", as inductor names kernels
    phase: str  # "forward" or "backward"
    op_class: str
    ops: tuple[int, ...]  # positions in the run's OtherOp records, first op first
    dram_bytes: int
    module: str  # the module of the kernel's first op
    launches: int = 1



@dataclass(frozen=True)
class GemmBatch:
    """N GEMMs as float64 tensors of shape (N,), ready for batched physics.

    ``dtype_index`` indexes ``DTYPE_NAMES``. Alignments are in bytes. ``b_transposed`` is 1
    where B is stored (n, k), k contiguous, as a Linear weight is (``GemmSite.b_transposed``),
    and 0 for a row-major (k, n) B, the default.
    """

    batch: torch.Tensor
    m: torch.Tensor
    n: torch.Tensor
    k: torch.Tensor
    dtype_index: torch.Tensor  # (N,) long
    in_bytes: torch.Tensor  # bytes per element of A and B
    out_bytes: torch.Tensor  # bytes per element of C
    a_align_bytes: torch.Tensor
    b_align_bytes: torch.Tensor
    c_align_bytes: torch.Tensor
    bias: torch.Tensor  # 0 or 1
    # share of the dense work a kernel runs: < 1 for causal attention scores, whose masked tiles
    # flash kernels skip; ones when omitted
    kept_fraction: torch.Tensor = None  # type: ignore[assignment]
    # compulsory DRAM bytes; A, B and C each moved once when omitted. A fused attention kernel
    # keeps the score matrix on chip, so its records bring their own, smaller count.
    dram_bytes: torch.Tensor = None  # type: ignore[assignment]
    b_transposed: torch.Tensor = None  # type: ignore[assignment]
    # bytes per element of B as stored (a quantized weight with its scales); ``in_bytes`` when
    # omitted. Tile traffic, the compulsory bytes and the DRAM roof read B at this size.
    b_bytes: torch.Tensor = None  # type: ignore[assignment]
    # elements of A a cast kernel of its own converts before the GEMM (GemmSite's); zeros
    # when omitted
    quantized_elements: torch.Tensor = None  # type: ignore[assignment]
    # index into FP8_KERNELS of the fp8 kernel each row runs (long); zeros when omitted
    fp8_kernel: torch.Tensor = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.b_transposed is None:
            object.__setattr__(self, "b_transposed", torch.zeros_like(self.m))
        if self.kept_fraction is None:
            object.__setattr__(self, "kept_fraction", torch.ones_like(self.m))
        if self.quantized_elements is None:
            object.__setattr__(self, "quantized_elements", torch.zeros_like(self.m))
        if self.fp8_kernel is None:
            object.__setattr__(self, "fp8_kernel", torch.zeros_like(self.m, dtype=torch.long))
        if self.dram_bytes is None:
            if self.b_bytes is None:
                ab = self.batch * (self.m * self.k + self.k * self.n) * self.in_bytes
            else:
                ab = self.batch * (self.m * self.k * self.in_bytes + self.k * self.n * self.b_bytes)
            object.__setattr__(
                self, "dram_bytes", ab + self.batch * self.m * self.n * self.out_bytes
            )
        if self.b_bytes is None:
            object.__setattr__(self, "b_bytes", self.in_bytes.clone())

    def __len__(self) -> int:
        return int(self.m.shape[0])

    @property
    def flops(self) -> torch.Tensor:
        return 2.0 * self.batch * self.m * self.n * self.k * self.kept_fraction

    @property
    def compulsory_bytes(self) -> torch.Tensor:
        """Bytes that must cross DRAM at least once (``dram_bytes``)."""
        return self.dram_bytes

    def dtype_names(self) -> list[str]:
        return [DTYPE_NAMES[i] for i in self.dtype_index.tolist()]

    def select(self, index: torch.Tensor | Sequence[int]) -> GemmBatch:
        """The GEMMs at ``index`` (a bool mask or integer positions), in that order."""
        idx = torch.as_tensor(index)
        return GemmBatch(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    @classmethod
    def concat(cls, batches: Iterable[GemmBatch]) -> GemmBatch:
        """One batch holding every GEMM of ``batches``, in order."""
        parts = list(batches)
        return cls(**{f.name: torch.cat([getattr(b, f.name) for b in parts])
                      for f in fields(cls)})

    @classmethod
    def from_sites(cls, sites: Sequence[GemmSite]) -> GemmBatch:
        def col(values: Sequence[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float64)

        return cls(
            batch=col([s.batch for s in sites]),
            m=col([s.m for s in sites]),
            n=col([s.n for s in sites]),
            k=col([s.k for s in sites]),
            dtype_index=torch.tensor([DTYPE_NAMES.index(s.dtype) for s in sites], dtype=torch.long),
            in_bytes=col([DTYPES[s.dtype].in_bytes for s in sites]),
            out_bytes=col([DTYPES[s.out_dtype].in_bytes for s in sites]),
            a_align_bytes=col([s.a_align_bytes for s in sites]),
            b_align_bytes=col([s.b_align_bytes for s in sites]),
            c_align_bytes=col([s.c_align_bytes for s in sites]),
            bias=col([float(s.bias) for s in sites]),
            kept_fraction=col([s.flops / s.dense_flops if s.causal and s.dense_flops else 1.0
                                for s in sites]),
            dram_bytes=col([s.dram_bytes for s in sites]),
            b_transposed=col([float(s.b_transposed) for s in sites]),
            b_bytes=col([DTYPES[s.dtype].in_bytes if s.b_bytes is None else s.b_bytes
                         for s in sites]),
            quantized_elements=col([s.quantized_elements for s in sites]),
            fp8_kernel=torch.tensor([fp8_kernel_index(s.fp8_kernel) for s in sites],
                                    dtype=torch.long),
        )

    @classmethod
    def from_dims(
        cls,
        *,
        m: float | torch.Tensor | Sequence[float],
        n: float | torch.Tensor | Sequence[float],
        k: float | torch.Tensor | Sequence[float],
        batch: float | torch.Tensor | Sequence[float] | None = None,
        dtype: str | torch.dtype | ComputeDtype = "float32",
        op: str = "matmul",
        bias: torch.Tensor | Sequence[float] | bool | None = None,
    ) -> GemmBatch:
        """A batch of GEMMs of one dtype and op; dims broadcast together. ``op`` (see
        ``operand_leads``) sets which dims decide each operand's alignment and whether B is
        read transposed (``linear``: B is a weight stored (n, k))."""
        cd = resolve_dtype(dtype)
        a_lead, b_lead, c_lead = operand_leads(op)
        dims = torch.broadcast_tensors(
            *(torch.as_tensor(x, dtype=torch.float64).reshape(-1) for x in (m, n, k)))
        rows = torch.ones_like(dims[0]) if batch is None else torch.as_tensor(
            batch, dtype=torch.float64)
        size = dims[0].shape[0]

        def column(value: torch.Tensor | Sequence[float] | bool) -> torch.Tensor:
            return torch.as_tensor(value, dtype=torch.float64).reshape(-1).expand(size).clone()

        return cls(
            batch=column(rows),
            m=dims[0].clone(),
            n=dims[1].clone(),
            k=dims[2].clone(),
            dtype_index=torch.full((size,), DTYPE_NAMES.index(cd.name), dtype=torch.long),
            in_bytes=torch.full((size,), float(cd.in_bytes), dtype=torch.float64),
            out_bytes=torch.full((size,), float(cd.out_bytes), dtype=torch.float64),
            a_align_bytes=alignment_bytes(dims[a_lead], cd.in_bytes),
            b_align_bytes=alignment_bytes(dims[b_lead], cd.in_bytes),
            c_align_bytes=alignment_bytes(dims[c_lead], cd.out_bytes),
            bias=column(False if bias is None else bias),
            b_transposed=torch.full((size,), float(b_lead == 2), dtype=torch.float64),
        )
