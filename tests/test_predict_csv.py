"""predict-csv: columns and row order survive, one batched call per gpu, bad rows named."""

from __future__ import annotations

import csv
import gzip
import math
import re
from pathlib import Path

import pytest
import torch

import torch_gemm_cost.predict as predict_pkg
from torch_gemm_cost.cli import main
from torch_gemm_cost.predict import GemmBatch, Prediction, RooflinePredictor
from torch_gemm_cost.predict.query import predict_gemm_ms

HEADER = ["gpu", "gpu_name", "op", "dtype", "batch", "m", "n", "k", "bias", "note",
          "latency_ms"]
ROWS = [
    ["tesla_t4", "Tesla T4", "linear", "float16", "1", "128", "4096", "4096", "1", "q, k", "0.2"],
    ["h100_sxm5_80gb", "", "matmul", "bfloat16", "2", "4096", "4096", "4096", "0", "", "0.3"],
    ["T4", "Tesla T4", "bmm", "float32", "8", "64", "64", "64", "0", "alias", "0.01"],
    ["a100_pcie_40gb", "", "gemm_TN", "float16", "1", "1760", "128", "1760", "0", "x", "0.05"],
    ["h100_sxm5_80gb", "", "matmul", "fp8", "0", "16", "16", "16", "0", "empty", "0.01"],
]


def _write(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([header, *rows])
    return path


def _read(path: Path) -> list[list[str]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", newline="") as fh:
        return list(csv.reader(fh))


class _Counting:
    """Roofline that counts its calls and the GEMMs in each."""

    name = "counting"
    version = "0"

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def predict(self, gemms: GemmBatch, device) -> Prediction:
        self.sizes.append(len(gemms))
        return RooflinePredictor().predict(gemms, device)


@pytest.fixture
def counting(monkeypatch) -> _Counting:
    pred = _Counting()
    monkeypatch.setattr(predict_pkg, "default_predictor", lambda: pred)
    return pred


@pytest.mark.parametrize("suffix_in, suffix_out", [(".csv", ".csv"), (".csv.gz", ".csv.gz")])
def test_round_trip_keeps_columns_and_order(tmp_path, counting, suffix_in, suffix_out):
    src = _write(tmp_path / f"in{suffix_in}", HEADER, ROWS)
    out = tmp_path / f"out{suffix_out}"
    assert main(["predict-csv", str(src), "--out", str(out)]) == 0
    table = _read(out)
    assert table[0] == HEADER + ["predicted_ms"]
    assert [r[:-1] for r in table[1:]] == ROWS  # every column, every row, in order
    got = [float(r[-1]) for r in table[1:]]
    # oracle: the same GEMMs through the Python API with the same predictor
    for row, t in zip(ROWS, got):
        gpu, _, op, dtype, b, m, n, k, bias = row[:9]
        want = predict_gemm_ms(gpu, m=int(m), n=int(n), k=int(k), batch=int(b), dtype=dtype,
                               op=op, bias=bias == "1", predictor=RooflinePredictor())
        assert t == pytest.approx(want, rel=1e-5)
    assert got[4] == 0.0  # batch 0 costs nothing
    # one call per device; "T4" and "tesla_t4" are one device. The batch-0 row is not predicted.
    assert sorted(counting.sizes) == [1, 1, 2]


def test_existing_predicted_column_is_replaced_in_place(tmp_path, counting):
    header = ["predicted_ms", "gpu", "op", "dtype", "batch", "m", "n", "k"]
    src = _write(tmp_path / "in.csv", header, [["old", "l4", "matmul", "fp16", "1", "8", "8", "8"]])
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 0
    table = _read(tmp_path / "o.csv")
    assert table[0] == header and table[1][0] not in ("old", "")


@pytest.mark.parametrize(
    "bad_row, column",
    [
        (["tesla_t4", "", "linear", "float16", "1", "12x", "4096", "4096", "0", "", "1"], "'m'"),
        (["tesla_t4", "", "linear", "float16", "1", "0", "4096", "4096", "0", "", "1"], "'m'"),
        (["tesla_t4", "", "linear", "float16", "1", "8", "8", "-8", "0", "", "1"], "'k'"),
        (["tesla_t4", "", "linear", "float16", "1.5", "8", "8", "8", "0", "", "1"], "'batch'"),
        (["tesla_t44", "", "linear", "float16", "1", "8", "8", "8", "0", "", "1"], "'gpu'"),
        (["tesla_t4", "", "lineer", "float16", "1", "8", "8", "8", "0", "", "1"], "'op'"),
        (["tesla_t4", "", "linear", "floot16", "1", "8", "8", "8", "0", "", "1"], "'dtype'"),
        (["tesla_t4", "", "linear", "float8_e4m3fn", "1", "8", "8", "8", "0", "", "1"], "'dtype'"),
        (["tesla_t4", "", "linear", "float16", "1", "8", "8", "8", "2", "", "1"], "'bias'"),
    ],
)
def test_malformed_row_names_line_and_column(tmp_path, capsys, counting, bad_row, column):
    # a quoted field with a newline makes row 2 span lines 3-4, so the bad row 4 is on line 6
    rows = [ROWS[0], ["l4", "", "matmul", "fp16", "1", "8", "8", "8", "0", "two\nlines", "1"],
            ROWS[2], bad_row, ROWS[3]]
    src = _write(tmp_path / "in.csv", HEADER, rows)
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"in.csv line 6: column {column}" in err
    assert not (tmp_path / "o.csv").exists()


def test_first_bad_line_is_reported_across_devices(tmp_path, capsys, counting):
    rows = [ROWS[0], ["l4", "", "matmul", "fp16", "1", "8", "x", "8", "0", "", "1"],
            ["tesla_t4", "", "matmul", "fp16", "1", "y", "8", "8", "0", "", "1"]]
    src = _write(tmp_path / "in.csv", HEADER, rows)
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert "line 3: column 'n'" in capsys.readouterr().err


def test_short_row_names_line(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("gpu,op,dtype,batch,m,n,k\nl4,matmul,fp16,1,8,8,8\nl4,matmul,fp16,1,8\n")
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert "in.csv line 3: expected 7 fields, got 5" in capsys.readouterr().err


def test_missing_required_column(tmp_path, capsys):
    src = _write(tmp_path / "in.csv", ["gpu", "op", "dtype", "m", "n", "k"], [])
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert "line 1: missing column(s) batch" in capsys.readouterr().err


def test_skip_bad_writes_an_error_column(tmp_path, counting):
    rows = [ROWS[0], ["tesla_t4", "", "linear", "float16", "1", "12x", "8", "8", "0", "", "1"],
            ROWS[1], ["tesla_t4", "", "matmul", "fp8", "1", "8", "8", "8", "0", "", "1"]]
    src = _write(tmp_path / "in.csv", HEADER, rows)
    out = tmp_path / "o.csv"
    assert main(["predict-csv", str(src), "--out", str(out), "--skip-bad"]) == 0
    table = _read(out)
    assert table[0] == HEADER + ["predicted_ms", "error"]
    assert [r[:len(HEADER)] for r in table[1:]] == rows
    pred = [r[-2] for r in table[1:]]
    errors = [r[-1] for r in table[1:]]
    assert pred[1] == pred[3] == "" and float(pred[0]) > 0 and float(pred[2]) > 0
    assert errors[0] == errors[2] == ""
    assert errors[1].startswith("column 'm': expected") and "'12x'" in errors[1]
    assert errors[3].startswith("column 'dtype':") and "float8_e4m3fn" in errors[3]


def test_bf16_on_t4_logs_one_warning_and_predicts(tmp_path, caplog, counting):
    rows = [["tesla_t4", "", "matmul", "bf16", "1", str(m), "64", "64", "0", "", "1"]
            for m in (8, 16, 32)]
    src = _write(tmp_path / "in.csv", HEADER, rows)
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 0
    warned = [r for r in caplog.records if "no bf16 tensor cores" in r.getMessage()]
    assert len(warned) == 1
    assert all(float(r[-1]) > 0 for r in _read(tmp_path / "o.csv")[1:])


def test_every_measured_gpu_op_and_dtype_is_understood(tmp_path, data_dir):
    # one row per distinct (gpu, op, dtype, layout) in the measured data, through the default
    # predictor: no row may be rejected, and every prediction is finite and positive
    header, combos = None, {}
    for path in sorted((data_dir / "gemm").glob("*.csv.gz")):
        with gzip.open(path, "rt", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader)
            key = [header.index(c) for c in ("gpu", "op", "dtype", "layout")]
            for row in reader:
                combos.setdefault(tuple(row[i] for i in key), row)
    src = _write(tmp_path / "all.csv", header, list(combos.values()))
    out = tmp_path / "o.csv"
    assert main(["predict-csv", str(src), "--out", str(out)]) == 0
    table = _read(out)
    assert len(table) == len(combos) + 1 >= 50
    times = [float(r[-1]) for r in table[1:]]
    assert all(math.isfinite(t) and t > 0 for t in times)


class _TimingAware(_Counting):
    """Takes the timing and source keywords, as predictors that add launch overhead do."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str | None, str | None, int]] = []

    def predict(self, gemms, device, *, timing=None, source=None):
        self.calls.append((timing, source, len(gemms)))
        return super().predict(gemms, device)


def test_timing_and_source_reach_predictors_that_take_them(tmp_path, monkeypatch):
    pred = _TimingAware()
    monkeypatch.setattr(predict_pkg, "default_predictor", lambda: pred)
    header = ["gpu", "source", "timing", "op", "dtype", "batch", "m", "n", "k"]
    rows = [["l4", "vidur", "kernel", "linear", "fp16", "1", "8", "8", "8"],
            ["l4", "vidur", "event", "linear", "fp16", "1", "8", "8", "8"],
            ["l4", "vidur", "kernel", "linear", "fp16", "1", "16", "8", "8"],
            ["l4", "", "", "linear", "fp16", "1", "16", "8", "8"]]
    src = _write(tmp_path / "in.csv", header, rows)
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 0
    assert sorted(pred.calls, key=str) == sorted(
        [("kernel", "vidur", 2), ("event", "vidur", 1), (None, None, 1)], key=str
    )


def test_unknown_timing_names_line_and_column(tmp_path, capsys):
    header = ["gpu", "timing", "op", "dtype", "batch", "m", "n", "k"]
    src = _write(tmp_path / "in.csv", header, [["l4", "evnt", "mm", "fp16", "1", "8", "8", "8"]])
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert "line 2: column 'timing': unknown 'evnt'; known: event, kernel, table" in (
        capsys.readouterr().err
    )


def test_empty_file(tmp_path, capsys):
    (tmp_path / "in.csv").write_text("")
    assert main(["predict-csv", str(tmp_path / "in.csv"), "--out", str(tmp_path / "o.csv")]) == 2
    assert "in.csv: empty file; expected a header naming gpu, op, dtype" in capsys.readouterr().err


def test_non_finite_prediction_is_an_internal_error_naming_the_line(tmp_path, monkeypatch, capsys):
    class _Broken(_Counting):
        def predict(self, gemms, device):
            out = super().predict(gemms, device)
            return Prediction(out.time_ms * float("nan"), bound=out.bound)

    monkeypatch.setattr(predict_pkg, "default_predictor", _Broken)
    src = _write(tmp_path / "in.csv", HEADER, ROWS[:2])
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert re.search(r"internal error: RuntimeError: .*non-finite time for .*in.csv line 2", line)
    assert not (tmp_path / "o.csv").exists()


def test_device_profile_serves_the_rows_naming_its_device(tmp_path, monkeypatch, counting):
    # The profile's predictor is stubbed: this checks the dispatch, not the calibration format.
    import json
    from dataclasses import replace

    from torch_gemm_cost.hardware.catalog import get_device, spec_to_record
    from torch_gemm_cost.predict import profile

    local = replace(get_device("l4"), id="my_l4", name="My L4", aliases=())
    profile_pred = _Counting()
    seen: list[str] = []

    def profile_predictor(target):
        seen.append(target.source)
        return profile_pred if target.profile is not None else None

    monkeypatch.setattr(profile, "profile_predictor", profile_predictor)
    (tmp_path / "p.json").write_text(json.dumps({  # a profile by its content
        "format": "torch_gemm_cost.profile", "version": 1, "device": spec_to_record(local),
        "predictor": {"kind": "counting"}}))
    header = ["gpu", "op", "dtype", "batch", "m", "n", "k"]
    rows = [["my_l4", "mm", "fp16", "1", "8", "8", "8"], ["l4", "mm", "fp16", "1", "8", "8", "8"],
            ["My L4", "mm", "fp16", "1", "9", "8", "8"]]
    src = _write(tmp_path / "in.csv", header, rows)
    out = tmp_path / "o.csv"
    assert main(["predict-csv", str(src), "--out", str(out), "--device-profile",
                 str(tmp_path / "p.json")]) == 0
    assert seen == [f"profile {tmp_path / 'p.json'}", "catalog"]  # one group per device
    assert profile_pred.sizes == [2] and counting.sizes == [1]
    assert len(_read(out)) == 4


def test_weights_flag_predicts_with_the_hybrid_from_that_file(tmp_path, data_dir):
    from torch_gemm_cost.measured.gemm import load_gemms
    from torch_gemm_cost.predict import HybridPredictor

    weights = tmp_path / "w.json"
    HybridPredictor(steps=1).fit(load_gemms(data_dir, sources=["llmcompass"])).save(weights)
    hybrid = HybridPredictor.load(weights)
    rows = [r for r in ROWS if r[3] != "fp8"]
    src = _write(tmp_path / "in.csv", HEADER, rows)
    out = tmp_path / "o.csv"
    assert main(["predict-csv", str(src), "--out", str(out), "--weights", str(weights)]) == 0
    got = [float(r[-1]) for r in _read(out)[1:]]
    for row, t in zip(rows, got):
        gpu, _, op, dtype, b, m, n, k, bias = row[:9]
        want = predict_gemm_ms(gpu, m=int(m), n=int(n), k=int(k), batch=int(b), dtype=dtype,
                               op=op, bias=bias == "1", predictor=hybrid)
        assert t == pytest.approx(want, rel=1e-5)
    assert got != [
        float(r[-1]) for r in _read(_run_default(tmp_path, src))[1:]
    ]  # the weights are really used


def _run_default(tmp_path: Path, src: Path) -> Path:
    out = tmp_path / "roof.csv"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(predict_pkg, "default_predictor", RooflinePredictor)
        assert main(["predict-csv", str(src), "--out", str(out)]) == 0
    return out


# ------------------------------------------------------------------ the vec and attention schemas

VEC_HEADER = ["gpu", "source", "op", "dtype", "rows", "cols", "model", "latency_ms"]
VEC_ROWS = [
    ["tesla_v100_pcie_32gb", "neusight", "add", "float32", "4096", "1024", "", "0.06"],
    ["a40", "vidur", "rms_norm_fused", "float16", "2048", "4096", "llama", "0.09"],
    ["a100_sxm4_80gb", "", "add", "float16", "1024", "4096", "", "0.01"],
    ["a40", "vidur", "add3", "float16", "512", "2560", "phi-2", "0.02"],
    ["tesla_t4", "neusight", "ln", "float32", "1024", "1024", "", "0.05"],
    ["a100_sxm4_80gb", "vidur", "embedding", "float16", "4096", "4096", "llama", "0.22"],
]


def test_vec_schema_gets_predicted_ms_as_measured(tmp_path):
    from torch_gemm_cost import get_device
    from torch_gemm_cost.predict.ops import OP_CLASSES, load_op_costs, measured_op_times_ms

    src = _write(tmp_path / "vec.csv", VEC_HEADER, VEC_ROWS)
    out = tmp_path / "out.csv"
    assert main(["predict-csv", str(src), "--out", str(out)]) == 0
    got = _read(out)
    assert got[0] == [*VEC_HEADER, "predicted_ms"]
    assert [r[:-1] for r in got[1:]] == VEC_ROWS  # every column and the row order kept
    pred = [float(r[-1]) for r in got[1:]]
    # NeuSight's add on a V100: 3 passes of 4096·1024·4 B = 50,331,648 B at its class's η on
    # Volta, plus the class's event-timed floor
    table = load_op_costs()
    i = OP_CLASSES.index("elementwise")
    eta = table.eta_on(get_device("tesla_v100_pcie_32gb"))[i]
    expected = table.floor_ms[i] + 50_331_648 / (eta * 900e9) * 1e3
    assert pred[0] == pytest.approx(expected, rel=1e-5)
    # vidur's ops are fused kernels (an fp16 add without a source too); add3 is two adds
    fused = [False, True, True, True, False, True]
    for row, f, p in zip(VEC_ROWS, fused, pred):
        elem = 2 if row[3] == "float16" else 4
        (t,) = measured_op_times_ms([row[2]], [elem], [int(row[4])], [int(row[5])], [f],
                                    get_device(row[0]))
        assert p == pytest.approx(t, rel=1e-5)
    (add,) = measured_op_times_ms(["add"], [2], [512], [2560], [True], get_device("a40"))
    assert add < pred[3] < 2.2 * add


def test_attention_schema_gets_predicted_ms_as_measured(tmp_path):
    from torch_gemm_cost.predict.attention import AttentionBatch, AttentionCall, AttentionPredictor

    header = ["gpu", "gpu_name", "source", "phase", "kernel", "batch", "q_len", "kv_len",
              "heads", "kv_heads", "head_dim", "window", "dtype", "kv_dtype", "latency_ms"]
    rows = [
        ["h200_sxm_141gb", "", "aiconfigurator", "prefill", "vllm_flash_attn_fa3", "2", "4096",
         "4096", "32", "8", "128", "0", "bfloat16", "bfloat16", "1.1"],
        ["l40s", "", "aiconfigurator", "decode", "", "64", "1", "8192", "32", "8", "128",
         "4096", "bfloat16", "fp8", "0.2"],
    ]
    src = _write(tmp_path / "att.csv.gz", header, rows)
    out = tmp_path / "out.csv"
    assert main(["predict-csv", str(src), "--out", str(out)]) == 0
    got = _read(out)
    assert [r[:-1] for r in got[1:]] == rows
    model = AttentionPredictor.shipped()
    prefill = AttentionCall("prefill", 2, 4096, 4096, 32, 8, 128, kernel="fa3")
    decode = AttentionCall("decode", 64, 1, 8192, 32, 8, 128, window=4096, kv_dtype="fp8")
    for call, gpu, r in zip((prefill, decode), ("h200_sxm_141gb", "l40s"), got[1:]):
        # re-run on warm buffers, as measured
        expected = model.predict(AttentionBatch.from_calls([call], warm_l2=True), gpu
                                 ).time_ms.item()
        assert float(r[-1]) == pytest.approx(expected, rel=1e-5)


def test_vec_and_attention_rows_name_their_bad_column(tmp_path, capsys):
    src = _write(tmp_path / "vec.csv", VEC_HEADER, [VEC_ROWS[0], ["a40", "vidur", "rms_norm",
                                                                   "float16", "8", "4096", "", ""]])
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert ("vec.csv line 3: column 'op': unknown op 'rms_norm'; did you mean "
            "'rms_norm_fused', 'layer_norm'?") in capsys.readouterr().err
    header = ["gpu", "phase", "batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim",
              "window", "dtype", "kv_dtype"]
    bad = _write(tmp_path / "att.csv", header,
                 [["l40s", "prefil", "1", "8", "8", "8", "8", "64", "0", "bf16", "bf16"],
                  ["l40s", "prefill", "1", "8", "8", "8", "8", "6x", "0", "bf16", "bf16"]])
    out = tmp_path / "o.csv"
    assert main(["predict-csv", str(bad), "--out", str(out), "--skip-bad"]) == 0
    errors = [r[-1] for r in _read(out)[1:]]
    assert errors[0] == "column 'phase': unknown phase 'prefil'; did you mean 'prefill'?"
    assert errors[1] == "column 'head_dim': expected an integer, got '6x'"


def test_schema_is_told_by_its_columns(tmp_path, capsys):
    src = _write(tmp_path / "in.csv", ["gpu", "op", "dtype", "rows"], [])
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert "line 1: missing column(s) cols; required: gpu, op, dtype, rows, cols" in (
        capsys.readouterr().err)


def test_interval_on_vec_rows_is_refused_by_name(tmp_path, capsys):
    src = _write(tmp_path / "vec.csv", VEC_HEADER, VEC_ROWS)
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv"),
                 "--interval", "0.8"]) == 2
    err = capsys.readouterr().err
    assert "calibrated for GEMM and attention rows" in err and "holds vec rows" in err


def test_interval_on_attention_rows_reads_the_attention_calibration(tmp_path):
    from torch_gemm_cost.predict.attention import AttentionBatch, AttentionCall, AttentionPredictor

    header = ["gpu", "phase", "batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim",
              "window", "dtype", "kv_dtype"]
    rows = [["h200_sxm_141gb", "prefill", "2", "4096", "4096", "32", "8", "128", "0",
             "bfloat16", "bfloat16"],
            ["l40s", "decode", "64", "1", "8192", "32", "8", "128", "0", "bfloat16", "fp8"]]
    src = _write(tmp_path / "att.csv", header, rows)
    out = tmp_path / "out.csv"
    assert main(["predict-csv", str(src), "--out", str(out), "--interval", "0.8"]) == 0
    got = _read(out)
    assert got[0] == [*header, "predicted_ms", "predicted_lo_ms", "predicted_hi_ms"]
    model = AttentionPredictor.shipped()
    calls = [AttentionCall("prefill", 2, 4096, 4096, 32, 8, 128),
             AttentionCall("decode", 64, 1, 8192, 32, 8, 128, kv_dtype="fp8")]
    for call, gpu, r in zip(calls, ("h200_sxm_141gb", "l40s"), got[1:]):
        t = model.predict(AttentionBatch.from_calls([call], warm_l2=True), gpu).time_ms
        lo, hi = model.bounds(t, torch.tensor([float(call.phase == "decode")]), 0.8)
        assert [float(x) for x in r[-3:]] == pytest.approx(
            [t.item(), lo.item(), hi.item()], rel=1e-5)
        assert float(r[-2]) < float(r[-3]) < float(r[-1])


def test_aiconfigurator_fp8_rows_are_priced_with_their_input_cast(tmp_path):
    """The library prices aiconfigurator's fp8 rows with vLLM's bf16 -> fp8 input cast (batch·m·k
    elements of A) and the row's kernel timing; predict-csv gives the same time, which is more
    than the GEMM alone."""
    from dataclasses import replace

    from torch_gemm_cost.measured.gemm import MeasuredGemms, gemm_batch_from_columns
    from torch_gemm_cost.predict import shipped_hybrid

    header = ["gpu", "source", "timing", "op", "dtype", "batch", "m", "n", "k", "latency_ms"]
    rows = [["h200_sxm_141gb", "aiconfigurator", "kernel", "linear", "float8_e4m3fn", "1",
             str(m), "4096", "4096", "0.05"] for m in (16, 2048)]
    src = _write(tmp_path / "fp8.csv", header, rows)
    out = tmp_path / "o.csv"
    assert main(["predict-csv", str(src), "--out", str(out)]) == 0
    got = torch.tensor([float(r[-1]) for r in _read(out)[1:]], dtype=torch.float64)
    gemms = gemm_batch_from_columns(op=["linear"] * 2, dtype=["float8_e4m3fn"] * 2,
                                    batch=[1, 1], m=[16, 2048], n=[4096] * 2, k=[4096] * 2)
    bare = MeasuredGemms(gemms=gemms, gpu=("h200_sxm_141gb",) * 2,
                         source=("aiconfigurator",) * 2, timing=("kernel",) * 2,
                         latency_ms=torch.tensor([0.05, 0.05], dtype=torch.float64))
    cutlass = torch.ones(2, dtype=torch.long)  # FP8_KERNELS.index("vllm_cutlass")
    cast = replace(bare, gemms=replace(gemms, fp8_kernel=cutlass, quantized_elements=torch.tensor(
        [16 * 4096.0, 2048 * 4096.0], dtype=torch.float64)))
    hybrid = shipped_hybrid()
    assert torch.equal(got, hybrid.predict_measured(cast).double())
    no_cast = replace(bare, gemms=replace(gemms, fp8_kernel=cutlass))
    assert (got > hybrid.predict_measured(no_cast).double()).all()


def test_a_rows_kernel_column_names_its_fp8_kernel(tmp_path):
    """The fp8 kernel a row ran comes from its ``kernel`` column: vLLM's CUTLASS fp8 Linear
    (with its input cast) by class name or by FP8_KERNELS name; anything else, and no column,
    the library behind torch._scaled_mm, with no cast."""
    from torch_gemm_cost.measured.gemm import read_gemm_file

    header = ["gpu", "source", "timing", "op", "dtype", "batch", "m", "n", "k", "latency_ms",
              "kernel"]
    kernels = ["CutlassFP8ScaledMMLinearKernel", "vllm_cutlass", "torch_scaled_mm",
               "sm90_xmma_gemm_e4m3", ""]
    rows = [["h200_sxm_141gb", "mine", "kernel", "linear", "float8_e4m3fn", "1", "64", "256",
             "512", "0.01", k] for k in kernels]
    got = read_gemm_file(_write(tmp_path / "k.csv", header, rows)).gemms
    assert got.fp8_kernel.tolist() == [1, 1, 0, 0, 0]
    assert got.quantized_elements.tolist() == [64 * 512.0] * 2 + [0.0] * 3
    # a bf16 row keeps the default whatever its kernel column says
    bf16 = [["h200_sxm_141gb", "mine", "kernel", "linear", "bfloat16", "1", "64", "256", "512",
             "0.01", "CutlassFP8ScaledMMLinearKernel"]]
    plain = read_gemm_file(_write(tmp_path / "b.csv", header, bf16)).gemms
    assert plain.fp8_kernel.tolist() == [0] and plain.quantized_elements.tolist() == [0.0]


COMM_HEADER = ["gpu", "source", "collective", "num_gpus", "gpus_per_node", "topology",
               "size_elements", "size_bytes", "dtype", "latency_ms"]


def test_comm_schema_is_priced_as_measured(tmp_path):
    """Vidur's rows are NCCL kernel times of size_elements bytes (its size_bytes doubles the
    buffer); nccl-tests rows are the out-of-place time of size_bytes."""
    from torch_gemm_cost.hardware.catalog import get_device
    from torch_gemm_cost.measured.comm import comm_times_ms
    from torch_gemm_cost.predict.collectives import check_call

    rows = [["a100_sxm4_80gb", "vidur", "all_reduce", "8", "8", "dgx", "1001472", "2002944",
             "float16", "0.1"],
            ["h200_sxm_141gb", "aiconfigurator", "all_gather", "4", "4", "node", "1048576",
             "2097152", "float16", "0.05"]]
    src = _write(tmp_path / "comm.csv", COMM_HEADER, rows)
    out = tmp_path / "o.csv"
    assert main(["predict-csv", str(src), "--out", str(out)]) == 0
    got = [float(r[-1]) for r in _read(out)[1:]]
    devices = [get_device("a100_sxm4_80gb"), get_device("h200_sxm_141gb")]
    calls = [check_call(devices[0], "all_reduce", size_bytes=1001472, num_gpus=8,
                        gpus_per_node=8, topology="dgx", element_bytes=2, timing="kernel"),
             check_call(devices[1], "all_gather", size_bytes=2097152, num_gpus=4,
                        gpus_per_node=4, topology="node", element_bytes=2)]
    assert got == comm_times_ms(calls, devices).tolist()


def test_comm_rows_the_model_cannot_price_get_the_reason(tmp_path, capsys):
    rows = [["l40s", "aiconfigurator", "all_reduce", "2", "2", "dgx", "1024", "2048",
             "float16", "0.02"],
            ["l40s", "aiconfigurator", "all_reduce", "2", "2", "node", "1024", "2048",
             "float17", "0.02"]]
    src = _write(tmp_path / "comm.csv", COMM_HEADER, rows)
    out = tmp_path / "o.csv"
    assert main(["predict-csv", str(src), "--out", str(out), "--skip-bad"]) == 0
    errors = [r[-1] for r in _read(out)[1:]]
    assert errors[0].startswith("topology 'dgx': l40s has no NVSwitch node; nearest: 'node'")
    assert errors[1].startswith("column 'dtype': unknown 'float17'")
    assert main(["predict-csv", str(src), "--out", str(out)]) == 2
    assert "comm.csv line 2: topology 'dgx'" in capsys.readouterr().err
