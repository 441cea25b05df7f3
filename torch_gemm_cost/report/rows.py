"""A table's rows before they are printed: each row's cells and the records it holds, ranked
by time, the costliest kept and the rest folded into one row, every label made unique.

Folding keeps the invariant of every table: its rows sum to the report's totals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .record import ReportRecord, totals_of

__all__ = ["TableRow", "fold", "ranked", "row_of", "unique_labels"]


@dataclass(frozen=True)
class TableRow:
    """One row: what it says (``cells``, the numbers of ``totals_of`` among them) and the
    positions of the report's GEMMs and other ops it holds."""

    cells: dict[str, Any]
    gemm_index: tuple[int, ...]
    other_index: tuple[int, ...]


def row_of(report: ReportRecord, names: dict[str, Any], gemm_index: Sequence[int],
           other_index: Sequence[int]) -> TableRow:
    """The row named by ``names`` holding the records at the two indexes, with its numbers."""
    return TableRow({**names, **totals_of(report, gemm_index, other_index)},
                    tuple(gemm_index), tuple(other_index))


def ranked(rows: Sequence[TableRow]) -> list[TableRow]:
    """Costliest first; rows of equal time keep their order."""
    return sorted(rows, key=lambda r: -r.cells["time_ms"])


def fold(report: ReportRecord, rows: Sequence[TableRow], top: int | None,
         names: dict[str, Any], name: str, summed: Sequence[str] = ()) -> list[TableRow]:
    """The ``top`` costliest of ``rows`` and one more row holding all the others, named by
    ``names`` and its ``label``, which says how many it holds (and is also its ``name`` cell);
    ``rows`` as ranked where ``top`` is None or leaves at most one row out (shown as itself).
    The folded row's bound is ``-``: its rows have no one bound; its cells named in ``summed``
    (a count) are the sums of its rows'."""
    rows = ranked(rows)
    if top is None or len(rows) <= top + 1:
        return rows
    rest = rows[top:]
    label = f"({len(rest)} other rows)"
    sums = {k: sum(r.cells[k] for r in rest) for k in summed}
    folded = row_of(report, {**names, **sums, "label": label, name: label},
                    sorted(i for r in rest for i in r.gemm_index),
                    sorted(i for r in rest for i in r.other_index))
    return [*rows[:top], TableRow({**folded.cells, "bound": "-"}, folded.gemm_index,
                                  folded.other_index)]


def unique_labels(rows: list[TableRow], name: str) -> list[TableRow]:
    """Rows whose ``label`` is shared by another get `` (1)``, `` (2)``, ... after their
    ``label`` and their ``name`` cell, in order, so no two rows of a table read the same."""
    seen = Counter(r.cells["label"] for r in rows)
    nth: Counter[str] = Counter()
    out = []
    for r in rows:
        label = r.cells["label"]
        if seen[label] > 1:
            nth[label] += 1
            tag = f" ({nth[label]})"
            r = TableRow({**r.cells, "label": label + tag, name: f"{r.cells[name]}{tag}"},
                         r.gemm_index, r.other_index)
        out.append(r)
    return out
