"""Sweeps: a tiny grid on the local pool (each row equal to its command's own figures, bad
combinations in the error column), the YAML's errors naming the nearest good option, the
Pareto front, and Ray's local mode where Ray is installed."""

from __future__ import annotations

import csv
import json

import pytest

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import main
from torch_gemm_cost.sweep import pareto_front, read_sweep, run_sweep
from torch_gemm_cost.sweep.spec import parse_sweep

pytest.importorskip("transformers")
pytest.importorskip("yaml")

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": False}


@pytest.fixture()
def config(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def test_a_tiny_llm_grid_on_the_local_pool(tmp_path, config, capsys):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"kind: llm\nhf-config: {config}\ndevice: [h100_sxm5_80gb, l4]\n"
                     "batch: [1, 8]\nprompt: 256\ngen: 32\ntp: [1, 3]\n")
    out = tmp_path / "rows.csv"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "2"]) == 0
    rows = list(csv.DictReader(out.open()))
    # 2 devices x 2 batches x 2 tp = 8 combinations, in the file's order
    assert len(rows) == 8
    assert [(r["device"], r["batch"], r["tp"]) for r in rows[:3]] == [
        ("h100_sxm5_80gb", "1", "1"), ("h100_sxm5_80gb", "1", "3"), ("h100_sxm5_80gb", "8", "1")]
    # tp=3 splits no 8 heads: the plan's own message, in each such row
    bad = [r for r in rows if r["tp"] == "3"]
    assert len(bad) == 4 and all("nearest good tp: 2 or 4" in r["error"] for r in bad)
    assert all(r["ttft_mean_ms"] == "" for r in bad)
    # every good row is the command's own figure
    for r in rows:
        if r["tp"] != "1":
            continue
        plan = tgc.plan_llm(TINY, device=r["device"], dtype="bf16", prompt=256, gen=32,
                            batches=[int(r["batch"])])
        assert float(r["tpot_ms"]) == pytest.approx(plan.rows[0].tpot_ms, rel=1e-9)
        assert float(r["ttft_mean_ms"]) == pytest.approx(plan.rows[0].ttft_mean_ms, rel=1e-9)
        assert r["error"] == ""
    assert "8 rows (4 with an error)" in capsys.readouterr().err


def test_an_estimate_grid_shares_one_capture_across_devices(config):
    spec = parse_sweep({"kind": "estimate", "hf-config": config, "device": ["a100_sxm4_80gb",
                        "h100_sxm5_80gb"], "batch": [1, 2], "seq": 64, "dtype": "bf16"})
    rows = run_sweep(spec, workers=1)
    # the file's order: device, then batch
    assert [(r["device"], r["batch"]) for r in rows] == [
        ("a100_sxm4_80gb", 1), ("a100_sxm4_80gb", 2), ("h100_sxm5_80gb", 1),
        ("h100_sxm5_80gb", 2)]
    assert all(r["error"] == "" and r["total_ms"] > 0 for r in rows)
    # the H100 is the faster of the two, and batch 2 costs more than batch 1
    assert rows[2]["total_ms"] < rows[0]["total_ms"] < rows[1]["total_ms"]
    # each row is the command's own figure: estimate with both devices, one capture
    reports = tgc.compare(*_built(config, 1, 64), devices=["a100_sxm4_80gb", "h100_sxm5_80gb"],
                          dtypes=["bfloat16"])
    assert [rows[0]["total_ms"], rows[2]["total_ms"]] == pytest.approx(
        [r.total_ms for r in reports], rel=1e-9)


def _built(config, batch, seq):
    from torch_gemm_cost.cli.estimate import build_hf_model

    model, args, kwargs, _ = build_hf_model(config, None, batch, seq)
    return model, args, kwargs


def test_yaml_errors_name_the_bad_option_and_the_nearest_good_one(tmp_path, config):
    with pytest.raises(ValueError, match="unknown option of llm 'prompts'; did you mean "
                                         "'prompt'"):
        parse_sweep({"kind": "llm", "hf-config": config, "prompts": [1, 2]})
    with pytest.raises(ValueError, match="unknown sweep kind 'lmm'; did you mean 'llm'"):
        parse_sweep({"kind": "lmm"})
    with pytest.raises(ValueError, match="no 'kind'"):
        parse_sweep({"batch": 1})
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: llm\nbatch: [1, 2\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        read_sweep(bad)
    # a value the command refuses is the error of its rows, in the parser's own words
    rows = run_sweep(parse_sweep({"kind": "llm", "hf-config": config, "weights": ["int3"]}),
                     workers=1)
    assert "invalid choice: 'int3'" in rows[0]["error"]


def test_the_cli_names_a_bad_output_format(tmp_path, config, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"kind: llm\nhf-config: {config}\nbatch: 1\nprompt: 64\ngen: 8\n")
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "r.xlsx"), "--workers", "1"]) == 2
    assert "unknown output format '.xlsx'" in capsys.readouterr().err
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "r.csv"), "--workers", "1",
                 "--pareto", str(tmp_path / "p.png"), "--pareto-y", "tpot"]) == 2
    assert "did you mean 'tpot_ms'" in capsys.readouterr().err


def test_pareto_front_by_hand():
    # (gpus, ms): (2, 7) loses to (2, 5); (4, 6) to (2, 5); the error row and the row whose
    # memory does not fit are left out
    rows = [{"gpus": 1, "ms": 9.0}, {"gpus": 2, "ms": 7.0}, {"gpus": 2, "ms": 5.0},
            {"gpus": 4, "ms": 6.0}, {"gpus": 8, "ms": 2.0}, {"gpus": 1, "ms": 1.0, "error": "x"},
            {"gpus": 1, "ms": 0.5, "fits": "False"}]
    assert [(r["gpus"], r["ms"]) for r in pareto_front(rows, "gpus", "ms")] == [
        (1, 9.0), (2, 5.0), (8, 2.0)]


def test_ray_local_mode(config):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e "
                                            "'.[ray]' from a checkout); the local pool is tested")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        spec = parse_sweep({"kind": "llm", "hf-config": config, "batch": [1, 2], "prompt": 64,
                            "gen": 8})
        rows = run_sweep(spec, ray=True)
    finally:
        ray.shutdown()
    assert [r["batch"] for r in rows] == [1, 2] and all(r["error"] == "" for r in rows)


def test_parquet_output_reads_back(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed (the sweep "
                                                       "extra); CSV output is tested")
    from torch_gemm_cost.sweep import write_rows

    rows = [{"batch": 1, "tpot_ms": 2.5, "error": ""}, {"batch": 9, "error": "too big"}]
    out = write_rows(rows, tmp_path / "r.parquet", ["batch", "tpot_ms", "error"])
    table = pq.read_table(out).to_pylist()
    assert table == [{"batch": 1, "tpot_ms": 2.5, "error": None},
                     {"batch": 9, "tpot_ms": None, "error": "too big"}]


def test_a_train_plan_grid_gives_each_layout_its_plan(config):
    spec = parse_sweep({"kind": "train-plan", "hf-config": config, "device": "a100_sxm4_80gb",
                        "gpus": 4, "tp": [1, 2, 3], "global-batch": 8, "seq": 128})
    rows = run_sweep(spec, workers=1)
    assert [r["tp"] for r in rows] == [1, 2, 3]
    # tp=3 splits no 8 heads: the planner's own refusal, in its row
    assert rows[2]["error"] and rows[2].get("step_ms") is None
    for r in rows[:2]:
        plan = tgc.plan_training(TINY, "a100_sxm4_80gb", gpus=4, tp=r["tp"], global_batch=8,
                                 seq=128)
        assert r["error"] == "" and r["step_ms"] == pytest.approx(plan.step_ms, rel=1e-9)
        assert r["mfu"] == pytest.approx(plan.mfu, rel=1e-9) and r["gpus"] == 4


def test_each_model_structure_is_one_workers_task():
    from torch_gemm_cost.sweep.run import worker_tasks

    calls = [[{"hf-config": "a.json", "tp": tp, "device": d}] for tp in (1, 2)
             for d in ("l4", "h100_sxm5_80gb", "b200")]
    # two structures (tp 1, tp 2), each on all three devices: one task each, on two workers
    assert worker_tasks("llm", calls, 2) == [[0, 1, 2], [3, 4, 5]]
    # four workers: each structure's calls halved, so each is captured by two workers
    assert sorted(map(sorted, worker_tasks("llm", calls, 4))) == [[0, 2], [1], [3, 5], [4]]
