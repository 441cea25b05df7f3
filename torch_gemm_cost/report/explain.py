"""Why one GEMM of a report costs what it does: its record, predicted time and the predictor's
intermediates, as it gave them when it priced the run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..records.types import GemmSite
from ..suggest import unknown
from .record import ReportRecord

__all__ = ["GemmExplanation", "explain"]


@dataclass(frozen=True)
class GemmExplanation:
    """Why one GEMM costs what it does: its record, predicted time and the predictor's stages."""

    site: GemmSite
    time_ms: float
    bound: str
    device: str
    predictor: str
    details: Mapping[str, float]

    def __str__(self) -> str:
        s = self.site
        ai = s.flops / s.dram_bytes if s.dram_bytes else float("nan")
        loads = f"{s.a_align_bytes}/{s.b_align_bytes}/{s.c_align_bytes} B"
        lines = [
            (f"{s.module or '(top)'} [{s.module_type}] {s.op} {s.phase}: "
             f"B×M×N×K = {s.batch}×{s.m}×{s.n}×{s.k} {s.dtype} on {self.device}"),
            (f"  {s.flops / 1e9:.3f} GFLOP, {s.dram_bytes / 1e6:.3f} MB compulsory, "
             f"{ai:.1f} FLOP/byte; loads of {loads} for A/B/C"),
            f"  predicted {self.time_ms:.4f} ms, {self.bound}-bound ({self.predictor})",
        ]
        if s.dtype.startswith("float8"):
            cast = self.details.get("cast_ms", 0.0)
            lines.append(f"  fp8 kernel: {s.fp8_kernel}" + (
                f", after its input cast of {cast:.4f} ms" if cast else ", no input cast"))
        lines += [f"  {name} = {value:.4g}" for name, value in self.details.items()]
        return "\n".join(lines)


def explain(report: ReportRecord, row: int | str) -> GemmExplanation:
    """Explain one GEMM: ``row`` is its index in ``rows()`` or its module path (first match).
    The predictor's intermediates are those it gave when it priced the run."""
    if isinstance(row, str):
        hits = [i for i, g in enumerate(report.gemms) if g.site.module == row]
        if not hits:
            mods = dict.fromkeys(g.site.module for g in report.gemms)
            raise ValueError(unknown("module of a GEMM", row, mods))
        row = hits[0]
    if not 0 <= row < len(report.gemms):
        raise ValueError(f"row {row} out of range; the report has rows 0..{len(report.gemms) - 1}")
    g = report.gemms[row]
    return GemmExplanation(g.site, g.time_ms, g.bound, report.device.id, report.predictor,
                           dict(g.details))
