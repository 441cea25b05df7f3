"""A cost report as one self-contained HTML page (``CostReport.to_html``).

The page holds the totals, the roofline plot as SVG, the padding advice in words and the layer
table's cells, each formatted as the text report formats them. It carries its styles inline,
runs no script and loads nothing, so any browser opens the file as it is. Every string is
escaped (jinja2's autoescape); only the SVG that matplotlib wrote goes in as markup.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..predict.intervals import DEFAULT_LEVEL
from .record import ReportRecord
from .roofline import pyplot, roofline_figure
from .text import NOVELTY_TEXT, advice_line, table_cells

__all__ = ["HtmlRow", "render_html", "to_html"]


@dataclass(frozen=True)
class HtmlRow:
    """One row of the layer table: its cells as text, its bound (``compute``, ``memory`` or
    ``-``) and the length of its time bar in percent of the longest row's."""

    cells: tuple[str, ...]
    bound: str
    bar_pct: float


_TEMPLATE = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
  h1 { font-size: 1.4em; margin-bottom: 0; }
  p.sub { color: #666; margin-top: 0.2em; }
  h2 { font-size: 1.1em; margin-top: 1.6em; }
  table { border-collapse: collapse; }
  th, td { padding: 2px 8px; text-align: left; white-space: nowrap; }
  table.totals th { font-weight: normal; color: #666; }
  table.layers thead th { border-bottom: 1px solid #999; position: sticky; top: 0;
                          background: #fff; }
  table.layers td.num { text-align: right; font-variant-numeric: tabular-nums; }
  table.layers tbody tr:nth-child(even) { background: #f6f6f6; }
  td.bar { width: 240px; }
  td.bar span { display: block; height: 0.9em; min-width: 1px; background: #999; }
  tr.compute td.bar span { background: #4878b0; }
  tr.memory td.bar span { background: #d8873a; }
  figure { margin: 0; }
  figure svg { max-width: 100%; height: auto; }
  ol li { margin-bottom: 0.4em; max-width: 70em; }
  .legend span { display: inline-block; width: 1em; height: 0.8em; margin: 0 0.3em 0 1em; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="sub">{{ subtitle }}</p>
<h2>Totals</h2>
<table class="totals">
{%- for label, value in totals %}
<tr><th>{{ label }}</th><td>{{ value }}</td></tr>
{%- endfor %}
</table>
<h2>Roofline</h2>
{% if svg %}<figure>{{ svg }}</figure>{% else %}<p>{{ no_plot }}</p>{% endif %}
<h2>Padding advice</h2>
{% if advice -%}
<ol>
{%- for line in advice %}
<li>{{ line }}</li>
{%- endfor %}
</ol>
{%- else -%}
<p>none: the predictor finds no padding that saves time</p>
{%- endif %}
<h2>Layers</h2>
<p class="legend">time bar, longest row full:<span style="background:#4878b0"></span>compute-bound
<span style="background:#d8873a"></span>memory-bound<span style="background:#999"></span>no GEMM</p>
<table class="layers">
<thead><tr>{% for h in headers %}<th>{{ h }}</th>{% endfor %}<th>time</th></tr></thead>
<tbody>
{%- for row in rows %}
<tr class="{{ row.bound }}">
{%- for cell in row.cells %}<td{% if numeric[loop.index0] %} class="num"{% endif %}>{{ cell }}</td>{% endfor -%}
<td class="bar"><span style="width: {{ '%.1f' % row.bar_pct }}%"></span></td></tr>
{%- endfor %}
</tbody>
</table>
</body>
</html>
"""


def render_html(*, title: str, subtitle: str, totals: Sequence[tuple[str, str]],
                headers: Sequence[str], numeric: Sequence[bool], rows: Sequence[HtmlRow],
                svg: str | None, no_plot: str, advice: Sequence[str]) -> str:
    """The page. ``numeric`` marks the table's columns of numbers (set right-aligned). ``svg``
    is matplotlib's SVG output (None: ``no_plot`` says why there is no plot); every other
    string is escaped."""
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    plot = None if svg is None else Markup(svg[svg.index("<svg"):])  # no XML prolog in HTML
    return env.from_string(_TEMPLATE).render(
        title=title, subtitle=subtitle, totals=totals, headers=headers, numeric=numeric,
        rows=rows, svg=plot,
        no_plot=no_plot, advice=advice,
    )


def to_html(report: ReportRecord, path: str | Path | None = None, depth: int | None = None,
            top: int | None = None) -> str:
    """The report as one self-contained HTML page: totals, the roofline plot (inline SVG,
    where matplotlib is installed), the padding advice and the layer table of
    ``table(depth, top, intervals=True)`` with a bar per row for its time. No script and no
    network: any browser opens the file. Also written to ``path`` when given."""
    headers, body, fmt, rows = table_cells(report, depth, top, intervals=True)
    longest = max((r["time_ms"] for r in rows), default=0.0) or 1.0
    table = [HtmlRow(tuple(format(c, f) if f else str(c) for c, f in zip(cells, fmt)),
                     bound=r["bound"], bar_pct=100.0 * r["time_ms"] / longest)
             for cells, r in zip(body, rows)]
    unmod = sorted({o.op.op for o in report.unmodelled})
    totals = [
        ("total", f"{report.total_ms:.3f} ms"),
        *([] if report.uncertainty is None else [(
            f"{DEFAULT_LEVEL:.0%} interval",
            "{:.3f}-{:.3f} ms, ".format(*report.interval(DEFAULT_LEVEL))
            + NOVELTY_TEXT[report.uncertainty.novelty])]),
        ("GEMMs", (f"{report.gemm_ms:.3f} ms in {len(report.gemms)} GEMMs, "
                   f"{report.total_flops / 1e9:.2f} GFLOP")),
        ("other ops", f"{report.other_ms:.3f} ms in {len(report.others)} ops"),
        ("achieved", f"{report.achieved_tflops:.1f} TFLOP/s"),
        ("unmodelled ops", f"{len(unmod)}" + (f" ({', '.join(unmod)})" if unmod else "")),
        ("predictor", f"{report.predictor} v{report.predictor_version}"),
    ]
    try:
        plt = pyplot("to_html")
    except ImportError as e:
        svg, no_plot = None, str(e)
    else:
        fig = roofline_figure(report, plt)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
        plt.close(fig)
        svg, no_plot = buf.getvalue(), ""
    text = render_html(
        title=f"{report.model} on {report.device.name} ({report.device.id})",
        subtitle=f"{report.dtype}, {report.mode}; predicted, not measured",
        totals=totals, headers=headers,
        numeric=[any(isinstance(cells[i], (int, float)) for cells in body)
                 for i in range(len(headers))],
        rows=table, svg=svg, no_plot=no_plot,
        advice=[advice_line(a) for a in report.advice or ()],
    )
    if path is not None:
        Path(path).write_text(text)
    return text
