"""A report's times aggregated by the module tree, repeated blocks collapsed into one row.

Every table's rows sum to the report's totals: a collapsed row (``h.{0-11}``) carries the summed
time of all its repeats. Rows are ranked by time, and no two read the same: two GEMMs of one
kind in one module are numbered (``matmul #1``, ``matmul #2``), and in a training step each row
names its phase (fwd, dgrad, wgrad, optim).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..capture.core import module_template
from ..records.op_classes import TIME_CLASSES, time_class_of
from .breakdown import phase_label
from .record import ReportRecord
from .rows import TableRow, ranked, row_of, unique_labels

__all__ = ["NON_GEMM", "module_rows", "module_table_rows", "top"]

NON_GEMM = "(non-GEMM ops)"  # the module cell of the per-GEMM table's op-class rows
_INDEX = re.compile(r"^\d+$")


def _levels(module: str) -> list[str]:
    """Split a module path into tree levels; a container index joins its parent ("h.0")."""
    levels: list[str] = []
    for part in module.split(".") if module else []:
        if _INDEX.match(part) and levels:
            levels[-1] = f"{levels[-1]}.{part}"
        else:
            levels.append(part)
    return levels


def _span(values: Sequence[int]) -> str:
    """Indices as runs: ``0-2,5,7-8``."""
    vals = sorted(values)
    runs: list[list[int]] = []
    for v in vals:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _collapsed_name(template: str, indices: Sequence[tuple[int, ...]]) -> str:
    """Name a group of repeated paths: ``h.{0-11}`` (or ``h.{0,2,5-7}``) for one index, else
    ``h.*``."""
    if len(indices) == 1:
        it = iter(indices[0])
        return ".".join(str(next(it)) if p == "*" else p for p in template.split("."))
    if indices and len(indices[0]) == 1:
        return template.replace("*", f"{{{_span([i[0] for i in indices])}}}", 1)
    return template


@dataclass
class _Row:
    """A mutable accumulator used only while building a table."""

    key: Any
    first: int
    path: str
    sig: list[Any] = field(default_factory=list)
    gemm_index: list[int] = field(default_factory=list)  # positions in the report's gemms
    other_index: list[int] = field(default_factory=list)  # … and in its others


def _type_of(report: ReportRecord, path: str) -> str:
    if path in report.module_types:
        return report.module_types[path]
    for rec in [g.site for g in report.gemms] + [o.op for o in report.others]:
        if rec.module == path:
            return rec.module_type
    return path.rsplit(".", 1)[-1] if path else report.model


def module_rows(report: ReportRecord, depth: int | None = None) -> list[dict[str, Any]]:
    """The report's times aggregated by the module tree, cut at ``depth`` levels, repeats
    collapsed, costliest first.

    ``depth=None`` gives one row per GEMM, one per fused attention kernel, and one per class
    of the other non-GEMM ops (``(non-GEMM ops)`` ``normalization``, ...). At a finite depth the
    non-GEMM ops count towards their module. Rows holding only free ops (views) are left out. A
    collapsed row's ``time_ms`` sums every repeat, so the rows sum to ``gpu_ms``. In a
    training step a row holds one phase.
    """
    return [r.cells for r in module_table_rows(report, depth)]


def module_table_rows(report: ReportRecord, depth: int | None = None) -> list[TableRow]:
    """``module_rows`` with the records each row holds."""
    if depth is not None and depth < 1:
        raise ValueError(f"depth must be a positive number of module levels, got {depth}; try 1")
    # collapse rows whose paths differ only in container indices and whose contents match
    merged: dict[Any, list[_Row]] = {}
    for row in _group(report, depth).values():
        tmpl, _ = module_template(row.path)
        merged.setdefault((tmpl, row.key[1], tuple(sorted(map(repr, row.sig)))), []).append(row)
    # before ranking by time, rows follow module definition order at a finite depth (close to
    # execution order) and execution order per GEMM: equal times keep that order
    rank = {p: i for i, p in enumerate(report.module_types) if p} if depth is not None else {}
    train = report.mode == "train"
    built = []
    for (tmpl, extra, _), rows in merged.items():
        gi = sorted(i for r in rows for i in r.gemm_index)
        oi = sorted(i for r in rows for i in r.other_index)
        made = row_of(report, _names(report, tmpl, extra, rows, train), gi, oi)
        if not (made.cells["gemms"] or made.cells["unmodelled"] or made.cells["time_ms"]):
            continue  # only free ops (views, metadata): nothing to show
        built.append(((rank.get(rows[0].path, len(rank)), min(r.first for r in rows)), made))
    built.sort(key=lambda b: b[0])
    out = _numbered([made for _, made in built], train)
    return ranked(unique_labels(out, "module"))


def _names(report: ReportRecord, template: str, extra: tuple[Any, ...], rows: Sequence[_Row],
           train: bool) -> dict[str, Any]:
    """The cells that name one row: module, its type, the repeats it folds, and per GEMM its
    op, phase, shape and dtype."""
    paths = [r.path for r in rows]
    name = (_collapsed_name(template, [module_template(p)[1] for p in paths])
            if len(rows) > 1 else paths[0])
    kind = extra[0]
    names: dict[str, Any] = {
        "module": name or "(top)",
        "module_type": "" if kind == "class" else _type_of(report, paths[0]),
        "count": len(rows),
        "phase": extra[1] if kind == "module" else extra[2],
    }
    if kind in ("gemm", "attention"):
        _, op, phase, shape, dtype, nth = extra
        names.update(op=op, op_text=op, phase=phase, shape=shape, dtype=dtype, nth=nth)
    elif kind == "class":
        names.update(op=TIME_CLASSES[extra[1]], op_text=TIME_CLASSES[extra[1]], phase=extra[2])
    names["label"] = names["module"] + (f" {names['op_text']}" if "op" in names else "") + (
        f" ({names['phase']})" if train else "")
    return names


def _numbered(rows: list[TableRow], train: bool) -> list[TableRow]:
    """Rows of one module, op and phase that hold different GEMMs (a block's two attention
    matmuls) numbered in execution order: ``matmul #1``, ``matmul #2``."""
    shared = Counter((r.cells["module"], r.cells.get("op"), r.cells["phase"]) for r in rows
                     if "nth" in r.cells)
    out = []
    for r in rows:
        c = r.cells
        if "nth" in c and shared[(c["module"], c["op"], c["phase"])] > 1:
            text = f"{c['op']} #{c['nth'] + 1}"
            label = f"{c['module']} {text}" + (f" ({c['phase']})" if train else "")
            r = TableRow({**c, "op_text": text, "label": label}, r.gemm_index, r.other_index)
        out.append(r)
    return out


def _group(report: ReportRecord, depth: int | None) -> dict[Any, _Row]:
    """Every GEMM and op added to its row: its module cut at ``depth`` levels (and its phase),
    or with ``depth=None`` one row per GEMM, per fused attention kernel and per class of the
    other ops. Rows keep first-seen order."""
    groups: dict[Any, _Row] = {}

    def add(path: str, key_extra: Any, i: int) -> _Row:
        row = groups.get((path, key_extra))
        if row is None:
            row = groups[(path, key_extra)] = _Row(key=(path, key_extra), first=i, path=path)
        return row

    ordinal: dict[tuple[str, str, str], int] = {}

    def nth(module: str, op: str, phase: str) -> int:
        n = ordinal[(module, op, phase)] = ordinal.get((module, op, phase), -1) + 1
        return n

    for i, g in enumerate(report.gemms):
        s = g.site
        phase = phase_label(s.phase)
        if depth is None:
            row = add(s.module, ("gemm", s.op, phase, s.shape, s.dtype,
                                 nth(s.module, s.op, phase)), i)
        else:
            row = add(".".join(_levels(s.module)[:depth]), ("module", phase), i)
        row.gemm_index.append(i)
        row.sig.append((s.module[len(row.path):], s.op, s.phase, s.shape, s.dtype))
    for j, o in enumerate(report.others):
        i = j + len(report.gemms)
        a, phase = o.op.attention, phase_label(o.op.phase)
        if depth is None and a is not None and o.kernel:  # a GPU's fused attention kernel
            shape = (a.batch * a.heads, a.q_len, a.kv_len, a.head_dim)
            row = add(o.op.module, ("attention", "attention", phase, shape, o.op.dtype,
                                    nth(o.op.module, "attention", phase)), i)
        elif depth is None:
            row = add(NON_GEMM, ("class", time_class_of(o.op), phase), i)
        else:
            row = add(".".join(_levels(o.op.module)[:depth]), ("module", phase), i)
            row.sig.append((o.op.module[len(row.path):], o.op.op, o.op.numel))
        row.other_index.append(j)
    return groups


def top(report: ReportRecord, k: int = 10, depth: int | None = None) -> list[dict[str, Any]]:
    """The ``k`` costliest rows of ``module_rows(report, depth)``."""
    return module_rows(report, depth)[:k]
