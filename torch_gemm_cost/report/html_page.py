"""A cost report as one self-contained HTML page (``CostReport.to_html``).

The page states its question (the inputs), then side by side the totals and where the time
goes (GEMMs and each non-GEMM op class, a training step's phases, the memory where the report
has a ``memory`` section) and the roofline as inline SVG, every point with a hover title; then
the padding advice with its saving, and the layer table's cells, each formatted as the text
report formats them. It carries its styles inline, runs no script and loads nothing, so any
browser opens the file as it is. Every string is escaped (jinja2's autoescape); only the SVG
drawn by ``svg_roofline`` goes in as markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..predict.intervals import DEFAULT_LEVEL
from .bars import MemoryBar, Part, memory_bar, time_bars
from .inputs import inputs_line
from .record import ReportRecord
from .roofline import LABELLED, RooflinePoint, roofline_points
from .svg_roofline import BOUND_COLOURS, roofline_svg
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
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em 2em; color: #222; }
  h1 { font-size: 1.4em; margin: 0; }
  p.sub { color: #555; margin: 0.2em 0 0.8em; }
  h2 { font-size: 1.1em; margin: 1.2em 0 0.4em; }
  .top { display: flex; flex-wrap: wrap; gap: 1em 2.5em; align-items: flex-start; }
  .top > div { flex: 1 1 28em; max-width: 44em; }
  .top > div.right { flex: 0 1 660px; }
  figure { margin: 0; }
  ol.points { margin: 0.3em 0; padding-left: 1.6em; font-size: 0.9em; }
  ol.points li { margin: 0; }
  figure svg { max-width: 100%; height: auto; }
  figcaption { color: #666; font-size: 0.9em; }
  table { border-collapse: collapse; }
  th, td { padding: 1px 8px; text-align: left; white-space: nowrap; }
  table.kv th { font-weight: normal; color: #666; }
  table.kv td { white-space: normal; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .stack { display: flex; height: 1.3em; width: 100%; margin: 0.3em 0; border: 1px solid #bbb; }
  .stack span { display: block; height: 100%; }
  div.caption { color: #666; font-size: 0.9em; }
  .key { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: -0.1em;
         margin-right: 0.3em; }
  table.layers thead th { border-bottom: 1px solid #999; position: sticky; top: 0;
                          background: #fff; }
  table.layers tbody tr:nth-child(even) { background: #f6f6f6; }
  td.bar { width: 240px; }
  td.bar span { display: block; height: 0.9em; min-width: 1px; background: #999; }
  tr.compute td.bar span { background: {{ compute }}; }
  tr.memory td.bar span { background: {{ memory_colour }}; }
  ol li { margin-bottom: 0.4em; max-width: 70em; }
  .save { font-weight: 600; }
  .legend span { display: inline-block; width: 1em; height: 0.8em; margin: 0 0.3em 0 1em; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="sub">{{ subtitle }}</p>
<div class="top">
<div>
<h2>Inputs</h2>
<table class="kv">
{%- for label, value in inputs %}
<tr><th>{{ label }}</th><td>{{ value }}</td></tr>
{%- endfor %}
</table>
<h2>Totals</h2>
<table class="kv totals">
{%- for label, value in totals %}
<tr><th>{{ label }}</th><td>{{ value }}</td></tr>
{%- endfor %}
</table>
{%- for heading, parts in bars %}
<h2>{{ heading }}</h2>
<div class="stack">{% for p in parts %}<span title="{{ p.name }}: {{ p.value }} ({{ '%.1f' % p.pct }}%)" style="width: {{ '%.2f' % p.pct }}%; background: {{ p.colour }}"></span>{% endfor %}</div>
<table class="breakdown">
{%- for p in parts %}
<tr><td><span class="key" style="background: {{ p.colour }}"></span>{{ p.name }}</td><td class="num">{{ p.value }}</td><td class="num">{{ '%.1f' % p.pct }}%</td></tr>
{%- endfor %}
</table>
{%- endfor %}
{%- if memory %}
<h2>Memory</h2>
{%- for caption, bar in (("what it holds, part by part (not all at once)", memory.parts), ("its peak", memory.peak)) if bar %}
<div class="caption">{{ caption }}</div>
<div class="stack memory">{% for p in bar %}<span title="{{ p.name }}: {{ p.value }}" style="width: {{ '%.2f' % p.pct }}%; background: {{ p.colour }}"></span>{% endfor %}</div>
{%- endfor %}
<table class="breakdown">
{%- for p in memory.parts %}
<tr><td><span class="key" style="background: {{ p.colour }}"></span>{{ p.name }}</td><td class="num">{{ p.value }}</td></tr>
{%- endfor %}
{%- for label, value in memory.notes %}
<tr><td>{{ label }}</td><td class="num">{{ value }}</td></tr>
{%- endfor %}
</table>
{%- endif %}
</div>
<div class="right">
<figure>
<h2>Roofline</h2>
{{ svg }}
<figcaption>One point per GEMM row of the table, area by its time; hover a point for its
module, shape, time and TFLOP/s. Left of the ridge a GEMM is memory-bound, right of it
compute-bound, as the table's bound column says. The costliest:</figcaption>
<ol class="points">
{%- for p in points %}
<li>{{ p.label }}: {{ '%.4f' % p.time_ms }} ms, {{ '%.1f' % p.tflops }} TFLOP/s, {{ '%.1f' % p.intensity }} FLOP/B, {{ p.bound }}-bound</li>
{%- endfor %}
</ol>
</figure>
<h2>Padding advice</h2>
{% if advice -%}
<ol class="advice">
{%- for save, line in advice %}
<li><span class="save">{{ save }}</span> {{ line }}</li>
{%- endfor %}
</ol>
{%- else -%}
<p>none: the predictor finds no padding that saves time</p>
{%- endif %}
</div>
</div>
<h2>Layers</h2>
<p class="legend">time bar, longest row full:<span style="background:{{ compute }}"></span>compute-bound
<span style="background:{{ memory_colour }}"></span>memory-bound<span style="background:#999"></span>no GEMM</p>
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


def render_html(*, title: str, subtitle: str, inputs: Sequence[tuple[str, str]],
                totals: Sequence[tuple[str, str]], bars: Sequence[tuple[str, Sequence[Part]]],
                memory: MemoryBar | None, headers: Sequence[str], numeric: Sequence[bool],
                rows: Sequence[HtmlRow], svg: str, points: Sequence[RooflinePoint],
                advice: Sequence[tuple[str, str]]) -> str:
    """The page. ``numeric`` marks the table's columns of numbers (set right-aligned). ``svg``
    is ``roofline_svg``'s drawing, ``points`` the ones it numbers; every other string is
    escaped."""
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(_TEMPLATE).render(
        title=title, subtitle=subtitle, inputs=inputs, totals=totals, bars=bars, memory=memory,
        headers=headers, numeric=numeric, rows=rows, svg=Markup(svg), points=points,
        advice=advice, compute=BOUND_COLOURS["compute"], memory_colour=BOUND_COLOURS["memory"],
    )


def _inputs(report: ReportRecord) -> list[tuple[str, str]]:
    i = report.question()
    origin = i.device_origin + (f" {i.device_file}" if i.device_file else "")
    rows = [("model", i.model), ("task", i.task), ("batch", i.batch), ("sequence", i.seq),
            ("image", None if i.image_size is None else f"{i.image_size}×{i.image_size}"),
            ("dtype", i.dtype), ("mode", i.mode), ("optimizer", i.optimizer),
            ("attention", i.attention), ("compiled", "torch.compile" if i.compiled else None),
            ("tensors", ", ".join(i.tensors) or None),
            ("device", f"{i.device_name} ({i.device}), from {origin}"),
            ("predictor", f"{i.predictor} v{i.predictor_version}")]
    return [(k, str(v)) for k, v in rows if v is not None]


def to_html(report: ReportRecord, path: str | Path | None = None, depth: int | None = None,
            top: int | None = None, by: str = "module") -> str:
    """The report as one self-contained HTML page: inputs, totals, where the time goes, the
    memory (where the report has it), the roofline (inline SVG, hover titles), the padding
    advice and the table of ``table(depth, top, intervals=True, by=by)`` with a bar per row
    for its time. No script and no network: any browser opens the file. Also written to
    ``path`` when given."""
    headers, body, fmt, rows = table_cells(report, depth, top, intervals=True, by=by)
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
        ("timing", report.timing),
        ("GPU", f"{report.gpu_ms:.3f} ms, the kernels' sum"),
        ("host", f"{report.host_ms:.3f} ms"
         + ("" if report.call is None else f" ({report.call.host})")),
        ("GEMMs", (f"{report.gemm_ms:.3f} ms in {len(report.gemms)} GEMMs, "
                   f"{report.total_flops / 1e9:.2f} GFLOP")),
        ("other ops", f"{report.other_ms:.3f} ms in {len(report.others)} ops"),
        ("achieved", f"{report.achieved_tflops:.1f} TFLOP/s"),
        ("unmodelled ops", f"{len(unmod)}" + (f" ({', '.join(unmod)})" if unmod else "")),
    ]
    text = render_html(
        title=f"{report.model} on {report.device.name} ({report.device.id})",
        subtitle=inputs_line(report.question()).removeprefix("inputs: ")
        + "; predicted, not measured",
        inputs=_inputs(report), totals=totals, bars=time_bars(report),
        memory=memory_bar(report), headers=headers,
        numeric=[any(isinstance(cells[i], (int, float)) and not isinstance(cells[i], bool)
                     for cells in body) for i in range(len(headers))],
        rows=table, svg=roofline_svg(report), points=roofline_points(report)[:LABELLED],
        advice=[(f"saves {a.saving_ms:.3f} ms ({a.saving_pct:.1f}%):", advice_line(a))
                for a in report.advice or ()],
    )
    if path is not None:
        Path(path).write_text(text)
    return text
