"""The roofline as inline SVG for the HTML page: log-log axes, the roof and its ridge, one
circle per GEMM row (``roofline.roofline_points``; area ∝ time, colour by bound), each with a
``<title>`` a browser shows on hover (module, shape, time, TFLOP/s), the costliest named.
Plain SVG: no script, no font or file loaded, nothing matplotlib draws."""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape

from .record import ReportRecord
from .roofline import LABELLED, RooflinePoint, roofline_points

__all__ = ["BOUND_COLOURS", "roofline_svg"]

BOUND_COLOURS = {"compute": "#4878b0", "memory": "#d8873a"}
_W, _H = 640, 400  # the drawing, in px
_LEFT, _RIGHT, _TOP, _BOTTOM = 58, 16, 14, 44  # margins around the plot area


def _decades(lo: float, hi: float) -> tuple[int, int]:
    return math.floor(math.log10(lo)), math.ceil(math.log10(hi))


def _tick(e: int) -> str:
    return f"{10.0 ** e:g}"


def roofline_svg(report: ReportRecord) -> str:
    """The report's roofline as one ``<svg>`` element."""
    ridge = report.ridge_flops_per_byte
    bw = report.device.dram_bw_bytes_per_s
    peak_t = ridge * bw / 1e12  # TFLOP/s
    pts = roofline_points(report)
    x0, x1 = _decades(min([p.intensity for p in pts] + [ridge]) / 2,
                      max([p.intensity for p in pts] + [ridge]) * 2)
    roof_lo = 10.0 ** x0 * bw / 1e12
    y0, y1 = _decades(min([p.tflops for p in pts] + [roof_lo, peak_t]) / 1.5, peak_t * 1.5)
    pw, ph = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(v: float) -> float:
        return _LEFT + pw * (math.log10(v) - x0) / (x1 - x0)

    def y(v: float) -> float:
        return _TOP + ph * (1 - (math.log10(v) - y0) / (y1 - y0))

    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" class="roofline" width="{_W}" '
            f'height="{_H}" viewBox="0 0 {_W} {_H}" font-family="system-ui, sans-serif" '
            'font-size="11">'),
           (f'<rect x="{_LEFT}" y="{_TOP}" width="{pw}" height="{ph}" fill="#fff" '
            'stroke="#999"/>')]
    for e in range(x0, x1 + 1):
        out.append(f'<line x1="{x(10.0 ** e):.1f}" y1="{_TOP}" x2="{x(10.0 ** e):.1f}" '
                   f'y2="{_TOP + ph}" stroke="#eee"/>'
                   f'<text x="{x(10.0 ** e):.1f}" y="{_TOP + ph + 14}" '
                   f'text-anchor="middle">{_tick(e)}</text>')
    for e in range(y0, y1 + 1):
        out.append(f'<line x1="{_LEFT}" y1="{y(10.0 ** e):.1f}" x2="{_LEFT + pw}" '
                   f'y2="{y(10.0 ** e):.1f}" stroke="#eee"/>'
                   f'<text x="{_LEFT - 4}" y="{y(10.0 ** e) + 4:.1f}" '
                   f'text-anchor="end">{_tick(e)}</text>')
    lo, hi = 10.0 ** x0, 10.0 ** x1
    out.append(f'<polyline class="roof" fill="none" stroke="#222" stroke-width="1.5" '
               f'points="{x(lo):.1f},{y(lo * bw / 1e12):.1f} {x(ridge):.1f},{y(peak_t):.1f} '
               f'{x(hi):.1f},{y(peak_t):.1f}"/>')
    out.append(f'<line id="ridge" x1="{x(ridge):.1f}" y1="{_TOP}" x2="{x(ridge):.1f}" '
               f'y2="{_TOP + ph}" stroke="#888" stroke-dasharray="4 3"/>'
               f'<text x="{x(ridge) + 4:.1f}" y="{_TOP + 12}" fill="#555">ridge {ridge:.0f} '
               f'FLOP/B, peak {peak_t:.0f} TFLOP/s</text>')
    tmax = max((p.time_ms for p in pts), default=1.0)
    for p in reversed(pts):  # the costliest drawn last, on top
        out.append(_circle(p, x(p.intensity), y(p.tflops), 3 + 11 * math.sqrt(p.time_ms / tmax)))
    out += _labels(pts[:LABELLED], x, y)
    out.append(f'<text x="{_LEFT + pw / 2:.1f}" y="{_H - 8}" text-anchor="middle">arithmetic '
               'intensity (FLOP per compulsory DRAM byte)</text>'
               f'<text transform="translate(14 {_TOP + ph / 2:.1f}) rotate(-90)" '
               'text-anchor="middle">predicted TFLOP/s</text>')
    for i, (bound, colour) in enumerate(BOUND_COLOURS.items()):
        ly = _TOP + ph - 30 + 16 * i
        out.append(f'<circle cx="{_LEFT + pw - 120}" cy="{ly}" r="5" fill="{colour}" '
                   f'fill-opacity="0.6"/><text x="{_LEFT + pw - 110}" y="{ly + 4}">'
                   f'{bound}-bound</text>')
    out.append("</svg>")
    return "\n".join(out)


def _circle(p: RooflinePoint, cx: float, cy: float, r: float) -> str:
    shape = "×".join(map(str, p.shape))
    title = (f"{p.label}\n{shape}{f' (× {p.count})' if p.count > 1 else ''}\n"
             f"{p.time_ms:.4f} ms, {p.tflops:.1f} TFLOP/s, {p.intensity:.1f} FLOP/B, "
             f"{p.bound}-bound")
    return (f'<circle class="pt {p.bound}" cx="{cx:.1f}" cy="{cy:.1f}" r="{r:.1f}" '
            f'fill="{BOUND_COLOURS[p.bound]}" fill-opacity="0.55" stroke="#333" '
            f'stroke-width="0.5"><title>{escape(title)}</title></circle>')


def _labels(pts: list[RooflinePoint], x: Callable[[float], float],
            y: Callable[[float], float]) -> list[str]:
    """The costliest points' numbers (their place in the page's key, 1 the costliest), one
    label for points drawn within a few pixels of each other (``1,2``)."""
    spots: list[tuple[float, float, list[int]]] = []
    for n, p in enumerate(pts, 1):
        px, py = x(p.intensity), y(p.tflops)
        near = next((s for s in spots if abs(s[0] - px) < 6 and abs(s[1] - py) < 6), None)
        if near is None:
            spots.append((px, py, [n]))
        else:
            near[2].append(n)
    return [f'<text class="name" x="{px + 8:.1f}" y="{py - 6:.1f}" font-weight="bold" '
            f'fill="#222">{",".join(map(str, ns))}</text>' for px, py, ns in spots]
