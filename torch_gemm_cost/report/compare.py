"""Reports of one model on several devices or dtypes, side by side: the question they share,
totals, speedups, whether the intervals tell the devices apart, the non-GEMM time by op class,
and the costliest layers."""

from __future__ import annotations

from collections.abc import Sequence

from ..predict.intervals import DEFAULT_LEVEL
from ..records.op_classes import TIME_CLASSES
from .breakdown import by_op_class
from .inputs import inputs_line
from .record import ReportRecord
from .text import span_text
from .tree import module_rows

__all__ = ["Comparison", "format_comparison", "intervals_overlap"]


class Comparison(list):  # type: ignore[type-arg]
    """Reports of one model on several devices or dtypes; prints them side by side."""

    def table(self, top: int = 5, depth: int | None = None) -> str:
        return format_comparison(self, top=top, depth=depth)

    def overlaps(self, i: int, j: int, level: float = DEFAULT_LEVEL) -> bool | None:
        """Whether reports ``i`` and ``j`` have overlapping intervals at ``level``, so neither
        is certainly the faster; None where either has no interval."""
        return intervals_overlap(self[i], self[j], level)

    def __str__(self) -> str:
        return self.table()


def format_comparison(reports: Sequence[ReportRecord], top: int = 5,
                      depth: int | None = None) -> str:
    """The question, the totals, the non-GEMM time by op class and the costliest layers of
    several reports (devices, dtypes) side by side.

    Speedups are relative to the first report. Layers are ranked by their time in the first report.
    """
    from tabulate import tabulate

    if not reports:
        raise ValueError("format_comparison needs at least one report")
    base = reports[0].total_ms or 1.0
    body = [
        [r.device.id, r.dtype, r.total_ms, r.gemm_ms, r.other_ms, r.host_ms, r.achieved_tflops,
         base / r.total_ms if r.total_ms else float("nan"), len(r.unmodelled)]
        for r in reports
    ]
    headers = ["device", "dtype", f"total ms ({reports[0].timing})", "GEMM ms", "other ms",
               "host ms", "TFLOP/s", "speedup", "unmodelled"]
    fmt: tuple[str, ...] = ("", "", ".3f", ".3f", ".3f", ".3f", ".1f", ".2f", "")
    if any(r.uncertainty is not None for r in reports):
        # an overlap means the speedup may go either way: the intervals do not exclude it
        for line, r in zip(body, reports):
            span = r.total_interval_ms
            line.append(span_text(*span) if span else "-")
            overlap = intervals_overlap(reports[0], r)
            line.append("-" if r is reports[0] or overlap is None else
                        "intervals overlap" if overlap else "apart")
        headers += [f"{DEFAULT_LEVEL:.0%} interval ms", "vs first"]
        fmt = (*fmt, "", "")
    totals = tabulate(body, headers=headers, floatfmt=fmt)
    columns = [f"{r.device.id} {_SHORT.get(r.dtype, r.dtype)}" for r in reports]
    classes = [by_op_class(r) for r in reports]
    shown = [k for k in TIME_CLASSES if any(k in c for c in classes)]
    by_class = tabulate([[TIME_CLASSES[k]] + [c.get(k, 0.0) for c in classes] for k in shown],
                        headers=["non-GEMM by class (ms)", *columns], floatfmt=".4f")
    questions = [r.question() for r in reports]
    same_predictor = len({(q.predictor, q.predictor_version) for q in questions}) == 1
    asked = inputs_line(questions[0], omit=("dtype", "device")
                        + (() if same_predictor else ("predictor",)))
    per = [{row["label"]: row for row in module_rows(r, depth)} for r in reports]
    ranked = sorted(per[0].values(), key=lambda row: -row["time_ms"])[:top]
    layer_body = []
    for row in ranked:
        key = row["label"]  # unique in its table, the same on every device and dtype
        layer_body.append([key] + [p[key]["time_ms"] if key in p else None for p in per])
    layers = tabulate(layer_body, headers=["top layers (ms)", *columns], floatfmt=".4f",
                      missingval="-")
    return f"{asked}\n{totals}\n\n{by_class}\n\n{layers}" if shown else \
        f"{asked}\n{totals}\n\n{layers}"


def intervals_overlap(a: ReportRecord, b: ReportRecord,
                      level: float = DEFAULT_LEVEL) -> bool | None:
    """Whether two reports' whole-model intervals at ``level`` overlap; None where either has
    none."""
    if a.uncertainty is None or b.uncertainty is None:
        return None
    lo_a, hi_a = a.interval(level)
    lo_b, hi_b = b.interval(level)
    return lo_a <= hi_b and lo_b <= hi_a


_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8"}
