"""benchmarks/measure_gpu.py: the GPU measurement script's logic, run on the CPU."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from torch_gemm_cost.calibrate import read_measurements

ROOT = Path(__file__).resolve().parents[1]
LABEL_COLUMNS = ("gpu,gpu_name,model,mode,seq_len,batch,option,num_layer,measured_total_ms,"
                 "measured_fw_ms,measured_bwall_ms,neusight_pred_ms,neusight_err_pct")


def load_script():
    spec = importlib.util.spec_from_file_location("measure_gpu",
                                                  ROOT / "benchmarks" / "measure_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_part_runs_on_the_cpu(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    # NB: the e2e part stops between rows once its share of the budget (30% of 12 s) is spent,
    # and a cold import of transformers' GPT-2 in its first row can take that alone (the
    # train row then goes unmeasured), so the import happens here, outside the budget
    from transformers import GPT2LMHeadModel  # noqa: F401
    data = tmp_path / "data"
    (data / "e2e" / "configs").mkdir(parents=True)
    (data / "e2e" / "configs" / "tiny.json").write_text(json.dumps(
        {"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64,
         "n_positions": 32, "bos_token_id": 0, "eos_token_id": 0}))
    (data / "e2e" / "neusight_labels.csv").write_text(
        LABEL_COLUMNS + "\nx,x,tiny,inf,16,2,,1,1,1,0,1,1\nx,x,tiny,train,16,2,,1,1,1,0,1,1\n"
        "x,x,tiny,inf,16,2,fusion,1,1,1,0,1,1\n")
    out = tmp_path / "out"
    script = load_script()
    assert script.main(["--out", str(out), "--device", "cpu", "--data", str(data),
                        "--budget-s", "12", "--tokens", "1"]) == 0

    align = read_measurements(out / "alignment.csv")
    assert len(align) > 0 and set(align.gpu) == {"cpu"} and set(align.timing) == {"wall"}
    with open(out / "alignment.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["source"] for r in rows} == {"tgc-align"}
    assert {r["op"] for r in rows} <= {"linear", "matmul"} and {r["m"] for r in rows} == {"1"}
    assert len(read_measurements(out / "calibrate.csv")) > 0

    with open(out / "e2e.csv", newline="") as fh:
        e2e = {r["mode"]: r for r in csv.DictReader(fh)}
    # the fusion row is left out, as benchmarks/e2e.py leaves it out
    assert set(e2e) == {"inf", "train"}
    assert float(e2e["inf"]["measured_bwall_ms"]) == 0.0
    assert float(e2e["train"]["measured_bwall_ms"]) > 0.0
    total = float(e2e["train"]["measured_fw_ms"]) + float(e2e["train"]["measured_bwall_ms"])
    assert float(e2e["train"]["measured_total_ms"]) == pytest.approx(total, abs=1e-3)

    with open(out / "vec.csv", newline="") as fh:
        vec = list(csv.DictReader(fh))
    first = {r["op"] for r in vec if (r["rows"], r["cols"]) == ("1", "64")}
    assert first == set(script.VEC_OPS) and all(float(r["latency_ms"]) > 0 for r in vec)
    env = json.loads((out / "env.json").read_text())
    assert env["gpu"] == "cpu" and env["torch"]
    with open(out / "refused.csv", newline="") as fh:
        assert next(csv.reader(fh))[-1] == "error"
