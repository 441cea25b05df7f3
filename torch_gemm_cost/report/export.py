"""A report as plain data: one dict per GEMM and per op, the whole report as a dict, JSON, CSV
or a pandas DataFrame. Each states the question (``inputs``): the dict and JSON under
``inputs``, the CSV in its leading columns."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..predict.intervals import DEFAULT_LEVEL
from .breakdown import by_op_class, by_phase, op_table_rows, phase_label
from .record import ReportRecord, roofline_bound

__all__ = ["INPUT_COLUMNS", "op_rows", "rows", "to_csv", "to_dataframe", "to_dict", "to_json"]


# the CSV's leading columns: the question, one value per column (see ``ReportInputs``)
INPUT_COLUMNS: dict[str, str] = {
    "model": "model", "task": "task", "batch_size": "batch", "seq_len": "seq",
    "image_size": "image_size", "mode": "mode", "attention": "attention", "device": "device",
    "device_origin": "device_origin", "predictor": "predictor",
    "predictor_version": "predictor_version",
}


def rows(report: ReportRecord) -> list[dict[str, Any]]:
    """One dict per GEMM, in execution order. ``phase`` is fwd, dgrad or wgrad; ``bound`` is
    the side of the roofline's ridge its intensity falls on (``fused`` inside an attention
    kernel), as the tables and the plot say."""
    total = report.gpu_ms or 1.0
    ridge = report.ridge_flops_per_byte
    return [
        {
            "module": g.site.module,
            "module_type": g.site.module_type,
            "op": g.site.op,
            "phase": phase_label(g.site.phase),
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
            "bound": "fused" if g.bound == "fused" else roofline_bound(
                g.site.flops, g.site.dram_bytes, ridge),
            "lo_ms": g.lo_ms,
            "hi_ms": g.hi_ms,
        }
        for g in report.gemms
    ]


def op_rows(report: ReportRecord) -> list[dict[str, Any]]:
    """One dict per non-GEMM op, in execution order, with the kernel that runs it ("" for
    its own)."""
    return [
        {
            "module": o.op.module,
            "module_type": o.op.module_type,
            "op": o.op.op,
            "phase": phase_label(o.op.phase),
            "op_class": o.op.op_class,
            "dram_bytes": o.op.dram_bytes,
            "time_ms": o.time_ms,
            "kernel": o.kernel,
        }
        for o in report.others
    ]


_OP_FIELDS = ("op", "class", "phase", "count", "flops", "time_ms", "pct_of_total", "bound")


def to_dict(report: ReportRecord, advice: bool = True) -> dict[str, Any]:
    """Everything as plain data. ``inputs`` is the question (``ReportInputs``); ``rows`` holds
    one dict per GEMM and sums to ``gemm_ms``; ``by_op_class`` the non-GEMM time by op class,
    summing to ``other_ms``; ``by_phase`` and ``by_op`` (one dict per operator and phase, as
    ``table(by="op")``) sum to ``gpu_ms``, the kernels' sum; ``total_ms`` is what ``timing``
    measures (``call`` holds its parts: GPU, host, a graph replay's input copies)."""
    out: dict[str, Any] = {
        "inputs": asdict(report.question()),
        "model": report.model,
        "device": report.device.id,
        "device_origin": report.device.origin,
        "dtype": report.dtype,
        "mode": report.mode,
        "predictor": report.predictor,
        "predictor_version": report.predictor_version,
        "timing": report.timing,
        "total_ms": report.total_ms,
        "gpu_ms": report.gpu_ms,
        "host_ms": report.host_ms,
        "gemm_ms": report.gemm_ms,
        "other_ms": report.other_ms,
        "total_flops": report.total_flops,
        "achieved_tflops": report.achieved_tflops,
        "unmodelled_ops": len(report.unmodelled),
        "config": dict(report.config),
        "by_op_class": by_op_class(report),
        "by_phase": by_phase(report),
        "rows": rows(report),
        "by_op": [{k: r.cells[k] for k in _OP_FIELDS} for r in op_table_rows(report)],
    }
    if report.compiled:
        out["compiled"] = True
    if any(o.kernel for o in report.others):
        out["kernels"] = report.kernels()
    if report.uncertainty is not None:
        lo, hi = report.interval(DEFAULT_LEVEL)
        out.update(interval_level=DEFAULT_LEVEL, total_lo_ms=lo, total_hi_ms=hi,
                   novelty=report.uncertainty.novelty)
    if report.call is not None:
        c = report.call
        out["call"] = {"timing": c.timing, "total_ms": c.total_ms, "gpu_ms": c.gpu_ms,
                       "host_ms": c.host_ms, "copy_ms": c.copy_ms, "host_lo_ms": c.lo_ms,
                       "host_hi_ms": c.hi_ms, "host_costs": c.host,
                       "issues": len(c.issues.gpu_ms)}
    if report.memory is not None:
        out["memory"] = report.memory.to_dict()
    if advice and report.advice is not None:
        out["padding_advice"] = [
            {**asdict(a), "saving_ms": a.saving_ms, "saving_pct": a.saving_pct}
            for a in report.advice
        ]
    return out


def to_json(report: ReportRecord, path: str | Path | None = None, indent: int = 2) -> str:
    """The report as JSON (see ``to_dict``); also written to ``path`` when given."""
    text = json.dumps(to_dict(report), indent=indent)
    if path is not None:
        Path(path).write_text(text + "\n")
    return text


def to_csv(report: ReportRecord, path: str | Path | None = None) -> str:
    """One CSV line per GEMM: the question (``INPUT_COLUMNS``), then the columns of ``rows``;
    also written to ``path`` when given."""
    asked = {col: getattr(report.question(), name) for col, name in INPUT_COLUMNS.items()}
    lines = [{**asked, **r} for r in rows(report)]
    buf = io.StringIO()
    fields = list(lines[0]) if lines else [*asked, "module", "op", "time_ms"]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    if path is not None:
        Path(path).write_text(buf.getvalue())
    return buf.getvalue()


def to_dataframe(report: ReportRecord) -> Any:
    """``rows`` as a pandas DataFrame (pandas is optional and imported only here)."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("CostReport.to_dataframe() needs pandas: pip install pandas") from e
    return pd.DataFrame(rows(report))
