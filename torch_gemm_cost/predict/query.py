"""Ask the predictor about GEMMs directly: ``predict_gemm_ms`` for times, ``explain`` for why.

Both take any device ``resolve_target`` reads (a catalog id or driver name, a ``DeviceSpec``,
the path of a spec file or calibration profile), dims as scalars or arrays that broadcast
together, and any ``Predictor``; by default the one a profile brings, else the package's
``default_predictor()``. Inputs are checked here, at the boundary: each error names the bad
value and the nearest good one.

    >>> predict_gemm_ms("h100_sxm5_80gb", m=4096, n=4096, k=4096, dtype="bf16")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, overload

import torch

from ..hardware.catalog import DeviceLike, DeviceSpec, check_dtype_on_device
from ..hardware.dtypes import FP8_KERNELS, fp8_kernel_index, resolve_dtype
from ..hardware.target import resolve_target
from ..records.types import GemmBatch
from .base import Prediction, Predictor
from .gemm.hybrid import HybridPredictor
from .intervals import check_level, uncertainty_of
from .profile import profile_predictor

__all__ = ["GemmInterval", "check_dtype_on_device", "explain", "load_weights", "predict_gemm_ms"]

DimLike = int | float | torch.Tensor | Any  # also lists and NumPy arrays

# details keys of a GEMM Prediction, in the order explain() lists them
_EXPLAIN_KEYS: tuple[str, ...] = (
    "tile_m", "tile_n", "split_k", "waves", "last_wave_fill", "h1", "h2",
    "mem_bw_bytes_per_s", "intensity_flops_per_byte", "util", "compute_ms", "memory_ms",
)
_INT_KEYS = frozenset({"tile_m", "tile_n", "split_k", "waves"})
_MAX_DIM = 2**53  # float64 holds every integer up to here exactly


def load_weights(path: str | os.PathLike[str]) -> Predictor:
    """The hybrid predictor with the weights stored at ``path`` (JSON, never unpickled)."""
    return HybridPredictor.load(Path(path))


def _dim(name: str, value: DimLike, minimum: int) -> torch.Tensor:
    """``value`` as a float64 tensor of integers ≥ ``minimum``, or a ValueError naming it."""
    try:
        t = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(
            f"{name} must be an integer or an array of integers, got {value!r}"
        ) from None
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must be an integer or an array of integers, got {value!r}")
    t64 = t.to(torch.float64)
    bad = ~torch.isfinite(t64) | (t64 != torch.round(t64)) | (t64 < minimum) | (t64 > _MAX_DIM)
    if bool(bad.any()):
        flat = t64.reshape(-1)
        i = int(torch.nonzero(bad.reshape(-1))[0])
        v = flat[i].item()
        where = name if t.ndim == 0 else f"{name}[{i}]"
        finite = abs(v) < float("inf")  # False for nan too
        got = int(v) if finite and v == round(v) else v
        nearest = min(max(minimum, round(v)), _MAX_DIM) if finite else minimum
        raise ValueError(
            f"{where} = {got!r}: dims must be integers in [{minimum}, 2**53]; nearest valid "
            f"value: {nearest}"
        )
    return t64


class GemmInterval(NamedTuple):
    """A predicted time with the bounds the measured time falls between with probability
    ``level`` (floats for scalar dims, else (N,) float64 tensors)."""

    time_ms: float | torch.Tensor
    lo_ms: float | torch.Tensor
    hi_ms: float | torch.Tensor
    level: float


def _run(
    device: DeviceLike, m: DimLike, n: DimLike, k: DimLike, batch: DimLike,
    dtype: str | torch.dtype, op: str, bias: bool, predictor: Predictor | None,
    fp8_kernel: str = "torch_scaled_mm",
) -> tuple[GemmBatch, Prediction | None, torch.Tensor, bool,
           tuple[DeviceSpec, Predictor]]:
    """Validate, predict the non-empty GEMMs; returns (gemms, prediction, nonempty mask, scalar,
    (device, predictor))."""
    target = resolve_target(device)
    spec = target.spec
    cd = resolve_dtype(dtype)
    check_dtype_on_device(spec, cd)
    dims = [_dim("batch", batch, 0), _dim("m", m, 1), _dim("n", n, 1), _dim("k", k, 1)]
    scalar = all(d.ndim == 0 for d in dims)
    try:
        b_, m_, n_, k_ = (d.reshape(-1) for d in torch.broadcast_tensors(*dims))
    except RuntimeError:
        shapes = ", ".join(f"{x}{tuple(d.shape)}" for x, d in zip(("batch", "m", "n", "k"), dims))
        raise ValueError(f"dims do not broadcast together: {shapes}") from None
    gemms = GemmBatch.from_dims(m=m_, n=n_, k=k_, batch=b_, dtype=cd, op=op, bias=bool(bias))
    kernel = fp8_kernel_index(fp8_kernel)
    if cd.peak_key == "fp8":
        # vLLM's fp8 Linear casts its 16-bit input to fp8 in a kernel of its own first;
        # torch._scaled_mm takes inputs in fp8 already
        cast = b_ * m_ * k_ if FP8_KERNELS[kernel] == "vllm_cutlass" else torch.zeros_like(m_)
        gemms = replace(gemms, fp8_kernel=torch.full_like(gemms.dtype_index, kernel),
                        quantized_elements=cast)
    live = b_ > 0  # (N,) zero-size batches cost nothing and are not predicted
    chosen = predictor or profile_predictor(target)
    if chosen is None:
        from . import default_predictor

        chosen = default_predictor()
    if not bool(live.any()):
        return gemms, None, live, scalar, (spec, chosen)
    sub = gemms if bool(live.all()) else gemms.select(live)
    return gemms, chosen.predict(sub, spec), live, scalar, (spec, chosen)


@overload
def predict_gemm_ms(device: DeviceLike, *, m: int, n: int, k: int, batch: int = 1,
                    dtype: str | torch.dtype = "float32", op: str = "matmul", bias: bool = False,
                    predictor: Predictor | None = None, interval: None = None,
                    fp8_kernel: str = "torch_scaled_mm") -> float: ...


@overload
def predict_gemm_ms(device: DeviceLike, *, m: DimLike, n: DimLike, k: DimLike,
                    batch: DimLike = 1, dtype: str | torch.dtype = "float32",
                    op: str = "matmul", bias: bool = False, predictor: Predictor | None = None,
                    interval: float, fp8_kernel: str = "torch_scaled_mm") -> GemmInterval: ...


@overload
def predict_gemm_ms(device: DeviceLike, *, m: DimLike, n: DimLike, k: DimLike,
                    batch: DimLike = 1, dtype: str | torch.dtype = "float32",
                    op: str = "matmul", bias: bool = False, predictor: Predictor | None = None,
                    interval: None = None,
                    fp8_kernel: str = "torch_scaled_mm") -> float | torch.Tensor: ...


def predict_gemm_ms(
    device: DeviceLike,
    *,
    m: DimLike,
    n: DimLike,
    k: DimLike,
    batch: DimLike = 1,
    dtype: str | torch.dtype = "float32",
    op: str = "matmul",
    bias: bool = False,
    predictor: Predictor | None = None,
    interval: float | None = None,
    fp8_kernel: str = "torch_scaled_mm",
) -> float | torch.Tensor | GemmInterval:
    """Predicted time in ms of ``C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]`` on ``device``.

    Dims are scalars or arrays (lists, tensors, NumPy) that broadcast together. Scalar dims give
    a float; otherwise a 1-D float64 tensor over the flattened broadcast shape. ``op`` is
    ``matmul``/``mm``/``bmm`` (A @ B), ``linear``/``addmm`` (x @ Wᵀ) or a DATA.md layout; it
    sets which dims decide each operand's alignment and whether B is read transposed (libraries
    run other kernels for a Linear than for a matmul). A zero-size batch costs 0 ms.

    ``interval`` (a coverage such as 0.8) returns a ``GemmInterval`` (time_ms, lo_ms, hi_ms,
    level) instead: the measured time falls between lo and hi with that probability, as
    calibrated on GPUs held out of the fit (``predict/intervals.py``).

    ``fp8_kernel`` (fp8 dtypes only) names the kernel that runs it: ``"torch_scaled_mm"`` (the
    vendor library behind ``torch._scaled_mm``, inputs already in fp8) or ``"vllm_cutlass"``
    (vLLM's fp8 Linear: its CUTLASS scaled-mm, after a kernel that casts the 16-bit input).
    """
    level = None if interval is None else check_level(interval)
    gemms, pred, live, scalar, (spec, chosen) = _run(device, m, n, k, batch, dtype, op, bias,
                                                     predictor, fp8_kernel)
    time_ms = torch.zeros(len(gemms), dtype=torch.float64)
    if pred is not None:
        time_ms[live] = pred.time_ms.to(torch.float64)
    if level is None:
        return float(time_ms[0]) if scalar else time_ms
    lo, hi = time_ms.clone(), time_ms.clone()
    if pred is not None:
        sub = gemms if bool(live.all()) else gemms.select(live)
        unc = uncertainty_of(sub, spec, chosen)
        if unc is None:
            raise ValueError(
                f"no interval calibration covers predictor {getattr(chosen, 'name', chosen)!r} "
                f"v{getattr(chosen, 'version', '?')}; the shipped hybrid and calibration "
                "profiles have one")
        lo[live], hi[live] = unc.gemm_bounds(time_ms[live], level)
    if scalar:
        return GemmInterval(float(time_ms[0]), float(lo[0]), float(hi[0]), level)
    return GemmInterval(time_ms, lo, hi, level)


def explain(
    device: DeviceLike,
    *,
    m: DimLike,
    n: DimLike,
    k: DimLike,
    batch: DimLike = 1,
    dtype: str | torch.dtype = "float32",
    op: str = "matmul",
    bias: bool = False,
    predictor: Predictor | None = None,
    fp8_kernel: str = "torch_scaled_mm",
) -> list[dict[str, Any]]:
    """Why each GEMM takes its predicted time: one dict per GEMM, in input order.

    Always: ``batch, m, n, k, dtype, time_ms``; ``bound`` ("compute" or "memory") for non-empty
    GEMMs. Then whatever intermediates the predictor reports, among ``tile_m, tile_n, split_k,
    waves, last_wave_fill, h1, h2, mem_bw_bytes_per_s, intensity_flops_per_byte, util,
    compute_ms, memory_ms`` (the roofline reports only the last two), in that order, then any
    other details it reports; keys a predictor does not report are left out. An fp8 GEMM's row
    names its ``fp8_kernel`` (see ``predict_gemm_ms``); under vLLM's, ``cast_ms`` is the input
    cast's kernel with its parts (``cast_rows_per_sm``, ``cast_passes``, ``cast_latency_ms``,
    ``cast_bytes_ms``). NB: the tile is the envelope's pick, the candidate that minimizes the
    predicted time, not necessarily the kernel cuBLAS would choose.
    """
    gemms, pred, live, _, _ = _run(device, m, n, k, batch, dtype, op, bias, predictor,
                                   fp8_kernel)
    dtype_name = resolve_dtype(dtype).name
    out: list[dict[str, Any]] = []
    details = {} if pred is None else {
        key: pred.details[key].tolist()
        for key in (*_EXPLAIN_KEYS, *sorted(set(pred.details) - set(_EXPLAIN_KEYS)))
        if key in pred.details
    }
    times = [] if pred is None else pred.time_ms.tolist()
    bound = () if pred is None else pred.bound
    j = 0
    for i, alive in enumerate(live.tolist()):
        row: dict[str, Any] = {
            "batch": int(gemms.batch[i]), "m": int(gemms.m[i]), "n": int(gemms.n[i]),
            "k": int(gemms.k[i]), "dtype": dtype_name,
        }
        if resolve_dtype(dtype).peak_key == "fp8":
            row["fp8_kernel"] = fp8_kernel
        if alive:
            for key, values in details.items():
                v = float(values[j])  # stream-K's waves are tiles / slots, a fraction
                row[key] = int(v) if key in _INT_KEYS and v.is_integer() else v
            row["bound"] = bound[j]
            row["time_ms"] = float(times[j])
            j += 1
        else:
            row["time_ms"] = 0.0
        out.append(row)
    return out
