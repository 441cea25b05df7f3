"""The report stage: the only one that formats text. It renders what it is handed: the
estimates, the model's module types and config dims, and the padding advice, all computed
before (see ``api.estimate``); it predicts nothing.

One job per module:

- ``inputs``: ``ReportInputs``, the question a report answers (model, task, sizes, dtype, mode,
  attention, device and its origin, predictor);
- ``record``: ``ReportRecord``, the estimates of one run and their totals and intervals, and
  the one rule of a row's bound (its intensity against the roofline's ridge);
- ``rows``: a table's rows before printing: ranked, the costliest kept and the rest folded,
  labels unique;
- ``tree``: times aggregated by the module tree, repeated blocks collapsed (``h.{0-11}``);
- ``breakdown``: the non-GEMM time by op class, the time by phase, the per-operator rows;
- ``text``: the cost table, its footer, the fused kernels' table and the advice in words;
- ``memory_text``: a run's memory, its peak against the device's, the batch that fits;
- ``compare``: several reports side by side (``Comparison``);
- ``device_table``: the device catalog as a table;
- ``export``: plain data, JSON, CSV and pandas;
- ``roofline``: the roofline's points, one per GEMM row, and its plot (matplotlib, imported
  when drawing);
- ``svg_roofline``: the same points as inline SVG, each with a hover title;
- ``bars``: the page's stacked bars: time by class and phase, and the memory;
- ``explain``: one GEMM's record and the predictor's intermediates;
- ``html_page``: the report as one self-contained HTML page;
- ``cost_report``: ``CostReport``, the record with each rendering as a method.
"""

from .compare import Comparison, format_comparison, intervals_overlap
from .cost_report import CostReport
from .device_table import format_device_table
from .explain import GemmExplanation
from .inputs import ReportInputs
from .text import format_advice

__all__ = [
    "Comparison",
    "CostReport",
    "GemmExplanation",
    "ReportInputs",
    "format_advice",
    "format_comparison",
    "format_device_table",
    "intervals_overlap",
]
