"""The device catalog as a table (``torch-gemm-cost devices``)."""

from __future__ import annotations

from collections.abc import Sequence

from ..hardware.catalog import DeviceSpec

__all__ = ["format_device_table"]


def format_device_table(devices: Sequence[DeviceSpec]) -> str:
    """The catalog as a table: SMs, memory (GiB, a vendor's "GB"), DRAM bandwidth, L2 and
    dense peaks in TFLOP/s."""
    from tabulate import tabulate

    keys = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")

    def tf(value: float | None) -> str:
        return "-" if value is None else f"{value / 1e12:g}"

    body = [
        [d.id, d.name, d.sm_count, "-" if d.mem_bytes is None else f"{d.mem_bytes / 2**30:g}",
         d.dram_bw_bytes_per_s / 1e9, d.l2_bytes / 2**20]
        + [tf(d.peak(k)) for k in keys]
        + [f"{d.ridge_flops_per_byte:.0f}"]
        for d in devices
    ]
    headers = (["id", "name", "SMs", "mem GiB", "DRAM GB/s", "L2 MiB"] + [f"{k} TF" for k in keys]
               + ["ridge FLOP/B"])
    return tabulate(body, headers=headers, floatfmt="g")
