"""CostReport: the per-layer cost table, totals and exports. The only module that formats text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .devices import DeviceSpec
from .gemms import GemmSite, OtherOp

__all__ = ["GemmEstimate", "OpEstimate", "CostReport", "format_device_table"]


@dataclass(frozen=True)
class GemmEstimate:
    """One GEMM and its predicted time."""

    site: GemmSite
    time_ms: float
    bound: str  # "compute" or "memory"


@dataclass(frozen=True)
class OpEstimate:
    """One non-GEMM op and its predicted time (None while it is unmodelled)."""

    op: OtherOp
    time_ms: float | None


@dataclass(frozen=True)
class CostReport:
    """Every GEMM (and non-GEMM op) of one model run on one device, with predicted times."""

    model: str  # class name of the estimated model
    device: DeviceSpec
    dtype: str
    mode: str  # "inference" or "train"
    predictor: str
    predictor_version: str
    gemms: tuple[GemmEstimate, ...]
    others: tuple[OpEstimate, ...] = ()

    @property
    def gemm_ms(self) -> float:
        return sum(g.time_ms for g in self.gemms)

    @property
    def other_ms(self) -> float:
        return sum(o.time_ms for o in self.others if o.time_ms is not None)

    @property
    def total_ms(self) -> float:
        return self.gemm_ms + self.other_ms

    @property
    def total_flops(self) -> int:
        return sum(g.site.flops for g in self.gemms)

    @property
    def unmodelled(self) -> tuple[OpEstimate, ...]:
        return tuple(o for o in self.others if o.time_ms is None)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per GEMM, in execution order."""
        total = self.total_ms or 1.0
        return [
            {
                "module": g.site.module,
                "module_type": g.site.module_type,
                "op": g.site.op,
                "phase": g.site.phase,
                "batch": g.site.batch,
                "m": g.site.m,
                "n": g.site.n,
                "k": g.site.k,
                "dtype": g.site.dtype,
                "flops": g.site.flops,
                "dram_bytes": g.site.dram_bytes,
                "a_align_bytes": g.site.a_align_bytes,
                "b_align_bytes": g.site.b_align_bytes,
                "time_ms": g.time_ms,
                "pct_of_total": 100.0 * g.time_ms / total,
                "bound": g.bound,
            }
            for g in self.gemms
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "device": self.device.id,
            "dtype": self.dtype,
            "mode": self.mode,
            "predictor": self.predictor,
            "predictor_version": self.predictor_version,
            "total_ms": self.total_ms,
            "gemm_ms": self.gemm_ms,
            "other_ms": self.other_ms,
            "total_flops": self.total_flops,
            "unmodelled_ops": len(self.unmodelled),
            "rows": self.rows(),
        }

    def table(self) -> str:
        from tabulate import tabulate

        body = [
            [
                r["module"] or "(top)",
                r["op"],
                f"{r['batch']}×{r['m']}×{r['n']}×{r['k']}",
                r["dtype"],
                r["flops"] / 1e9,
                r["time_ms"],
                r["pct_of_total"],
                r["bound"],
            ]
            for r in self.rows()
        ]
        headers = ["module", "op", "B×M×N×K", "dtype", "GFLOP", "time ms", "% total", "bound"]
        return tabulate(body, headers=headers, floatfmt=(".2f", "", "", "", ".2f", ".4f", ".1f"))

    def footer(self) -> str:
        tflops = self.total_flops / (self.total_ms * 1e-3) / 1e12 if self.total_ms else 0.0
        return (
            f"{self.model} on {self.device.name} ({self.device.id}), {self.dtype}, {self.mode}: "
            f"total {self.total_ms:.3f} ms (GEMM {self.gemm_ms:.3f} ms in {len(self.gemms)} GEMMs), "
            f"{tflops:.1f} TFLOP/s achieved; predictor {self.predictor} v{self.predictor_version}; "
            f"{len(self.unmodelled)} unmodelled ops"
        )

    def __str__(self) -> str:
        return f"{self.table()}\n{self.footer()}"


def format_device_table(devices: Sequence[DeviceSpec]) -> str:
    """The catalog as a table: SMs, DRAM bandwidth, L2 and dense peaks in TFLOP/s."""
    from tabulate import tabulate

    keys = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")

    def tf(value: float | None) -> str:
        return "-" if value is None else f"{value / 1e12:g}"

    body = [
        [d.id, d.name, d.sm_count, d.dram_bw_bytes_per_s / 1e9, d.l2_bytes / 2**20]
        + [tf(d.peak(k)) for k in keys]
        for d in devices
    ]
    headers = ["id", "name", "SMs", "DRAM GB/s", "L2 MiB"] + [f"{k} TF" for k in keys]
    return tabulate(body, headers=headers, floatfmt="g")
