"""Compute dtypes: one canonical name per GEMM precision, and what each costs in bytes.

The canonical names are the ``dtype`` column of the measured data (``../shared/data``), so a
record, a training row and a user's ``torch.dtype`` all meet on the same key.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..suggest import nearest, unknown

__all__ = ["DTYPES", "FP8_KERNELS", "FP8_MULTIPLE", "ComputeDtype", "dtype_of_tensor_dtype",
           "fp8_kernel_index", "resolve_dtype"]


@dataclass(frozen=True)
class ComputeDtype:
    """One GEMM precision: its operand sizes and which peak of a device it runs at."""

    name: str  # canonical, as in the data's ``dtype`` column
    in_bytes: int  # bytes per element of A and B
    out_bytes: int  # bytes per element of C
    peak_key: str  # which DeviceSpec peak applies: fp32, tf32, fp16, bf16, fp8, int8, fp64
    tensor_core: bool  # runs on matrix units where the device has them
    torch_dtype: torch.dtype  # the storage dtype of A and B


DTYPES: dict[str, ComputeDtype] = {
    d.name: d
    for d in (
        ComputeDtype("float64", 8, 8, "fp64", False, torch.float64),
        ComputeDtype("float32", 4, 4, "fp32", False, torch.float32),
        ComputeDtype("tf32", 4, 4, "tf32", True, torch.float32),
        ComputeDtype("float16", 2, 2, "fp16", True, torch.float16),
        ComputeDtype("bfloat16", 2, 2, "bf16", True, torch.bfloat16),
        ComputeDtype("bfloat16_f32out", 2, 4, "bf16", True, torch.bfloat16),
        # NB: P100 "pseudo fp16": fp16 storage, fp16 math at 2x fp32 rate, no tensor cores.
        ComputeDtype("float16_fp32math", 2, 2, "fp16", False, torch.float16),
        ComputeDtype("int8", 1, 4, "int8", True, torch.int8),
        ComputeDtype("float8_e4m3fn", 1, 2, "fp8", True, torch.float8_e4m3fn),
        ComputeDtype("float8_e4m3fn_e5m2", 1, 2, "fp8", True, torch.float8_e4m3fn),
        ComputeDtype("float8_e5m2_e4m3fn", 1, 2, "fp8", True, torch.float8_e5m2),
        ComputeDtype("float8_e4m3fnuz", 1, 2, "fp8", True, torch.float8_e4m3fnuz),
        ComputeDtype("float8_e5m2", 1, 2, "fp8", True, torch.float8_e5m2),
    )
}

# fp8 GEMM kernels (cuBLASLt and hipBLASLt, behind torch._scaled_mm) take no dim off a multiple
# of 16
FP8_MULTIPLE = 16

# the fp8 GEMM kernel a row runs, a named choice because the two run at levels of their own:
# - "torch_scaled_mm": the vendor library behind ``torch._scaled_mm`` (cuBLASLt, hipBLASLt), what
#   a PyTorch fp8 model (torchao's Float8Linear) calls; its inputs arrive in fp8 already;
# - "vllm_cutlass": vLLM's CUTLASS scaled-mm (``cutlass_scaled_mm``), what vLLM's fp8 Linear
#   runs on NVIDIA GPUs, after casting its 16-bit input to fp8 in a kernel of its own.
FP8_KERNELS: tuple[str, ...] = ("torch_scaled_mm", "vllm_cutlass")


def fp8_kernel_index(name: str) -> int:
    """``name``'s index in FP8_KERNELS, or a ValueError naming the nearest."""
    if name not in FP8_KERNELS:
        raise ValueError(unknown("fp8 kernel", name, FP8_KERNELS))
    return FP8_KERNELS.index(name)

_ALIASES: dict[str, str] = {
    "fp64": "float64", "f64": "float64", "double": "float64",
    "fp32": "float32", "f32": "float32", "float": "float32",
    "fp16": "float16", "f16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn", "e4m3": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2",
    "i8": "int8",
}

_FROM_TORCH: dict[torch.dtype, str] = {
    torch.float64: "float64",
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int8: "int8",
    torch.float8_e4m3fn: "float8_e4m3fn",
    torch.float8_e5m2: "float8_e5m2",
    torch.float8_e4m3fnuz: "float8_e4m3fnuz",
}


def dtype_of_tensor_dtype(dtype: torch.dtype) -> ComputeDtype:
    """The compute dtype a tensor of ``dtype`` runs a GEMM in (float32 -> IEEE fp32)."""
    try:
        return DTYPES[_FROM_TORCH[dtype]]
    except KeyError:
        raise ValueError(
            f"no GEMM cost model for tensor dtype {dtype}; supported: "
            + ", ".join(str(d) for d in _FROM_TORCH)
        ) from None


def resolve_dtype(dtype: str | torch.dtype | ComputeDtype) -> ComputeDtype:
    """Accept a ``torch.dtype``, a canonical name or a common spelling (``"bf16"``, ``"fp8"``).

    >>> resolve_dtype("bf16").name
    'bfloat16'
    """
    if isinstance(dtype, ComputeDtype):
        return dtype
    if isinstance(dtype, torch.dtype):
        return dtype_of_tensor_dtype(dtype)
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a torch.dtype or a string, got {type(dtype).__name__}")
    key = dtype.strip().lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key in DTYPES:
        return DTYPES[key]
    close = nearest(key, sorted(set(DTYPES) | set(_ALIASES)))
    raise ValueError(unknown("dtype", dtype, sorted(DTYPES), close=close))
