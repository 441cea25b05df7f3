"""The predictor contract: a batch of GEMMs and a device in, a time per GEMM out.

Every predictor (roofline, hybrid, each ablation) implements ``Predictor.predict`` with the same
signature, so callers and benchmarks swap them in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from ..devices import DeviceSpec
from ..dtypes import DTYPES, resolve_dtype
from ..gemms import GemmSite

__all__ = ["GemmBatch", "GemmPrediction", "Predictor"]

DTYPE_NAMES: tuple[str, ...] = tuple(DTYPES)


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

    def __post_init__(self) -> None:
        if self.b_transposed is None:
            object.__setattr__(self, "b_transposed", torch.zeros_like(self.m))
        if self.kept_fraction is None:
            object.__setattr__(self, "kept_fraction", torch.ones_like(self.m))
        if self.dram_bytes is None:
            ab = self.batch * (self.m * self.k + self.k * self.n) * self.in_bytes
            object.__setattr__(
                self, "dram_bytes", ab + self.batch * self.m * self.n * self.out_bytes
            )

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
        )

    @classmethod
    def from_dims(
        cls,
        *,
        m: torch.Tensor,
        n: torch.Tensor,
        k: torch.Tensor,
        batch: torch.Tensor | None = None,
        dtype: str | torch.dtype = "float32",
        bias: torch.Tensor | None = None,
    ) -> GemmBatch:
        """A batch of row-major GEMMs of one dtype; alignment follows from the dims."""
        from ..gemms import alignment_bytes

        cd = resolve_dtype(dtype)
        m, n, k = (torch.as_tensor(x, dtype=torch.float64).reshape(-1) for x in (m, n, k))
        m, n, k = torch.broadcast_tensors(m, n, k)
        b = torch.ones_like(m) if batch is None else torch.as_tensor(batch, dtype=torch.float64)
        b = b.reshape(-1).expand_as(m)
        size = m.shape[0]

        def align(dim: torch.Tensor, elem: int) -> torch.Tensor:
            return torch.tensor(
                [alignment_bytes(int(d), elem) for d in dim.tolist()], dtype=torch.float64
            )

        return cls(
            batch=b.clone(),
            m=m.clone(),
            n=n.clone(),
            k=k.clone(),
            dtype_index=torch.full((size,), DTYPE_NAMES.index(cd.name), dtype=torch.long),
            in_bytes=torch.full((size,), float(cd.in_bytes), dtype=torch.float64),
            out_bytes=torch.full((size,), float(cd.out_bytes), dtype=torch.float64),
            a_align_bytes=align(k, cd.in_bytes),  # A is (m, k), row stride k
            b_align_bytes=align(n, cd.in_bytes),  # B is (k, n), row stride n
            c_align_bytes=align(n, cd.out_bytes),
            bias=torch.zeros(size, dtype=torch.float64)
            if bias is None
            else torch.as_tensor(bias, dtype=torch.float64).reshape(-1).expand_as(m).clone(),
        )


@dataclass(frozen=True)
class GemmPrediction:
    """Predicted time per GEMM, with the intermediates that explain it."""

    time_ms: torch.Tensor  # (N,)
    compute_bound: torch.Tensor  # (N,) bool
    details: Mapping[str, torch.Tensor] = field(default_factory=dict)  # name -> (N,)


@runtime_checkable
class Predictor(Protocol):
    """Anything that turns GEMMs on a device into times."""

    name: str
    version: str

    def predict(self, gemms: GemmBatch, device: DeviceSpec) -> GemmPrediction: ...
