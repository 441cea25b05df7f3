"""CostReport: hand-worked totals, invariants (rows sum to totals at every depth), golden tables,
exports and the roofline plot. Reports are built from hand-made GEMM records, so these tests do not
depend on capture; the predictor is the pure roofline, so they do not move when weights change."""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from torch_gemm_cost import GemmSite, OtherOp, get_device
from torch_gemm_cost.advise import padding_advice
from torch_gemm_cost.capture.core import module_types_of
from torch_gemm_cost.predict import RooflinePredictor
from torch_gemm_cost.predict.price import GemmEstimate, OpEstimate, estimate_gemms, total_ms
from torch_gemm_cost.records import alignment_bytes
from torch_gemm_cost.report import CostReport, format_comparison

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TORCH_GEMM_COST_UPDATE_GOLDEN") == "1"


def linear_site(module: str, m: int, n: int, k: int, *, op: str = "addmm", phase: str = "forward",
                module_type: str = "Conv1D", dtype: str = "float16") -> GemmSite:
    """y = x·Wᵀ: A is (m, k) row-major, W is (n, k)."""
    eb = 2 if dtype in ("float16", "bfloat16") else 4
    return GemmSite(
        module=module, module_type=module_type, op=op, node=f"{op}_{module}", phase=phase,
        batch=1, m=m, n=n, k=k, dtype=dtype, out_dtype=dtype, a_transposed=False,
        b_transposed=True, a_align_bytes=alignment_bytes(k, eb), b_align_bytes=alignment_bytes(k, eb),
        c_align_bytes=alignment_bytes(n, eb), bias=op != "linear", flops=2 * m * n * k,
        dram_bytes=eb * (m * k + n * k + m * n),
    )


def gpt2_sites(tokens: int = 8192, layers: int = 12, vocab: int = 50257) -> list[GemmSite]:
    """The GEMMs of GPT-2 small (hidden 768, 12 heads of 64), attention bmm included."""
    sites = []
    for i in range(layers):
        p = f"transformer.h.{i}"
        sites += [
            linear_site(f"{p}.attn.c_attn", tokens, 2304, 768),
            GemmSite(f"{p}.attn", "GPT2Attention", "matmul", f"qk_{i}", "forward", 8 * 12,
                     tokens // 8, tokens // 8, 64, "float16", "float16", False, False, 16, 16, 16,
                     False, 2 * 96 * 1024 * 1024 * 64, 2 * 96 * (1024 * 64 * 2 + 1024 * 1024)),
            linear_site(f"{p}.attn.c_proj", tokens, 768, 768),
            linear_site(f"{p}.mlp.c_fc", tokens, 3072, 768),
            linear_site(f"{p}.mlp.c_proj", tokens, 768, 3072),
        ]
    sites.append(linear_site("lm_head", tokens, vocab, 768, op="linear", module_type="Linear"))
    return sites


GPT2_TYPES = {  # in named_modules() order
    "": "GPT2LMHeadModel", "transformer": "GPT2Model", "transformer.wte": "Embedding",
    "transformer.h": "ModuleList",
    **{
        f"transformer.h.{i}{sub}": kind
        for i in range(12)
        for sub, kind in (("", "GPT2Block"), (".attn", "GPT2Attention"), (".mlp", "GPT2MLP"))
    },
    "lm_head": "Linear",
}


def make_report(sites, predictor=None, device="a100_sxm4_80gb", others=(), dtype="float16",
                config=None) -> CostReport:
    """A report as estimate() makes one: estimates of ``sites`` by ``predictor`` (the
    roofline by default) and its padding advice."""
    predictor = predictor or RooflinePredictor()
    dev = get_device(device)
    gemms = estimate_gemms(sites, dev, predictor)
    config = config if config is not None else {"vocab_size": 50257, "hidden_size": 768,
                                                "intermediate_size": 3072}
    advice = padding_advice(gemms, predictor, dev, model_ms=total_ms(gemms, tuple(others)),
                            config=config)
    return CostReport(
        "GPT2LMHeadModel", dev, dtype, "inference", predictor.name, predictor.version, gemms,
        tuple(others), config=config, module_types=GPT2_TYPES, advice=tuple(advice),
    )


def gpt2_others() -> list[OpEstimate]:
    ops = []
    for i in range(12):
        for name, t in (("ln_1", 0.02), ("mlp.act", 0.05)):
            op = OtherOp(f"transformer.h.{i}.{name}", "LayerNorm", "aten.native_layer_norm",
                         f"{name}_{i}", "forward", "norm", "float16", 8192 * 768, 4 * 8192 * 768)
            ops.append(OpEstimate(op, t))
    emb = OtherOp("transformer.wte", "Embedding", "aten.embedding", "emb", "forward",
                  "embedding", "float16", 8192 * 768, 2 * 8192 * 768)
    ops.append(OpEstimate(emb, None))
    return ops


@pytest.fixture(scope="module")
def report() -> CostReport:
    return make_report(gpt2_sites(), others=gpt2_others())


def check_golden(name: str, text: str) -> None:
    """Compare with tests/golden/<name>; TORCH_GEMM_COST_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"golden file {path} missing; run with TORCH_GEMM_COST_UPDATE_GOLDEN=1")
        path.parent.mkdir(exist_ok=True)
        path.write_text(text + "\n")
    assert text + "\n" == path.read_text()


def test_lm_head_roofline_by_hand(report):
    # lm_head: 2·8192·50257·768 = 632,379,408,384 FLOP / 312e12 FLOP/s = 2.026857 ms (compute)
    # bytes 2·(8192·768 + 50257·768 + 8192·50257) = 913,188,352 B / 2.039e12 B/s = 0.44786 ms
    g = report.gemms[-1]
    assert g.site.module == "lm_head"
    assert g.time_ms == pytest.approx(2.026857, rel=1e-6)
    assert g.bound == "compute"
    # achieved TFLOP/s = GEMM FLOPs / total time
    assert report.achieved_tflops == pytest.approx(
        report.total_flops / (report.total_ms * 1e-3) / 1e12
    )


@pytest.mark.parametrize("depth", [None, 1, 2, 3, 4, 10])
def test_rows_sum_to_totals_at_every_depth(report, depth):
    rows = report.module_rows(depth)
    assert sum(r["time_ms"] for r in rows) == pytest.approx(report.total_ms, rel=1e-12)
    assert sum(r["flops"] for r in rows) == report.total_flops
    assert sum(r["gemms"] for r in rows) == len(report.gemms)


def test_json_rows_sum_to_gemm_ms(report):
    data = json.loads(report.to_json())
    assert sum(r["time_ms"] for r in data["rows"]) == pytest.approx(data["gemm_ms"], rel=1e-12)
    assert data["total_ms"] == pytest.approx(data["gemm_ms"] + data["other_ms"])
    assert data["unmodelled_ops"] == 1
    assert data["padding_advice"] == []  # the roofline never rewards padding


def test_depth_two_collapses_blocks(report):
    rows = report.module_rows(2)
    blocks = [r for r in rows if r["module"] == "transformer.h.{0-11}"]
    assert len(blocks) == 1 and blocks[0]["count"] == 12
    assert blocks[0]["module_type"] == "GPT2Block"
    # 12 blocks × (5 GEMMs) and 12 × (0.02 + 0.05 ms) of other ops
    assert blocks[0]["gemms"] == 60
    assert blocks[0]["other_ms"] == pytest.approx(12 * 0.07)
    assert "GPT2Block × 12" in report.table(depth=2)


def test_blocks_that_differ_are_not_collapsed():
    sites = gpt2_sites(layers=3)
    sites[5] = linear_site("transformer.h.1.attn.c_attn", 8192, 2304, 1024)  # block 1 differs
    rows = make_report(sites).module_rows(2)
    names = [r["module"] for r in rows]
    assert "transformer.h.1" in names
    assert "transformer.h.{0,2}" in names  # blocks 0 and 2 still match, named by index


def test_top_k_is_sorted_and_bounded(report):
    top = report.top(3)
    assert len(top) == 3
    assert [r["time_ms"] for r in top] == sorted((r["time_ms"] for r in top), reverse=True)
    assert top[0]["module"] == "lm_head"


def test_golden_table(report):
    check_golden("gpt2_sites_roofline.txt", str(report))


def test_golden_table_depth2(report):
    check_golden("gpt2_sites_roofline_depth2.txt", report.table(depth=2) + "\n" + report.footer())


def test_footer_names_everything(report):
    f = report.footer()
    for part in ("A100 SXM4 80GB", "float16", "roofline v1", "1 unmodelled ops (aten.embedding)",
                 "TFLOP/s"):
        assert part in f


def test_csv_round_trip(report):
    rows = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert len(rows) == len(report.gemms)
    assert sum(float(r["time_ms"]) for r in rows) == pytest.approx(report.gemm_ms, rel=1e-9)


def test_to_dataframe(report):
    pd = pytest.importorskip("pandas")
    df = report.to_dataframe()
    assert isinstance(df, pd.DataFrame) and len(df) == len(report.gemms)


def test_explain_reports_the_stages(report):
    e = report.explain("lm_head")
    assert e.site.n == 50257
    assert e.details["compute_ms"] == pytest.approx(2.026857, rel=1e-6)
    assert "50257" in str(e)
    with pytest.raises(ValueError, match="lm_hed"):
        report.explain("lm_hed")
    with pytest.raises(ValueError, match="out of range"):
        report.explain(10_000)


def test_bad_depth_is_rejected(report):
    with pytest.raises(ValueError, match="got 0"):
        report.table(depth=0)


def test_plot_roofline_writes_png(report, tmp_path):
    pytest.importorskip("matplotlib")
    out = report.plot_roofline(tmp_path / "roof.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_comparison_side_by_side():
    a = make_report(gpt2_sites(layers=2))
    h = make_report(gpt2_sites(layers=2), device="h100_sxm5_80gb")
    text = format_comparison([a, h], top=3)
    assert "a100_sxm4_80gb" in text and "h100_sxm5_80gb" in text
    # lm_head is compute-bound on both: speedup = 989.4 / 312 TFLOP/s on that row alone
    lm_a = next(r for r in a.module_rows() if r["module"] == "lm_head")["time_ms"]
    lm_h = next(r for r in h.module_rows() if r["module"] == "lm_head")["time_ms"]
    assert lm_a / lm_h == pytest.approx(989.4 / 312, rel=1e-9)
    assert f"{lm_h:.4f}" in text


def test_module_types_of_names_every_module():
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU())
    assert module_types_of(net) == {"": "Sequential", "0": "Linear", "1": "ReLU"}


def test_a_report_renders_what_it_is_handed():
    site = linear_site("fc", 64, 64, 64)
    r = CostReport("M", get_device("l4"), "float16", "inference", "mystery", "0",
                   (GemmEstimate(site, 0.5, "memory"),))
    assert r.total_ms == 0.5 and r.to_dict()["rows"][0]["time_ms"] == 0.5
    assert "padding advice" not in str(r) and "padding_advice" not in r.to_dict()
    with pytest.raises(ValueError, match="holds no padding advice"):
        r.padding_advice()
    assert r.explain(0).details == {}  # no details handed, none made up
    r = replace(r, advice=())
    assert "padding advice: none" in str(r) and r.to_dict()["padding_advice"] == []


def test_rows_of_free_ops_are_left_out():
    view = OtherOp("transformer.drop", "Dropout", "aten.view", "view", "forward", "view",
                   "float16", 10, 0)
    r = make_report(gpt2_sites(layers=1), others=[OpEstimate(view, 0.0)])
    assert "transformer.drop" not in [row["module"] for row in r.module_rows(2)]
    unmodelled = make_report(gpt2_sites(layers=1), others=[OpEstimate(view, None)])
    assert "transformer.drop" in [row["module"] for row in unmodelled.module_rows(2)]


def test_comparison_prints_side_by_side():
    from torch_gemm_cost.report import Comparison

    reports = Comparison([make_report(gpt2_sites(layers=1)),
                          make_report(gpt2_sites(layers=1), device="l4")])
    assert str(reports) == format_comparison(list(reports))
    assert reports[1].device.id == "l4"
