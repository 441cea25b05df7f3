"""A report's time by what runs rather than where: the non-GEMM time by op class
(``records.op_classes.TIME_CLASSES``), the time by phase of a training step (fwd, dgrad, wgrad,
optim), and the per-operator table of ``table(by="op")``.

Each breakdown sums to its total: the classes to ``other_ms``, the phases and the operator rows
to ``gpu_ms`` (the kernels' sum).
"""

from __future__ import annotations

from typing import Any

from ..records.op_classes import TIME_CLASSES, time_class_of
from .record import ReportRecord
from .rows import TableRow, row_of, unique_labels

__all__ = ["GEMM_CLASS", "PHASES", "by_op_class", "by_phase", "op_table_rows", "phase_label"]

# a record's phase -> the phase a report names. NB: a non-GEMM backward op is counted in dgrad,
# also where it makes a weight's gradient (a bias's sum, a norm's scale): its record does not
# say which gradient it makes.
_PHASE = {"forward": "fwd", "backward_dx": "dgrad", "backward_dw": "wgrad", "backward": "dgrad",
          "optimizer": "optim"}
PHASES: tuple[str, ...] = ("fwd", "dgrad", "wgrad", "optim")
GEMM_CLASS = "GEMM"  # the class column of a GEMM's row in the per-operator table


def phase_label(phase: str) -> str:
    """The report's name of a record's phase: fwd, dgrad, wgrad or optim."""
    return _PHASE.get(phase, phase)


def by_op_class(report: ReportRecord) -> dict[str, float]:
    """The non-GEMM time (ms) by ``TIME_CLASSES`` key, in its order, classes with no time
    left out; sums to ``other_ms``."""
    out = dict.fromkeys(TIME_CLASSES, 0.0)
    for o in report.others:
        out[time_class_of(o.op)] += o.time_ms or 0.0
    return {k: v for k, v in out.items() if v > 0.0}


def by_phase(report: ReportRecord) -> dict[str, float]:
    """The time (ms) of each phase present, fwd, dgrad, wgrad, optim in order; sums to
    ``gpu_ms``."""
    out = dict.fromkeys(PHASES, 0.0)
    seen: set[str] = set()
    for g in report.gemms:
        out[phase_label(g.site.phase)] += g.time_ms
        seen.add(phase_label(g.site.phase))
    for o in report.others:
        out[phase_label(o.op.phase)] += o.time_ms or 0.0
        seen.add(phase_label(o.op.phase))
    return {k: v for k, v in out.items() if k in seen}


def op_table_rows(report: ReportRecord) -> list[TableRow]:
    """One row per operator (and phase): a GEMM kind (``linear``, ``bmm``, ...) or an ATen
    op, its class (``GEMM`` or a ``TIME_CLASSES`` label), phase, count and time, in order of
    first run. Rows of free ops (views) are left out; every GEMM has a row, so the rows sum to
    the totals."""
    train = report.mode == "train"
    groups: dict[tuple[str, str, str], tuple[list[int], list[int]]] = {}
    for i, g in enumerate(report.gemms):
        key = (g.site.op, GEMM_CLASS, phase_label(g.site.phase))
        groups.setdefault(key, ([], []))[0].append(i)
    for i, o in enumerate(report.others):
        key = (o.op.op, TIME_CLASSES[time_class_of(o.op)], phase_label(o.op.phase))
        groups.setdefault(key, ([], []))[1].append(i)
    rows = []
    for (op, cls, phase), (gi, oi) in groups.items():
        names: dict[str, Any] = {"op": op, "class": cls, "phase": phase,
                                 "count": len(gi) + len(oi),
                                 "label": f"{op} ({phase})" if train else op}
        row = row_of(report, names, gi, oi)
        if gi or row.cells["time_ms"] or row.cells["unmodelled"]:
            rows.append(row)
    return unique_labels(rows, "op")
