"""CostReport.to_html: one self-contained page that parses, holds every row of the table it was
asked for with a time bar each, the totals, the advice and the roofline plot, escapes what
it is handed, and loads nothing."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from html.parser import HTMLParser
from typing import Any

import pytest
from test_advise import AlignmentRoofline
from test_report import gpt2_others, gpt2_sites, make_report

from torch_gemm_cost.report import CostReport
from torch_gemm_cost.report.roofline import roofline_points


class Page(HTMLParser):
    """The layer table's rows (cell texts and bar widths), the text of every element by tag,
    and every attribute that could load something."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.bars: list[str] = []
        self.text: dict[str, list[str]] = {}
        self.loads: list[tuple[str, str]] = []
        self.tags: list[str] = []
        self._stack: list[str] = []
        self._in_layers = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        self.loads += [(k, v or "") for k, v in attrs if k in ("src", "href")]
        if tag == "table" and a.get("class") == "layers":
            self._in_layers = True
        if self._in_layers and tag == "tr" and "thead" not in self._stack:
            self.rows.append([])
        if self._in_layers and tag == "td" and "tbody" in self._stack:
            self.rows[-1].append("")
        if self._in_layers and tag == "span":
            self.bars.append(a.get("style") or "")
        if tag not in ("meta", "br", "img", "input", "link", "path", "use", "rect", "stop"):
            self._stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_layers = False
        while self._stack and self._stack.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        if not self._stack:
            return
        tag = self._stack[-1]
        self.text.setdefault(tag, []).append(data)
        if self._in_layers and tag == "td" and "tbody" in self._stack:
            self.rows[-1][-1] += data


@pytest.fixture(scope="module")
def report() -> CostReport:
    return make_report(gpt2_sites(layers=4), others=gpt2_others(),
                       predictor=AlignmentRoofline())


@pytest.mark.parametrize("depth", [None, 2, 3])
def test_every_row_of_the_table_is_on_the_page(report, depth) -> None:
    text = report.to_html(depth=depth)
    page = Page(text)
    rows = report.module_rows(depth)
    assert len(page.rows) == len(rows) == len(page.bars)
    # numbers right-aligned: GFLOP, time and % total, and the GEMM count at a depth
    layers = text[text.index('<table class="layers">'):]
    assert layers.count('<td class="num">') == (3 if depth is None else 4) * len(rows)
    assert [r[0] for r in page.rows] == [r["module"] for r in rows]
    # the time column as the text table prints it, so the page and the table agree
    column = 5 if depth is None else 4
    assert [r[column] for r in page.rows] == [f"{r['time_ms']:.4f}" for r in rows]
    # the longest row's bar is full; each other is in proportion to its time
    longest = max(r["time_ms"] for r in rows)
    assert page.bars == [f"width: {100 * r['time_ms'] / longest:.1f}%" for r in rows]


def test_totals_advice_and_plot(report, tmp_path) -> None:
    path = tmp_path / "r.html"
    text = report.to_html(path, depth=2, top=2)
    assert path.read_text() == text
    page = Page(text)
    # --top 2: the two costliest rows, then one row folding the other two
    assert [r[0] for r in page.rows][2:] == ["(2 other rows)"]
    assert sum(float(r[4]) for r in page.rows) == pytest.approx(report.total_ms, abs=1e-3)
    th, td = page.text["th"], page.text["td"]
    assert f"{report.total_ms:.3f} ms" in td and "total" in th and "unmodelled ops" in th
    # one list item per suggestion, led by its saving, then the words of the text report
    advice = re.search(r'<ol class="advice">(.*?)</ol>', text, re.DOTALL)
    assert advice is not None and advice.group(1).count("<li>") == len(report.advice) > 0
    best = report.advice[0]
    assert (f'<li><span class="save">saves {best.saving_ms:.3f} ms ({best.saving_pct:.1f}%):'
            f'</span> vocab_size 50257 -&gt; {best.suggested}') in advice.group(1)
    assert "svg" in page.tags and "figure" in page.tags
    assert text.count("<svg") == 1 and "<?xml" not in text


def test_the_page_loads_nothing_and_escapes_what_it_is_handed(report) -> None:
    hostile = replace(report, model="<script>alert(1)</script>",
                      device=replace(report.device, name='A100 "x" & <b>'))
    text = hostile.to_html(depth=1)
    page = Page(text)
    assert "script" not in page.tags and "b" not in page.tags
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&amp; &lt;b&gt;" in text
    # no script, stylesheet, image or font comes from anywhere: the plot's references point
    # inside the page (SVG clip paths and glyphs, "#id")
    assert all(v.startswith("#") for _, v in page.loads), page.loads
    assert all(u.startswith("#") for u in re.findall(r"url\(([^)]*)\)", text))
    assert "<link" not in text and "@import" not in text


def test_the_page_draws_its_roofline_without_matplotlib(report, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    text = report.to_html(depth=1)
    assert "svg" in Page(text).tags
    assert text.count('<circle class="pt ') == len(roofline_points(report)) > 0


def test_a_report_with_no_advice_says_so() -> None:
    r: Any = make_report(gpt2_sites(layers=1))
    page = Page(replace(r, advice=()).to_html(depth=1))
    assert "none: the predictor finds no padding that saves time" in page.text["p"]


def test_the_page_carries_the_intervals_the_text_report_prints() -> None:
    from torch_gemm_cost.predict import default_predictor
    from torch_gemm_cost.predict.price import price_gemms

    predictor = default_predictor()
    sites = gpt2_sites(layers=2)
    hybrid = make_report(sites, others=gpt2_others(), predictor=predictor)
    hybrid = replace(hybrid, uncertainty=price_gemms(sites, hybrid.device, predictor)[1])
    assert hybrid.uncertainty is not None  # the shipped calibration covers the hybrid
    page = Page(hybrid.to_html(depth=2))
    lo, hi = hybrid.interval(0.8)
    assert "80% interval" in page.text["th"]
    assert f"{lo:.3f}-{hi:.3f} ms, its chip was in the fit" in page.text["td"]
    # each layer row's interval cell is the text table's last column
    table = hybrid.table(depth=2, intervals=True).splitlines()[2:]
    assert [r[-2] for r in page.rows] == [line.split()[-1] for line in table]  # then the bar
