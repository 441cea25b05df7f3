"""The report stage: the only one that formats text. It renders what it is handed: the
estimates, the model's module types and config dims, and the padding advice, all computed
before (see ``api.estimate``); it predicts nothing.

One job per module:

- ``record``: ``ReportRecord``, the estimates of one run and their totals and intervals;
- ``tree``: times aggregated by the module tree, repeated blocks collapsed (``h.{0-11}``);
- ``text``: the cost table, its footer, the fused kernels' table and the advice in words;
- ``memory_text``: a run's memory, its peak against the device's, the batch that fits;
- ``compare``: several reports side by side (``Comparison``);
- ``device_table``: the device catalog as a table;
- ``export``: plain data, JSON, CSV and pandas;
- ``roofline``: the roofline plot (matplotlib, imported when drawing);
- ``explain``: one GEMM's record and the predictor's intermediates;
- ``html_page``: the report as one self-contained HTML page;
- ``cost_report``: ``CostReport``, the record with each rendering as a method.
"""

from .compare import Comparison, format_comparison, intervals_overlap
from .cost_report import CostReport
from .device_table import format_device_table
from .explain import GemmExplanation
from .text import format_advice

__all__ = [
    "Comparison",
    "CostReport",
    "GemmExplanation",
    "format_advice",
    "format_comparison",
    "format_device_table",
    "intervals_overlap",
]
