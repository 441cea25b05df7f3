"""The sizes the records of one extraction count: the compute dtype, the storage size of
activations, and the bytes a plain GEMM moves."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from ..hardware.catalog import DeviceSpec, is_cpu
from ..hardware.dtypes import DTYPES, ComputeDtype
from .handlers import unique_numel
from .types import GemmSite


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


# GEMM-like ops cuDNN runs (convolutions, transposed ones); every other GEMM is cuBLAS's
CUDNN_OPS = frozenset({"convolution", "conv_transpose"})


def math_dtype(op: str, cd: ComputeDtype) -> ComputeDtype:
    """The precision a GEMM of ``op`` runs in when asked for ``cd``: an fp32 one in TF32 where
    PyTorch's flags, read now in this process, allow it: ``torch.backends.cudnn.allow_tf32``
    for the convolutions cuDNN runs (``CUDNN_OPS``; True by default) and
    ``torch.backends.cuda.matmul.allow_tf32`` for cuBLAS's GEMMs (False by default:
    ``torch.set_float32_matmul_precision("high")`` sets it). Storage stays fp32: the bytes
    are the same, the tensor cores' tf32 peak applies.

    >>> math_dtype("convolution", DTYPES["float32"]).name == (
    ...     "tf32" if torch.backends.cudnn.allow_tf32 else "float32")
    True
    """
    if cd.name != "float32":
        return cd
    allowed = (torch.backends.cudnn.allow_tf32 if op in CUDNN_OPS
               else torch.backends.cuda.matmul.allow_tf32)
    return DTYPES["tf32"] if allowed else cd


def _out_dtype_name(cd: ComputeDtype) -> str:
    """A ``DTYPES`` key whose element size is ``cd``'s output size (int8 -> 4-byte accumulators,
    fp8 -> 16-bit output)."""
    if cd.out_bytes == cd.in_bytes:
        return cd.name
    return {4: "float32", 2: "bfloat16", 8: "float64"}[cd.out_bytes]


def _gemm_bytes(batch: int, m: int, n: int, k: int, cd: ComputeDtype) -> int:
    return batch * (m * k + k * n) * cd.in_bytes + batch * m * n * cd.out_bytes


def on_device(sites: Sequence[GemmSite], cd: ComputeDtype, spec: DeviceSpec
              ) -> tuple[GemmSite, ...]:
    """``sites`` as ``spec`` runs them. fp32 math that PyTorch's flags let run in TF32
    (``math_dtype``) stays fp32 on a device without TF32 tensor cores: a CPU, an NVIDIA GPU
    before Ampere (no tf32 peak), an AMD GPU (ROCm leaves TF32 off unless an environment
    variable turns it on). A dtype asked for (``cd`` tf32) is left as asked.

    >>> from torch_gemm_cost.hardware.catalog import get_device
    >>> s = GemmSite("conv", "Conv2d", "convolution", "n", "forward", 1, 64, 64, 64, "tf32",
    ...              "float32", False, False, 16, 16, 16, False, 2 * 64**3, 3 * 64 * 64 * 4)
    >>> [on_device([s], DTYPES["float32"], get_device(d))[0].dtype
    ...  for d in ("a100_sxm4_80gb", "tesla_t4", "mi300x")]
    ['tf32', 'float32', 'float32']
    """
    if cd.name != "float32" or (spec.vendor == "NVIDIA" and not is_cpu(spec)
                                and spec.peak("tf32") is not None):
        return tuple(sites)
    return tuple(replace(s, dtype="float32") if s.dtype == "tf32" else s for s in sites)
