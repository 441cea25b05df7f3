"""A report's times aggregated by the module tree, repeated blocks collapsed into one row.

Every table's rows sum to the report's totals: a collapsed row (``h.{0-11}``) carries the summed
time of all its repeats.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..capture.core import module_template
from .record import ReportRecord, rows_interval

__all__ = ["module_rows", "top"]

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


def _collapsed_name(template: str, indices: Sequence[tuple[int, ...]]) -> str:
    """Name a group of repeated paths: ``h.{0-11}`` for one contiguous index, else ``h.*``."""
    if len(indices) == 1:
        it = iter(indices[0])
        return ".".join(str(next(it)) if p == "*" else p for p in template.split("."))
    if indices and len(indices[0]) == 1:
        vals = sorted(i[0] for i in indices)
        if vals == list(range(vals[0], vals[0] + len(vals))):
            return template.replace("*", f"{{{vals[0]}-{vals[-1]}}}", 1)
    return template


@dataclass
class _Row:
    """A mutable accumulator used only while building a table."""

    key: Any
    first: int
    paths: list[str] = field(default_factory=list)
    gemms: int = 0
    flops: int = 0
    gemm_ms: float = 0.0
    other_ms: float = 0.0
    compute_ms: float = 0.0
    unmodelled: int = 0
    sig: list[Any] = field(default_factory=list)
    gemm_index: list[int] = field(default_factory=list)  # positions in the report's gemms
    other_index: list[int] = field(default_factory=list)  # … and in its others

    @property
    def time_ms(self) -> float:
        return self.gemm_ms + self.other_ms


def _type_of(report: ReportRecord, path: str) -> str:
    if path in report.module_types:
        return report.module_types[path]
    for rec in [g.site for g in report.gemms] + [o.op for o in report.others]:
        if rec.module == path:
            return rec.module_type
    return path.rsplit(".", 1)[-1] if path else report.model


def module_rows(report: ReportRecord, depth: int | None = None) -> list[dict[str, Any]]:
    """The report's times aggregated by the module tree, cut at ``depth`` levels, repeats
    collapsed.

    ``depth=None`` gives one row per GEMM. Non-GEMM ops count towards their module at a
    finite depth, and towards one ``(non-GEMM ops)`` row otherwise. Rows holding only free ops
    (views) are left out. A collapsed row's ``time_ms`` sums every repeat, so the rows sum to
    ``total_ms``.
    """
    if depth is not None and depth < 1:
        raise ValueError(f"depth must be a positive number of module levels, got {depth}; try 1")
    # collapse rows whose paths differ only in container indices and whose contents match
    merged: dict[Any, list[_Row]] = {}
    for row in _group(report, depth).values():
        path, extra = row.key
        tmpl, _ = module_template(path)
        merged.setdefault((tmpl, extra, tuple(sorted(map(repr, row.sig)))), []).append(row)
    # at a finite depth, rows follow module definition order (close to execution order), so
    # rows of non-GEMM ops fall in place; ops of the top-level module come last
    rank = {p: i for i, p in enumerate(report.module_types) if p} if depth is not None else {}
    total = report.total_ms or 1.0
    out = []
    for (tmpl, extra, _), rows in merged.items():
        if not any(r.gemms or r.unmodelled or r.time_ms for r in rows):
            continue  # only free ops (views, metadata): nothing to show
        rec = _record(report, tmpl, rows, total)
        rec["first"] = (rank.get(rows[0].paths[0], len(rank)), min(r.first for r in rows))
        if depth is None and extra != "other":
            op, phase, shape, dtype, _ = extra
            rec.update(op=op, phase=phase, shape=shape, dtype=dtype)
        out.append(rec)
    out.sort(key=lambda r: r["first"])
    for r in out:
        del r["first"]
    return out


def _group(report: ReportRecord, depth: int | None) -> dict[Any, _Row]:
    """Every GEMM and op added to its row: its module cut at ``depth`` levels, or with
    ``depth=None`` one row per GEMM and one for all other ops. Rows keep first-seen order."""
    groups: dict[Any, _Row] = {}

    def add(path: str, key_extra: Any, i: int) -> _Row:
        row = groups.get((path, key_extra))
        if row is None:
            row = groups[(path, key_extra)] = _Row(key=(path, key_extra), first=i)
            row.paths.append(path)
        return row

    ordinal: dict[tuple[str, str, str], int] = {}
    for i, g in enumerate(report.gemms):
        s = g.site
        if depth is None:
            okey = (s.module, s.op, s.phase)
            nth = ordinal[okey] = ordinal.get(okey, -1) + 1
            row = add(s.module, (s.op, s.phase, s.shape, s.dtype, nth), i)
        else:
            row = add(".".join(_levels(s.module)[:depth]), None, i)
        row.gemms += 1
        row.gemm_index.append(i)
        row.flops += s.flops
        row.gemm_ms += g.time_ms
        row.compute_ms += g.time_ms if g.bound == "compute" else 0.0
        row.sig.append((s.module[len(row.paths[0]):], s.op, s.phase, s.shape, s.dtype))
    for i, o in enumerate(report.others, start=len(report.gemms)):
        a = o.op.attention
        if depth is None and a is not None and o.kernel:  # a GPU's fused attention kernel
            shape = (a.batch * a.heads, a.q_len, a.kv_len, a.head_dim)
            okey = (o.op.module, "attention", o.op.phase)
            nth = ordinal[okey] = ordinal.get(okey, -1) + 1
            row = add(o.op.module, ("attention", o.op.phase, shape, o.op.dtype, nth), i)
        elif depth is None:
            row = add("(non-GEMM ops)", "other", i)
        else:
            row = add(".".join(_levels(o.op.module)[:depth]), None, i)
            row.sig.append((o.op.module[len(row.paths[0]):], o.op.op, o.op.numel))
        row.other_ms += o.time_ms or 0.0
        row.other_index.append(i - len(report.gemms))
        row.unmodelled += o.time_ms is None
    return groups


def _record(report: ReportRecord, template: str, rows: Sequence[_Row],
            total_ms: float) -> dict[str, Any]:
    """The table row of one module (or GEMM) and its repeats, of a run of ``total_ms``."""
    paths = [r.paths[0] for r in rows]
    name = (_collapsed_name(template, [module_template(p)[1] for p in paths])
            if len(rows) > 1 else paths[0])
    gemm_ms = sum(r.gemm_ms for r in rows)
    other_ms = sum(r.other_ms for r in rows)
    compute_ms = sum(r.compute_ms for r in rows)
    span = rows_interval(report, [i for r in rows for i in r.gemm_index], other_ms,
                         [i for r in rows for i in r.other_index])
    return {
        "module": name or "(top)",
        "module_type": _type_of(report, paths[0]) if paths[0] != "(non-GEMM ops)" else "",
        "count": len(rows),
        "gemms": sum(r.gemms for r in rows),
        "flops": sum(r.flops for r in rows),
        "gemm_ms": gemm_ms,
        "other_ms": other_ms,
        "time_ms": gemm_ms + other_ms,
        "pct_of_total": 100.0 * (gemm_ms + other_ms) / total_ms,
        "bound": "-" if not rows[0].gemms else (
            "compute" if compute_ms >= gemm_ms - compute_ms else "memory"
        ),
        "lo_ms": None if span is None else span[0],
        "hi_ms": None if span is None else span[1],
    }


def top(report: ReportRecord, k: int = 10, depth: int | None = None) -> list[dict[str, Any]]:
    """The ``k`` costliest rows of ``module_rows(report, depth)``."""
    return sorted(module_rows(report, depth), key=lambda r: -r["time_ms"])[:k]
