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


# ---------------------------------------------------------------- the roofline, the breakdowns

CIRCLE = re.compile(r'<circle class="pt (\w+)" cx="([\d.]+)" cy="([\d.]+)" r="[\d.]+"[^>]*>'
                    r"<title>(.*?)</title></circle>", re.DOTALL)


def vit_report() -> CostReport:
    """ViT-B/16's block GEMMs at batch 64 with eager attention, priced by the shipped hybrid:
    its attention matmuls (~39 FLOP/B) sit left of the A100's bf16 ridge (153 FLOP/B)."""
    from test_report import linear_site

    from torch_gemm_cost.predict import default_predictor
    from torch_gemm_cost.records import GemmSite

    tokens = 64 * 197
    sites = []
    for i in range(2):
        p = f"vit.layers.{i}"
        sites += [linear_site(f"{p}.attention.q_proj", tokens, 768, 768, dtype="bfloat16"),
                  GemmSite(f"{p}.attention", "ViTAttention", "matmul", f"qk{i}", "forward", 768,
                           197, 197, 64, "bfloat16", "bfloat16", False, True, 2, 2, 2, False,
                           2 * 768 * 197 * 197 * 64, 2 * 768 * (2 * 197 * 64 + 197 * 197)),
                  GemmSite(f"{p}.attention", "ViTAttention", "matmul", f"pv{i}", "forward", 768,
                           197, 64, 197, "bfloat16", "bfloat16", False, False, 2, 16, 16, False,
                           2 * 768 * 197 * 64 * 197, 2 * 768 * (2 * 197 * 64 + 197 * 197)),
                  linear_site(f"{p}.mlp.fc1", tokens, 3072, 768, dtype="bfloat16")]
    return replace(make_report(sites, predictor=default_predictor(), dtype="bfloat16"),
                   model="ViTForImageClassification")


def test_the_plot_and_the_table_say_the_same_bound() -> None:
    import html

    r = vit_report()
    text = r.to_html()
    ridge_x = float(re.search(r'<line id="ridge" x1="([\d.]+)"', text).group(1))
    circles = CIRCLE.findall(text)
    rows = {row["label"]: row for row in r.module_rows()}
    assert len(circles) == len(rows) == 4  # q_proj, matmul #1, matmul #2, fc1 (2 blocks each)
    for bound, cx, _, title in circles:
        label = html.unescape(title).splitlines()[0]
        # the point's side of the drawn ridge, its class, its row's bound: one answer
        assert bound == ("compute" if float(cx) >= ridge_x else "memory") == rows[label]["bound"]
    assert {rows[k]["bound"] for k in rows if "matmul" in k} == {"memory"}
    assert {rows[k]["bound"] for k in rows if "matmul" not in k} == {"compute"}


def test_every_point_says_what_it_is_on_hover() -> None:
    import html

    r = vit_report()
    for (_, _, _, title), p in zip(sorted(CIRCLE.findall(r.to_html()),
                                          key=lambda c: c[3]),
                                   sorted(roofline_points(r), key=lambda p: html.escape(p.label)),
                                   strict=True):
        lines = html.unescape(title).splitlines()
        assert lines[0] == p.label and lines[1].startswith("×".join(map(str, p.shape)))
        assert f"{p.time_ms:.4f} ms, {p.tflops:.1f} TFLOP/s" in lines[2]
    # the costliest named on the plot and listed under it
    key = re.search(r'<ol class="points">(.*?)</ol>', r.to_html(), re.DOTALL).group(1)
    assert key.count("<li>") == min(5, len(roofline_points(r)))
    assert html.unescape(key).split("<li>")[1].startswith(roofline_points(r)[0].label)


def test_where_the_time_goes_sums_to_the_total(report) -> None:
    text = report.to_html()
    part = re.search(r"<h2>Where the time goes</h2>(.*?)</table>", text, re.DOTALL).group(1)
    ms = [float(v) for v in re.findall(r'<td class="num">([\d.]+) ms</td>', part)]
    # GEMMs, then the norms (12 × 0.07 ms); the unmodelled embedding has no time to show
    assert ms == pytest.approx([report.gemm_ms, 0.84], abs=1e-3)
    assert sum(ms) == pytest.approx(report.total_ms, abs=1e-3)
    assert "GEMMs</td>" in part and "normalization</td>" in part


def test_a_memory_section_is_drawn_where_the_report_has_one(report) -> None:
    from dataclasses import replace

    from torch_gemm_cost.records.memory import MemoryEstimate

    assert "<h2>Memory</h2>" not in report.to_html()
    gib = 1 << 30
    # a training step's memory (records.memory): the optimizer's 12 GiB hold its 4 GiB of fp32
    # master weights
    memory = MemoryEstimate(mode="train", optimizer="adamw", mixed_precision=True,
                            weights_bytes=2 * gib, grads_bytes=2 * gib,
                            optimizer_bytes=12 * gib, master_weights_bytes=4 * gib,
                            activations_bytes=10 * gib, kv_cache_bytes=0, peak_bytes=24 * gib,
                            device_bytes=80 * gib, batch=8, max_batch=40,
                            checkpointed_modules=0)
    r = replace(report, memory=memory)
    text = r.to_html()
    section = text[text.index("<h2>Memory</h2>"):]
    section = section[:section.index("</table>")]
    # held: 2 + 2 + 4 + 10 + (12 - 4) = 26 GiB of 80, 54 free; the empty KV cache left out
    for name, value in (("weights", "2.00"), ("grads", "2.00"), ("master weights", "4.00"),
                        ("activations", "10.00"), ("optimizer states", "8.00"),
                        ("free of 80.0 GiB", "54.00")):
        assert f"{name}</td><td class=\"num\">{value} GiB" in section
    assert "kv cache" not in section
    for name, value in (("peak", "24.00 GiB"), ("device", "80.00 GiB"), ("fits", "True"),
                        ("max batch", "40")):
        assert f"<td>{name}</td><td class=\"num\">{value}</td>" in section
    bars = re.findall(r'<div class="stack memory">(.*?)</div>', section)
    assert len(bars) == 2  # what it holds, and its peak: 24 of 80 GiB
    assert [float(w) for w in re.findall(r"width: ([\d.]+)%", bars[1])] == [30.0, 70.0]
    for bar in bars:
        assert sum(float(w) for w in re.findall(r"width: ([\d.]+)%", bar)) == pytest.approx(
            100.0, abs=0.05)


def test_the_page_renders_in_a_browser(tmp_path) -> None:
    """Headless Chromium draws the page: a screenshot of the window's size, not blank, with
    no band of empty rows above the layer table."""
    import shutil
    import subprocess

    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                   "google-chrome"))), None)
    if browser is None:
        pytest.skip("no headless browser: install Debian's chromium (apt-get install -y "
                    "chromium) to render the page")
    image = pytest.importorskip("PIL.Image", reason="the screenshot check reads PNGs with Pillow")
    page, shot = tmp_path / "r.html", tmp_path / "r.png"
    vit_report().to_html(page)
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
                           f"--screenshot={shot}", "--window-size=1400,1000", page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    png = image.open(shot).convert("L")
    assert png.size == (1400, 1000)
    # rows of one shade only are blank; the longest run of them is a gap in the layout
    pixels = png.load()
    blank = [len({pixels[x, y] for x in range(0, 1400, 4)}) == 1 for y in range(1000)]
    runs, run = [], 0
    for b in blank:
        run = run + 1 if b else 0
        runs.append(run)
    assert max(runs) < 120, f"{max(runs)} blank rows in a row"
    assert sum(blank) < 500  # most of the window is drawn on
