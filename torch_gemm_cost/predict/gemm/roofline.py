"""The pure roofline: the larger of FLOPs / dtype peak and compulsory bytes / DRAM bandwidth.

It is the baseline every other predictor is measured against, and a physical floor: no real
GEMM runs faster than it.
"""

from __future__ import annotations

from typing import Any

import torch

from ...hardware.catalog import DeviceSpec
from ...records.types import DTYPE_NAMES, GemmBatch
from ..base import Prediction, bound_of

__all__ = ["RooflinePredictor", "impossible_rows", "peak_flops_per_s"]


def peak_flops_per_s(gemms: GemmBatch, device: DeviceSpec) -> torch.Tensor:
    """Per-GEMM dtype peak of ``device``, shape (N,)."""
    table = torch.tensor(
        [_peak_or_nan(device, name) for name in DTYPE_NAMES], dtype=torch.float64
    )
    peaks = table[gemms.dtype_index]
    if torch.isnan(peaks).any():
        bad = sorted({gemms.dtype_names()[i] for i in torch.nonzero(torch.isnan(peaks)).flatten()})
        device.peak_flops_per_s(bad[0])  # raises a ValueError naming the dtype and device
    return peaks


def _peak_or_nan(device: DeviceSpec, dtype: str) -> float:
    try:
        return device.peak_flops_per_s(dtype)
    except ValueError:
        return float("nan")


class RooflinePredictor:
    """max(FLOPs / peak, bytes / DRAM bandwidth), with no efficiency losses."""

    name = "roofline"
    version = "1"

    def predict(self, gemms: GemmBatch, device: DeviceSpec) -> Prediction:
        compute_s = gemms.flops / peak_flops_per_s(gemms, device)  # (N,)
        memory_s = gemms.compulsory_bytes / device.dram_bw_bytes_per_s  # (N,)
        time_s = torch.maximum(compute_s, memory_s)
        return Prediction(
            time_ms=time_s * 1e3,
            bound=bound_of(compute_s, memory_s),
            details={"compute_ms": compute_s * 1e3, "memory_ms": memory_s * 1e3},
        )


def impossible_rows(measured: Any) -> torch.Tensor:
    """Measured rows (a ``measured.MeasuredGemms``) faster than physics allows: below FLOPs /
    dense peak or compulsory bytes / DRAM bandwidth of their device. These are data errors;
    training leaves them out. (N,) bool.

    Rows on devices or dtypes the catalog lacks are flagged too, since nothing can check them.
    """
    g = measured.gemms
    floor_s = torch.full((len(measured),), float("nan"), dtype=torch.float64)
    gpus = sorted(set(measured.gpu))
    gpu_index = {name: i for i, name in enumerate(gpus)}
    rows_gpu = torch.tensor([gpu_index[x] for x in measured.gpu], dtype=torch.long)
    for name, i in gpu_index.items():
        try:
            device = measured.device(name)
        except ValueError:
            continue
        sel = rows_gpu == i
        peaks = [_peak_or_nan(device, dt) for dt in DTYPE_NAMES]
        peak = torch.tensor(peaks, dtype=torch.float64)[g.dtype_index[sel]]
        compute_s = g.flops[sel] / peak
        memory_s = g.compulsory_bytes[sel] / device.dram_bw_bytes_per_s
        floor_s[sel] = torch.maximum(compute_s, memory_s)
    return ~(measured.latency_ms * 1e-3 >= floor_s)  # NaN floor -> flagged
