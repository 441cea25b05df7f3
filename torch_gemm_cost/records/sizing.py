"""The sizes the records of one extraction count: the compute dtype, the storage size of
activations, and the bytes a plain GEMM moves."""

from __future__ import annotations

import torch

from ..hardware.dtypes import ComputeDtype
from .handlers import unique_numel


class _Ctx:
    """What every record of one extraction shares."""

    def __init__(self, cd: ComputeDtype, native: torch.dtype | None) -> None:
        self.cd = cd
        self.out_name = _out_dtype_name(cd)
        self.act_dtype = cd.torch_dtype if cd.in_bytes >= 2 else torch.bfloat16
        self.act_name = str(self.act_dtype).removeprefix("torch.")
        self.native = native

    def elem_bytes(self, dtype: torch.dtype) -> int:
        if dtype.is_floating_point and (self.native is None or dtype == self.native):
            return self.act_dtype.itemsize
        return dtype.itemsize

    def tensor_bytes(self, t: torch.Tensor) -> int:
        return unique_numel(t) * self.elem_bytes(t.dtype)


def _out_dtype_name(cd: ComputeDtype) -> str:
    """A ``DTYPES`` key whose element size is ``cd``'s output size (int8 -> 4-byte accumulators,
    fp8 -> 16-bit output)."""
    if cd.out_bytes == cd.in_bytes:
        return cd.name
    return {4: "float32", 2: "bfloat16", 8: "float64"}[cd.out_bytes]


def _gemm_bytes(batch: int, m: int, n: int, k: int, cd: ComputeDtype) -> int:
    return batch * (m * k + k * n) * cd.in_bytes + batch * m * n * cd.out_bytes
