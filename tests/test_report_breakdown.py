"""What a report says beyond its per-GEMM rows: the non-GEMM time by op class, the
per-operator table, a training step's phases, ``--top``'s folded row, unique labels, the bound
by the roofline's own quantity, and the question (``inputs``) in every rendering. Reports are
built from hand-made records priced by the pure roofline, as in test_report."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_cli_estimate import GPT2, run
from test_report import GPT2_TYPES, gpt2_others, gpt2_sites, make_report

import torch_gemm_cost as tgc
from torch_gemm_cost import GemmSite, OtherOp, get_device
from torch_gemm_cost.predict import RooflinePredictor
from torch_gemm_cost.predict.price import GemmEstimate, OpEstimate, estimate_gemms
from torch_gemm_cost.records import adamw_ops
from torch_gemm_cost.records.op_classes import TIME_CLASSES, time_class_of
from torch_gemm_cost.report import CostReport
from torch_gemm_cost.report.breakdown import PHASES
from torch_gemm_cost.report.export import INPUT_COLUMNS
from torch_gemm_cost.report.roofline import roofline_points
from torch_gemm_cost.report.text import table_rows


def op(module: str, module_type: str, name: str, op_class: str, phase: str = "forward",
       **kw) -> OtherOp:
    return OtherOp(module, module_type, name, f"{name}_{module}", phase, op_class, "float16",
                   1024, 4096, **kw)


def extra_ops() -> list[OpEstimate]:
    """One op of each kind the class table sorts beyond a norm: a GELU, a mul inside an RMSNorm
    module, the backward of an SDPA call, a view, the optimizer's step."""
    return [
        OpEstimate(op("transformer.h.0.mlp.act", "NewGELUActivation", "aten.gelu",
                      "elementwise"), 0.03),
        OpEstimate(op("transformer.h.0.norm", "LlamaRMSNorm", "aten.mul", "elementwise"), 0.01),
        OpEstimate(op("transformer.h.0.attn", "GPT2Attention",
                      "aten.scaled_dot_product_attention", "softmax", "backward"), 0.2),
        OpEstimate(op("transformer.h.0.attn", "GPT2Attention", "aten.view", "view"), 0.0),
        OpEstimate(adamw_ops(1000, 10)[0], 0.05),
    ]


@pytest.fixture(scope="module")
def report() -> CostReport:
    return make_report(gpt2_sites(layers=2), others=gpt2_others() + extra_ops())


def train_report() -> CostReport:
    """GPT-2's GEMMs (2 blocks) forward, dx and dW; its ops forward and backward; AdamW."""
    fwd = gpt2_sites(layers=2)
    sites = fwd + [replace(s, phase=p, node=f"{s.node}_{p}") for p in ("backward_dx",
                                                                        "backward_dw")
                   for s in fwd]
    others = [o for o in gpt2_others() if o.time_ms is not None][:4]
    others += [OpEstimate(replace(o.op, phase="backward"), 2 * o.time_ms) for o in others]
    others += [OpEstimate(o, 0.01) for o in adamw_ops(10_000, 20)]
    dev = get_device("a100_sxm4_80gb")
    predictor = RooflinePredictor()
    return CostReport("GPT2LMHeadModel", dev, "float16", "train", predictor.name,
                      predictor.version, estimate_gemms(sites, dev, predictor), tuple(others),
                      module_types=GPT2_TYPES, advice=())


def test_time_class_of_each_kind_of_op() -> None:
    assert time_class_of(op("a", "LayerNorm", "aten.native_layer_norm", "norm")) == "normalization"
    # an RMSNorm written as elementwise ops is a norm's time, as its module says
    assert time_class_of(op("n", "LlamaRMSNorm", "aten.rsqrt", "elementwise")) == "normalization"
    assert time_class_of(op("m", "SiLU", "aten.silu", "elementwise")) == "elementwise"
    assert time_class_of(op("m", "Linear", "aten.clone", "copy")) == "copy"
    assert time_class_of(op("e", "Embedding", "aten.embedding", "embedding")) == "embedding"
    assert time_class_of(op("s", "Block", "aten.sum", "reduction")) == "reduction"
    assert time_class_of(op("s", "Attention", "aten._softmax", "softmax")) == "softmax"
    # an SDPA call's record and its backward, which has no attention shape of its own
    sdpa = op("s", "Attention", "aten.scaled_dot_product_attention", "softmax", "backward")
    assert time_class_of(sdpa) == "attention"
    assert time_class_of(adamw_ops(10, 1)[0]) == "optimizer"
    assert time_class_of(op("x", "Module", "aten.foo", "other")) == "other"
    assert set(TIME_CLASSES) >= {"normalization", "softmax", "elementwise", "embedding",
                                 "attention", "copy", "reduction", "optimizer"}


def test_non_gemm_time_by_class_by_hand(report) -> None:
    # norms: 12 blocks × (0.02 + 0.05 ms) = 0.84, and the RMSNorm's mul 0.01 -> 0.85;
    # the GELU 0.03; the SDPA backward 0.2; AdamW 0.05; the view and the unmodelled embedding 0
    want = {"normalization": 0.85, "elementwise": 0.03, "attention": 0.2, "optimizer": 0.05}
    got = report.by_op_class()
    assert got == pytest.approx(want) and list(got) == [k for k in TIME_CLASSES if k in want]
    assert sum(got.values()) == pytest.approx(report.other_ms, rel=1e-12)
    # the same in the per-GEMM table (one row per class), the footer, the JSON and the page
    rows = {r["op"]: r["time_ms"] for r in report.module_rows() if r["module"] == "(non-GEMM ops)"}
    assert rows == pytest.approx({TIME_CLASSES[k]: v for k, v in want.items()}
                                 | {"embedding and gather": 0.0})
    assert ("non-GEMM 1.130 ms by class: normalization 0.850 ms (" in report.footer()
            and "attention kernels 0.200 ms" in report.footer())
    assert json.loads(report.to_json())["by_op_class"] == pytest.approx(want)
    page = report.to_html()
    assert all(f"{TIME_CLASSES[k]}</td><td class=\"num\">{v:.3f} ms" in page
               for k, v in want.items())


def test_by_op_table_by_hand(report) -> None:
    rows = {r["op"]: r for r in report.to_dict()["by_op"]}
    # 2 blocks × c_attn, c_proj, c_fc, c_proj = 8 addmm; one matmul per block; the lm_head
    assert (rows["addmm"]["count"], rows["matmul"]["count"], rows["linear"]["count"]) == (8, 2, 1)
    assert rows["addmm"]["class"] == "GEMM" and rows["aten.native_layer_norm"]["count"] == 24
    assert rows["aten.gelu"]["class"] == "elementwise and activations"
    assert "aten.view" not in rows  # free: no row
    assert rows["aten.embedding"]["time_ms"] == 0.0  # unmodelled, still shown
    assert sum(r["time_ms"] for r in rows.values()) == pytest.approx(report.total_ms, rel=1e-12)
    assert sum(r["flops"] for r in rows.values()) == report.total_flops
    text = report.table(by="op").splitlines()
    assert text[0].split() == ["op", "class", "count", "GFLOP", "time", "ms", "%", "total",
                               "bound"]
    times = [r["time_ms"] for r in report.to_dict()["by_op"]]
    assert text[2].split()[0] == report.to_dict()["by_op"][times.index(max(times))]["op"]
    with pytest.raises(ValueError, match="by='op' has no tree"):
        report.table(depth=2, by="op")
    with pytest.raises(ValueError, match="unknown by 'ops'; did you mean 'op'"):
        report.table(by="ops")


def test_a_training_step_names_each_rows_phase() -> None:
    r = train_report()
    phases = r.by_phase()
    assert list(phases) == list(PHASES)
    assert sum(phases.values()) == pytest.approx(r.total_ms, rel=1e-12)
    # AdamW: 8 kernels × 1 launch × 0.01 ms
    assert phases["optim"] == pytest.approx(0.08)
    # the dx and dW records here are the forward's with another phase: the same times, and
    # dgrad also holds the ops' backward
    assert phases["dgrad"] - sum(2 * o.time_ms for o in gpt2_others()[:4]) == pytest.approx(
        phases["wgrad"], rel=1e-9)
    assert "by phase: fwd " in r.footer() and ", optim 0.080 ms" in r.footer()
    for depth in (None, 1, 2, 3):
        rows = r.module_rows(depth)
        assert {row["phase"] for row in rows} == set(PHASES)
        assert sum(row["time_ms"] for row in rows) == pytest.approx(r.total_ms, rel=1e-12)
    assert r.table(by="op").splitlines()[0].split()[:4] == ["op", "class", "phase", "count"]
    assert {row["phase"] for row in r.to_dict()["by_op"]} == set(PHASES)
    assert {row["phase"] for row in r.to_dict()["rows"]} == {"fwd", "dgrad", "wgrad"}


@pytest.mark.parametrize("by, depth", [("module", None), ("module", 1), ("module", 2),
                                       ("module", 3), ("op", None)])
@pytest.mark.parametrize("mode", ["inference", "train"])
def test_labels_are_unique_and_rows_ranked(report, by, depth, mode) -> None:
    r = report if mode == "inference" else train_report()
    rows = table_rows(r, depth, None, by)
    labels = [row["label"] for row in rows]
    assert len(set(labels)) == len(labels)
    times = [row["time_ms"] for row in rows]
    assert times == sorted(times, reverse=True)
    # what names a row on the page and in the text: its module or op, its op, its phase
    names = [(row["op"], row["class"], row["phase"]) if by == "op" else
             (row["module"], row.get("op_text", ""), row["phase"]) for row in rows]
    assert len(set(names)) == len(names)
    lines = r.table(depth, by=by).splitlines()[2:]
    assert all(line.startswith(n[0] + " ") for line, n in zip(lines, names, strict=True))


def test_two_gemms_of_one_kind_in_one_module_are_numbered() -> None:
    # eager attention: scores = q·kᵀ, then out = p·v, both matmuls of the attention module
    qk = gpt2_sites(layers=1)[1]
    pv = replace(qk, node="pv_0", m=1024, n=64, k=1024)
    r = make_report([qk, pv])
    ops = sorted(row["op_text"] for row in r.module_rows())
    assert ops == ["matmul #1", "matmul #2"]
    table = r.table()
    assert "matmul #1" in table and "matmul #2" in table


@pytest.mark.parametrize("by, depth", [("module", None), ("module", 2), ("op", None)])
def test_top_folds_the_rest_into_one_row(report, by, depth) -> None:
    full = table_rows(report, depth, None, by)
    rows = table_rows(report, depth, 3, by)
    name = "op" if by == "op" else "module"
    assert len(rows) == 4 and rows[-1][name] == f"({len(full) - 3} other rows)"
    assert [r["time_ms"] for r in rows[:3]] == [r["time_ms"] for r in full[:3]]
    assert sum(r["time_ms"] for r in rows) == pytest.approx(report.total_ms, rel=1e-12)
    assert sum(r["flops"] for r in rows) == report.total_flops
    assert rows[-1]["bound"] == "-"
    if by == "op":  # the operators' count is summed: every GEMM and op is counted once
        assert sum(r["count"] for r in rows) == sum(r["count"] for r in full)
    assert f"({len(full) - 3} other rows)" in report.table(depth, top=3, by=by)
    # one row left out is shown as itself
    assert table_rows(report, depth, len(full) - 1, by) == full


def test_bound_is_the_side_of_the_ridge_the_plot_draws() -> None:
    # ViT-B/16 eager attention scores at batch 64: 768 heads × (197 × 64) · (64 × 197) in bf16
    # FLOPs 2·768·197·197·64 = 3,815,178,240; bytes 2·768·(2·197·64 + 197·197) = 98,342,400
    # intensity 38.8 FLOP/B; the A100's ridge in bf16 312e12 / 2.039e12 = 153.0 FLOP/B
    site = GemmSite("vit.layers.0.attention", "ViTAttention", "matmul", "qk", "forward", 768,
                    197, 197, 64, "bfloat16", "bfloat16", False, True, 2, 2, 2, False,
                    2 * 768 * 197 * 197 * 64, 2 * 768 * (2 * 197 * 64 + 197 * 197))
    dev = get_device("a100_sxm4_80gb")
    # a predictor may call it compute-bound (its own tile model); the table says memory
    r = CostReport("ViT", dev, "bfloat16", "inference", "p", "0",
                   (GemmEstimate(site, 0.18, "compute"),))
    assert r.ridge_flops_per_byte == pytest.approx(312e12 / 2.039e12)
    assert site.flops / site.dram_bytes == pytest.approx(38.794, abs=1e-3)
    assert r.module_rows()[0]["bound"] == "memory" == r.rows()[0]["bound"]
    assert r.module_rows(1)[0]["bound"] == "memory"
    assert [p.bound for p in roofline_points(r)] == ["memory"]
    assert r.table().splitlines()[2].split()[-1] == "memory"


def test_a_hand_built_report_states_what_it_knows(report) -> None:
    q = report.question()
    assert (q.model, q.dtype, q.mode, q.device, q.device_origin) == (
        "GPT2LMHeadModel", "float16", "inference", "a100_sxm4_80gb", "catalog")
    assert q.task is None and q.batch is None
    assert report.footer().splitlines()[0] == ("inputs: GPT2LMHeadModel, float16, inference, "
                                               "device a100_sxm4_80gb (from the catalog), "
                                               "predictor roofline v1")


def test_estimate_fills_the_inputs_and_every_rendering_states_them() -> None:
    model = torch.nn.Sequential(torch.nn.Embedding(100, 64), torch.nn.Linear(64, 64))
    ids = torch.ones(4, 32, dtype=torch.long)
    r = tgc.estimate(model, (ids,), device="l4", dtype="fp16", mode="train", optimizer="adamw")
    q = r.question()
    assert (q.batch, q.seq, q.image_size, q.optimizer) == (4, 32, None, "adamw")
    assert q.tensors == ("arg0 4×32 int64",) and q.device_origin == "catalog"
    assert q.predictor == r.predictor and q.predictor_version == r.predictor_version
    assert json.loads(r.to_json())["inputs"]["seq"] == 32
    line = r.footer().splitlines()[0]
    assert line.startswith("inputs: Sequential, batch 4, seq 32, float16, train, optimizer "
                           "adamw, event timing, device l4 (from the catalog), predictor ")
    first = next(csv.DictReader(io.StringIO(r.to_csv())))
    assert list(first)[:len(INPUT_COLUMNS)] == list(INPUT_COLUMNS)
    assert (first["batch_size"], first["seq_len"], first["device"], first["task"]) == (
        "4", "32", "l4", "")
    page = r.to_html()
    assert "<th>sequence</th><td>32</td>" in page and "<th>task</th>" not in page


def test_the_command_line_adds_its_task_and_prints_by_op(capsys, tmp_path) -> None:
    config = {**json.loads(Path(GPT2).read_text()), "n_layer": 2}
    (tmp_path / "gpt2.json").write_text(json.dumps(config))
    base = ["estimate", "--hf-config", str(tmp_path / "gpt2.json"), "--batch", "2", "--seq", "64", "--predictor",
            "roofline", "--device", "l4", "-q"]
    rc, out, err = run(capsys, *base, "--by", "op", "--top", "4")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["op", "class", "count"]
    assert lines[6].startswith("(") and " other rows)" in lines[6]  # 4 rows, then the fold
    assert lines[7].startswith("inputs: GPT2LMHeadModel, task causal-lm, batch 2, seq 64, ")
    rc, out, err = run(capsys, *base, "--csv")
    first = next(csv.DictReader(io.StringIO(out)))
    assert (first["task"], first["batch_size"], first["seq_len"]) == ("causal-lm", "2", "64")
    rc, _, err = run(capsys, *base, "--by", "op", "--depth", "2")
    assert rc == 2 and "--depth 2 cuts the module tree; --by op has none" in err
