"""``torch-gemm-cost estimate``: bad arguments exit 2 with one line; the bundled GPT-2 config prints
its table, JSON rows sum to gemm_ms, several devices give a comparison."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import main

ROOT = Path(__file__).resolve().parents[1]
GPT2 = str(ROOT / "examples" / "gpt2.json")
# a small GPT-2 (2 blocks, 256 tokens) keeps the end-to-end runs to a few seconds
SMALL = ["--hf-config", GPT2, "--batch", "1", "--seq", "256", "--predictor", "roofline"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse's own errors
        rc = int(e.code)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def tiny_gpt2(tmp_path) -> str:
    cfg = json.loads(Path(GPT2).read_text())
    cfg["n_layer"] = 2
    path = tmp_path / "gpt2_tiny.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--hf-config", GPT2, "--batch", "0"], "--batch must be at least 1, got 0"),
        (["--hf-config", GPT2, "--task", "foo"],
         "argument --task: unknown task 'foo'; one of 'auto', 'causal-lm', 'seq2seq',"),
        (["--hf-config", GPT2, "--task", "image-clss"],
         "argument --task: unknown task 'image-clss'; did you mean 'image-cls', 'image-text'?"),
        (["--hf-config", GPT2, "--task", "image-cls"],
         ("--task image-cls does not fit GPT2Config; tasks that fit: causal-lm, seq-cls, "
          "token-cls, pretraining")),
        (["--hf-config", GPT2, "--image-size", "224"],
         "--image-size does not apply to --task causal-lm; it takes --seq"),
        (["--hf-config", GPT2, "--image-size", "0"], "--image-size must be at least 1, got 0"),
        (["--hf-config", GPT2, "--audio-s", "-1"], "--audio-s must be positive, got -1"),
        (["--hf-config", GPT2, "--vae-factor", "8"], "--vae-factor applies to --diffusers-config"),
        (["--hf-config", GPT2, "--diffusers-config", GPT2], "give exactly one model source"),
        (["--diffusers-config", "missing.json"], "--diffusers-config missing.json: no such file"),
        (["--hf-config", GPT2, "--html", "no_dir/r.html"], "--html no_dir/r.html: directory"),
        (["--hf-config", GPT2, "--mode", "training"], "invalid choice: 'training'"),
        (["--hf-config", GPT2, "--mode", "forward"],
         "--mode forward prices the training flags a pkg.module:function builder leaves"),
        (["--hf-config", GPT2, "--batch", "eight"], "invalid int value: 'eight'"),
        ([], "give exactly one model source"),
        (["--hf-config", GPT2, "--depth", "0"], "--depth must be at least 1, got 0"),
        (["--hf-config", "missing.json"], "missing.json: no such file"),
        (["--hf-config", GPT2, "--device", "a100_sxm"], "unknown device 'a100_sxm'"),
        (["--hf-config", GPT2, "--device", "a100_sxm4_80gb", "--dtype", "fp8"],
         "a100_sxm4_80gb has no float8_e4m3fn support"),
        (["--hf-config", GPT2, "--dtype", "fp17"], "unknown dtype 'fp17'"),
        (["--hf-config", GPT2, "--seq", "4096"], "--seq 4096 exceeds the model's 1024 positions"),
        (["no_such_pkg.models:build"], "cannot import 'no_such_pkg.models'"),
        (["json:nothing_here"], "json has no function 'nothing_here'"),
        (["not-a-callable"], "not of the form pkg.module:function"),
        (["json:loads", "--attention", "eager"], "--attention applies to --hf-config only"),
        (["--hf-config", GPT2, "--attention", "flash"], "argument --attention: invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv, message):
    rc, out, err = run(capsys, "estimate", *argv)
    assert rc == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert message in lines[0]
    assert "Traceback" not in err and out == ""


def test_bad_json_names_the_file(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "gpt2",')
    rc, _, err = run(capsys, "estimate", "--hf-config", str(bad))
    assert rc == 2 and "bad.json: not valid JSON" in err


def test_quick_start_prints_the_table(capsys, tiny_gpt2):
    argv = ["--hf-config", tiny_gpt2, "--batch", "1", "--seq", "256", "--predictor", "roofline"]
    rc, out, _ = run(capsys, "estimate", *argv, "--device", "a100_sxm4_80gb", "--dtype", "fp16")
    assert rc == 0
    assert "transformer.h.{0-1}.mlp.c_fc" in out
    assert "1×256×50257×768" in out  # lm_head: 256 tokens × vocab 50257 × hidden 768
    assert "GPT2LMHeadModel on A100 SXM4 80GB" in out and "roofline v1" in out


def test_compiled_prints_its_fused_kernels(capsys, tiny_gpt2, tmp_path):
    argv = ["--hf-config", tiny_gpt2, "--batch", "1", "--seq", "128", "--predictor", "roofline",
            "--device", "a100_sxm4_80gb", "--dtype", "fp16", "--depth", "1"]
    rc, eager, _ = run(capsys, "estimate", *argv, "--json", str(tmp_path / "e.json"))
    assert rc == 0 and "torch.compile" not in eager
    rc, out, _ = run(capsys, "estimate", *argv, "--compiled", "--json", str(tmp_path / "c.json"))
    assert rc == 0 and "torch.compile (inductor):" in out and "fused kernels run" in out
    compiled = json.loads((tmp_path / "c.json").read_text())
    assert compiled["compiled"] and compiled["kernels"]
    assert compiled["other_ms"] < json.loads((tmp_path / "e.json").read_text())["other_ms"]


def test_depth_json_csv_and_plot(capsys, tiny_gpt2, tmp_path):
    pytest.importorskip("matplotlib")
    base = ["--hf-config", tiny_gpt2, "--batch", "1", "--seq", "128", "--predictor", "roofline",
            "--device", "l4", "--dtype", "bf16"]
    rc, out, _ = run(capsys, "estimate", *base, "--depth", "2",
                     "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "r.csv"),
                     "--plot", str(tmp_path / "r.png"))
    assert rc == 0
    assert "GPT2Block × 2" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert sum(r["time_ms"] for r in data["rows"]) == pytest.approx(data["gemm_ms"], rel=1e-12)
    assert data["config"]["vocab_size"] == 50257
    assert len((tmp_path / "r.csv").read_text().splitlines()) == len(data["rows"]) + 1
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_html_page_holds_the_printed_table(capsys, tiny_gpt2, tmp_path):
    from test_report_html import Page

    base = ["--hf-config", tiny_gpt2, "--batch", "1", "--seq", "128", "--predictor", "roofline",
            "--device", "l4", "--depth", "3"]
    rc, out, err = run(capsys, "estimate", *base, "--html", str(tmp_path / "r.html"))
    assert rc == 0 and f"HTML report written to {tmp_path / 'r.html'}" in err
    page = Page((tmp_path / "r.html").read_text())
    table = out.split("\ninputs: ")[0].splitlines()[2:]  # below the header rule
    assert [r[0] for r in page.rows] == [line.split()[0] for line in table]


def test_json_to_stdout(capsys, tiny_gpt2):
    rc, out, _ = run(capsys, "estimate", "--hf-config", tiny_gpt2, "--batch", "1", "--seq", "64",
                     "--predictor", "roofline", "--device", "h100_sxm5_80gb", "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["device"] == "h100_sxm5_80gb" and data["dtype"] == "bfloat16"


def test_timing_option_reaches_the_json(capsys, tiny_gpt2):
    """--timing picks what the total measures; the kernels' sum is the rows' sum either way."""
    totals = {}
    for timing in ("event", "kernel", "graph"):
        rc, out, _ = run(capsys, "estimate", "--hf-config", tiny_gpt2, "--batch", "1", "--seq",
                         "64", "--device", "h100_sxm5_80gb", "--json", "--timing", timing)
        assert rc == 0
        data = json.loads(out)
        assert data["timing"] == timing and data["call"]["timing"] == timing
        totals[timing] = (data["total_ms"], data["gpu_ms"])
    assert totals["kernel"][0] == pytest.approx(totals["kernel"][1], rel=1e-12)
    assert totals["event"][0] > totals["kernel"][0] and totals["graph"][0] > totals["kernel"][0]
    rc, _, err = run(capsys, "estimate", "--hf-config", tiny_gpt2, "--timing", "events")
    assert rc == 2 and "'event'" in err


def test_two_devices_give_a_comparison(capsys, tiny_gpt2):
    rc, out, _ = run(capsys, "estimate", "--hf-config", tiny_gpt2, "--batch", "1", "--seq", "128",
                     "--predictor", "roofline", "--device", "a100_sxm4_80gb", "--device", "l4",
                     "--dtype", "bf16")
    assert rc == 0
    assert "a100_sxm4_80gb" in out and "l4" in out and "speedup" in out and "top layers" in out


def test_callable_model_source(capsys, tmp_path, monkeypatch):
    (tmp_path / "mlp_models.py").write_text(textwrap.dedent("""
        import torch

        def build(batch=4):
            model = torch.nn.Sequential(torch.nn.Linear(1000, 4000), torch.nn.GELU(),
                                        torch.nn.Linear(4000, 1000))
            return model, (torch.ones(batch, 1000),)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    rc, out, _ = run(capsys, "estimate", "mlp_models:build", "--batch", "16",
                     "--predictor", "roofline", "--device", "a100_sxm4_80gb", "--dtype", "fp16")
    assert rc == 0
    # 16 tokens through Linear(1000, 4000): B×M×N×K = 1×16×4000×1000
    assert "1×16×4000×1000" in out and "1×16×1000×4000" in out


def test_mode_forward_prices_the_builders_training_flags(capsys, tmp_path, monkeypatch):
    (tmp_path / "bn_models.py").write_text(textwrap.dedent("""
        import torch

        def build(batch=4):
            model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16))
            return model, (torch.ones(batch, 3, 32, 32),)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    got = {}
    for mode in ("forward", "inference"):
        out = tmp_path / f"{mode}.json"
        rc, _, err = run(capsys, "estimate", "bn_models:build", "--batch", "4", "--mode", mode,
                         "--device", "a100_sxm4_80gb", "--dtype", "bf16", "--json", str(out),
                         "--quiet")
        assert rc == 0, err
        got[mode] = json.loads(out.read_text())
    # the builder's model is in training mode: its batch norm computes the batch's statistics,
    # a pass more than normalizing with the running ones; the API's figure for the same model
    model, args = importlib.import_module("bn_models").build(batch=4)
    api = tgc.estimate(model, args, device="a100_sxm4_80gb", dtype="bf16",
                       mode="forward").to_dict()
    assert got["forward"]["mode"] == "forward" and got["inference"]["mode"] == "inference"
    assert got["forward"]["gpu_ms"] == api["gpu_ms"]
    assert got["forward"]["gpu_ms"] > got["inference"]["gpu_ms"]


def test_devices_lists_peaks_and_bandwidths(capsys):
    rc, out, _ = run(capsys, "devices", "a100_sxm4_80gb")
    assert rc == 0
    [row] = [line.split() for line in out.splitlines() if line.startswith("a100_sxm4_80gb")]
    # fp16 312 TF over 2039 GB/s: ridge 312e12 / 2.039e12 = 153 FLOP/B
    assert "312" in row and "2039" in row and row[-1] == "153"
    rc, _, err = run(capsys, "devices", "zzz")
    assert rc == 2 and "no catalog device matches 'zzz'" in err
    rc, out, _ = run(capsys, "devices", "mi300x", "--json")
    assert json.loads(out)[0]["peak_flops_per_s"]["fp8"] == pytest.approx(2614.9e12)


def test_attention_default_is_what_transformers_builds(capsys, tmp_path):
    # GPT-Neo has no SDPA attention in transformers: asked for, it is an error naming the
    # option that works; by default the model is built as transformers builds it, eager
    path = tmp_path / "neo.json"
    path.write_text(json.dumps({
        "model_type": "gpt_neo", "num_layers": 2, "attention_types": [[["global", "local"], 1]],
        "hidden_size": 64, "num_heads": 4, "vocab_size": 128, "max_position_embeddings": 64,
        "bos_token_id": 0, "eos_token_id": 0}))
    argv = ["--hf-config", str(path), "--batch", "1", "--seq", "16", "--predictor", "roofline",
            "--device", "a100_sxm4_80gb"]
    rc, out, err = run(capsys, "estimate", *argv, "--attention", "sdpa")
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [
        ("torch-gemm-cost estimate: error: --attention sdpa: GPTNeoConfig's model has no SDPA "
         "attention in this transformers; use --attention eager")]
    for extra in ([], ["--attention", "eager"]):
        rc, out, err = run(capsys, "estimate", *argv, *extra, "--json", "-", "--quiet")
        assert rc == 0, err
        # eager attention: the scores are two matmuls, no SDPA record
        ops = {row["op"] for row in json.loads(out)["rows"]}
        assert "matmul" in ops and not ops & {"sdpa_qk", "sdpa_pv"}


def test_host_profile_prices_every_device(capsys, tiny_gpt2, tmp_path):
    # a host section as calibrate --host writes it: 0.05 ms an op (lo 0.04, hi 0.06), a call
    # 0.02 ms, a view 0.003 ms; the same for every --device, where each GPU's own chip would
    # otherwise take the fitted hosts' prior
    def costs(op: float) -> dict[str, float]:
        return {"eager_call_ms": 0.02, "eager_op_ms": op, "eager_view_ms": 0.003}

    profile = tmp_path / "host.json"
    profile.write_text(json.dumps({"host": {"costs": costs(0.05), "lo": costs(0.04),
                                            "hi": costs(0.06), "device": "cuda"}}))
    argv = ["--hf-config", tiny_gpt2, "--batch", "1", "--seq", "256", "--predictor", "roofline",
            "--dtype", "fp16", "--device", "a100_sxm4_80gb", "--device", "l40s"]
    rc, _, _ = run(capsys, "estimate", *argv, "--host", str(profile),
                   "--json", str(tmp_path / "h.json"))
    assert rc == 0
    rows = json.loads((tmp_path / "h.json").read_text())
    assert [r["call"]["host_costs"] for r in rows] == ["measured on cuda (host.json)"] * 2
    # the command line's figure is the library's with the same host
    from torch_gemm_cost.predict import RooflinePredictor
    from torch_gemm_cost.predict.host import HostCosts, HostPrior

    prior = HostPrior(HostCosts.from_dict(costs(0.05)), HostCosts.from_dict(costs(0.04)),
                      HostCosts.from_dict(costs(0.06)), "given")
    from torch_gemm_cost.cli.estimate import build_hf_model

    model, margs, kwargs, _ = build_hf_model(tiny_gpt2, None, 1, 256)
    rep = tgc.estimate(model, margs, kwargs, device="l40s", dtype="fp16",
                       predictor=RooflinePredictor(), host=prior)
    assert rows[1]["call"]["total_ms"] == pytest.approx(rep.total_ms, rel=1e-9)
    # a host profile makes the event total grow with its op cost: 0.05 ms an op over the
    # prior's (about 0.01-0.03 ms) on this host-bound tiny model
    rc, _, _ = run(capsys, "estimate", *argv, "--json", str(tmp_path / "p.json"))
    base = json.loads((tmp_path / "p.json").read_text())
    assert all(h["call"]["host_ms"] > b["call"]["host_ms"] for h, b in zip(rows, base))


def test_host_profile_errors_name_the_fix(capsys, tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"format": "torch_gemm_cost.profile"}))
    rc, _, err = run(capsys, "estimate", *SMALL, "--host", str(empty))
    assert rc == 2 and "no host section" in err and "calibrate --host" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"host": {"costs": {"eager_op_ms": 0.05}}}))
    rc, _, err = run(capsys, "estimate", *SMALL, "--host", str(bad))
    assert rc == 2 and "host section is invalid" in err
    rc, _, err = run(capsys, "estimate", *SMALL, "--host", str(tmp_path / "missing.json"))
    assert rc == 2 and "cannot read it" in err
