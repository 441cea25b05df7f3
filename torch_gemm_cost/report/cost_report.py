"""``CostReport``: the report record with its renderings as methods, each handed to the module
of the package that makes it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import breakdown, export, text, tree
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
        """Times aggregated by the module tree, cut at ``depth`` levels, repeats collapsed,
        costliest first (see ``tree.module_rows``); the rows sum to ``gpu_ms``."""
        return tree.module_rows(self, depth)

    def by_op_class(self) -> dict[str, float]:
        """The non-GEMM time (ms) by op class (``records.op_classes.TIME_CLASSES``: normalization,
        softmax, elementwise, embedding, attention, copy, reduction, optimizer, other); sums to
        ``other_ms``."""
        return breakdown.by_op_class(self)

    def by_phase(self) -> dict[str, float]:
        """The time (ms) by phase: fwd, and in a training step dgrad, wgrad and optim; sums to
        ``gpu_ms`` (the kernels' sum)."""
        return breakdown.by_phase(self)

    def top(self, k: int = 10, depth: int | None = None) -> list[dict[str, Any]]:
        """The ``k`` costliest rows of ``module_rows(depth)``."""
        return tree.top(self, k, depth)

    def table(self, depth: int | None = None, top: int | None = None,
              intervals: bool = False, by: str = "module") -> str:
        """The cost table, costliest rows first: by module (``by="module"``), one row per GEMM
        and per non-GEMM op class (``depth=None``) or per module at ``depth`` levels; or one row
        per operator (``by="op"``: op, class, count, time, share).

        Repeated blocks collapse into one row (``GPT2Block × 12``) holding the time of all repeats.
        ``top`` keeps the costliest rows and folds the rest into one, so the rows still sum to
        the total. In a training step each row names its phase (fwd, dgrad, wgrad, optim).
        ``intervals`` adds each row's 80% interval (where the report has them).
        """
        return text.table(self, depth, top, intervals, by)

    def kernel_table(self, top: int | None = None) -> str:
        """The fused kernels as a table: each kernel, its time and the ops fused into it;
        ``top`` keeps the costliest."""
        return text.kernel_table(self, top)

    def footer(self) -> str:
        """The lines under the table: the question (``inputs``), the totals, the non-GEMM time
        by op class, a training step's time by phase, predictor, unmodelled and fused ops."""
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
                top: int | None = None, by: str = "module") -> str:
        """The report as one self-contained HTML page: its inputs, totals, the time by GEMM
        and non-GEMM op class, the roofline (every point hoverable), the padding advice and the
        table of ``table(depth, top, intervals=True, by=by)`` with a bar per row for its time
        (see ``html_page.to_html``). Also written to ``path`` when given."""
        return to_html(self, path, depth, top, by)
