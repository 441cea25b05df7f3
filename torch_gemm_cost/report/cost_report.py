"""``CostReport``: the report record with its renderings as methods, each handed to the module
of the package that makes it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import export, text, tree
from .explain import GemmExplanation, explain
from .html_page import to_html
from .record import ReportRecord
from .roofline import plot_roofline

__all__ = ["CostReport"]


@dataclass(frozen=True)
class CostReport(ReportRecord):
    """Every GEMM (and non-GEMM op) of one model run on one device, with predicted times (the
    fields and totals of ``ReportRecord``), printed as its per-GEMM table, footer and best
    padding advice."""

    def rows(self) -> list[dict[str, Any]]:
        """One dict per GEMM, in execution order."""
        return export.rows(self)

    def op_rows(self) -> list[dict[str, Any]]:
        """One dict per non-GEMM op, in execution order, with the kernel that runs it ("" for
        its own)."""
        return export.op_rows(self)

    def to_dict(self, advice: bool = True) -> dict[str, Any]:
        """Everything as plain data; ``rows`` holds one dict per GEMM and sums to ``gemm_ms``."""
        return export.to_dict(self, advice)

    def to_json(self, path: str | Path | None = None, indent: int = 2) -> str:
        """The report as JSON (see ``to_dict``); also written to ``path`` when given."""
        return export.to_json(self, path, indent)

    def to_csv(self, path: str | Path | None = None) -> str:
        """One CSV line per GEMM (the columns of ``rows()``); also written to ``path`` when given."""
        return export.to_csv(self, path)

    def to_dataframe(self) -> Any:
        """``rows()`` as a pandas DataFrame (pandas is optional and imported only here)."""
        return export.to_dataframe(self)

    def module_rows(self, depth: int | None = None) -> list[dict[str, Any]]:
        """Times aggregated by the module tree, cut at ``depth`` levels, repeats collapsed
        (see ``tree.module_rows``); the rows sum to ``total_ms``."""
        return tree.module_rows(self, depth)

    def top(self, k: int = 10, depth: int | None = None) -> list[dict[str, Any]]:
        """The ``k`` costliest rows of ``module_rows(depth)``."""
        return tree.top(self, k, depth)

    def table(self, depth: int | None = None, top: int | None = None,
              intervals: bool = False) -> str:
        """The cost table: one row per GEMM (``depth=None``) or per module at ``depth`` levels.

        Repeated blocks collapse into one row (``GPT2Block × 12``) holding the time of all repeats.
        ``top`` keeps the costliest rows only, sorted by time. ``intervals`` adds each row's 80%
        interval (where the report has them).
        """
        return text.table(self, depth, top, intervals)

    def kernel_table(self, top: int | None = None) -> str:
        """The fused kernels as a table: each kernel, its time and the ops fused into it;
        ``top`` keeps the costliest."""
        return text.kernel_table(self, top)

    def footer(self) -> str:
        """The totals under the table: times, FLOP rate, predictor, unmodelled and fused ops."""
        return text.footer(self)

    def __str__(self) -> str:
        return text.render(self)

    def explain(self, row: int | str) -> GemmExplanation:
        """Explain one GEMM: ``row`` is its index in ``rows()`` or its module path (first match).
        The predictor's intermediates are those it gave when it priced the run."""
        return explain(self, row)

    def plot_roofline(self, path: str | Path) -> Path:
        """Draw every GEMM on the device's roofline (point area ∝ time), ridge marked; save to path.

        Needs matplotlib (``pip install matplotlib``; from a checkout,
        ``pip install -e '.[plot]'``).
        """
        return plot_roofline(self, path)

    def to_html(self, path: str | Path | None = None, depth: int | None = None,
                top: int | None = None) -> str:
        """The report as one self-contained HTML page: totals, the roofline plot, the padding
        advice and the layer table of ``table(depth, top, intervals=True)`` with a bar per row
        for its time (see ``html_page.to_html``). Also written to ``path`` when given."""
        return to_html(self, path, depth, top)
