"""Calibration: sweep design, timing loop, the fitted CPU model, profile files and the CLI."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from torch_gemm_cost import calibrate as cal
from torch_gemm_cost.calibrate import (
    CSV_COLUMNS,
    CalibratedPredictor,
    CpuTimer,
    Measurement,
    SweepPoint,
    design_sweep,
    fit_profile,
    load_profile,
    read_measurements,
    run_sweep,
    save_profile,
    sweep_dtypes,
    time_runs,
    timing,
    write_measurements,
)
from torch_gemm_cost.cli import main
from torch_gemm_cost.hardware.catalog import DeviceSpec, get_device
from torch_gemm_cost.hardware.host import host_cpu
from torch_gemm_cost.measured.gemm import MeasuredGemms
from torch_gemm_cost.predict.query import predict_gemm_ms
from torch_gemm_cost.predict.score import summarize_errors
from torch_gemm_cost.records.types import GemmBatch


def cpu_spec(**over: object) -> DeviceSpec:
    """A 2-core AVX-512 CPU with bf16 dot products, described without probing the host."""
    spec = DeviceSpec(
        id="cpu", name="Test CPU", vendor="AMD", architecture="cpu", compute_capability="avx512",
        sm_count=2, boost_clock_mhz=2600.0, tensor_cores_per_sm=0, mem_bytes=16e9,
        dram_bw_bytes_per_s=20e9, l2_bytes=2 * 2**20, l3_bytes=32 * 2**20,
        l1_bytes_per_sm=48 * 2**10, smem_bytes_per_sm=None, regfile_bytes_per_sm=2048.0,
        peak_flops=(("bf16", 6.656e11), ("fp16", None), ("fp32", 3.328e11), ("fp32_matrix", None),
                    ("fp64", 1.664e11), ("fp8", None), ("int8", None), ("tf32", None)),
    )
    return replace(spec, **over)


# ------------------------------------------------------------------------------- sweep design
def test_sweep_is_cheapest_first_and_spans_every_regime_and_dtype() -> None:
    spec = cpu_spec()
    points = design_sweep(spec)
    est = [p.est_s for p in points]
    assert est == sorted(est)
    assert {p.dtype for p in points} == {"float32", "bfloat16"} == set(sweep_dtypes(spec))
    assert {p.regime for p in points} == {"square", "skinny", "flat", "batched", "tile_edge",
                                          "wave_edge", "random"}
    # the first 10% of the sweep (what a tiny budget times) already holds both dtypes,
    # memory-bound GEMVs and batched GEMMs
    head = points[: len(points) // 10]
    assert {p.dtype for p in head} == {"float32", "bfloat16"}
    assert any(p.m == 1 for p in head) and any(p.batch > 1 for p in head)
    assert len({p.shape + (p.dtype,) for p in points}) == len(points)  # no duplicates


def test_sweep_has_aligned_and_misaligned_dims_and_tile_edges() -> None:
    points = design_sweep(cpu_spec(), ["float32"])
    dims = [(p.m, p.n, p.k) for p in points]
    aligned = [d for d in dims if all(x % 16 == 0 for x in d)]
    odd = [d for d in dims if all(x % 2 == 1 for x in d)]
    assert len(aligned) > 50 and len(odd) > 20
    # each register-tile edge T of the CPU is probed at T-1, T and T+1 along n
    for t in (16, 32, 64):
        assert {(512, t - 1, 512), (512, t, 512), (512, t + 1, 512)} <= set(dims)
    # wave edge: 64-wide blocks over 2 cores -> m = 128 fills one wave, 129 spills into a second
    assert {(128, 64, 256), (129, 64, 256)} <= set(dims)


def test_sweep_dtypes_follow_the_isa() -> None:
    no_bf16 = cpu_spec(peak_flops=(("fp32", 1e11), ("bf16", None), ("fp16", None)))
    assert sweep_dtypes(no_bf16) == ("float32",)
    assert sweep_dtypes(cpu_spec()) == ("float32", "bfloat16")
    h100 = get_device("h100_sxm5_80gb")
    assert sweep_dtypes(h100) == ("float32", "tf32", "float16", "bfloat16")


def test_sweep_caps_cost_and_operand_size() -> None:
    points = design_sweep(cpu_spec(), max_est_s=0.01)
    assert points and max(p.est_s for p in points) <= 0.01
    # 8192^3 fp32 at 25% of 333 GFLOP/s takes 13 s: never planned on this CPU by default
    assert all(p.shape != (1, 8192, 8192, 8192) for p in design_sweep(cpu_spec()))


# ------------------------------------------------------------------------------- timing
class FlushRecorder(CpuTimer):
    """A CPU timer that logs its calls, standing in for the GPU timer's flush-per-run."""

    timing = "event"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def flush(self) -> None:
        self.calls.append("flush")

    def mark(self) -> float:
        self.calls.append("mark")
        return super().mark()


def test_time_runs_flushes_before_every_run() -> None:
    timer = FlushRecorder()
    ran = []
    times = time_runs(lambda: ran.append(1), 3, timer)
    assert len(times) == 3 and all(t >= 0 for t in times) and len(ran) == 3
    assert timer.calls == ["flush", "mark", "mark"] * 3


@pytest.mark.parametrize(
    "times, stalled",
    [
        ([1.0, 1.0, 1.0, 5.0, 5.0, 5.0, 5.0], True),  # median 5 ms: 4 ms (a tick) over the fastest
        ([0.010, 0.020, 0.030], False),  # 2x spread, but 0.01 ms is no scheduler tick
        ([10.0, 10.5, 11.0], False),  # 1.05x spread: physics
    ],
)
def test_stalled_runs(times: list[float], stalled: bool) -> None:
    assert timing._stalled(times) is stalled


def test_run_sweep_stops_at_the_budget() -> None:
    spec = cpu_spec()
    points = design_sweep(spec, ["float32"])
    clock_s = [0.0]

    def clock() -> float:  # every call advances a fake clock by 10 ms
        clock_s[0] += 0.01
        return clock_s[0]

    runs = run_sweep(points, "cpu", CpuTimer(), 1.0, reps=3, clock=clock)
    assert 0 < len(runs) < len(points)
    assert [r.point for r in runs] == points[: len(runs)]  # in order, small first
    assert all(r.latency_ms > 0 and r.runs >= 3 for r in runs)


# ------------------------------------------------------------------------------- the model
def test_calibrated_model_hand_worked() -> None:
    """One fp32 GEMM (1, 64, 17, 100) on 2 cores, Tn = 16, 64-wide blocks, every loss but tile
    padding and wave fill switched off:
        n padded to ⌈17/16⌉·16 = 32; output blocks ⌈64/64⌉·⌈17/64⌉ = 1 -> 1 wave, fill 1/2
        compute = 2·64·32·100 / (1e11 · 0.5) = 409600 / 5e10 s = 8.192e-6 s = 0.008192 ms."""
    model = CalibratedPredictor(tile_n=16, block=64)
    model.dtypes_ = ("float32",)
    tiny, huge = -60.0, 60.0
    model.params_ = {
        "log_peak": torch.tensor([math.log(1e11)], dtype=torch.float64),
        "log_floor_ms": torch.tensor([tiny], dtype=torch.float64),
        "log_floor_big_ms": torch.tensor([tiny], dtype=torch.float64),
        "log_switch_flops": torch.tensor([0.0], dtype=torch.float64),
        "log_m_half": torch.tensor([tiny], dtype=torch.float64),
        "log_n_half": torch.tensor([tiny], dtype=torch.float64),
        "log_k_half": torch.tensor([tiny], dtype=torch.float64),
        "log_bw_dram": torch.tensor(huge, dtype=torch.float64),
        "log_bw_llc": torch.tensor(huge, dtype=torch.float64),
        "log_bw_out": torch.tensor(huge, dtype=torch.float64),
        "log_par_flops": torch.tensor(tiny, dtype=torch.float64),  # every core from 1 FLOP
        "pack": torch.tensor(0.0, dtype=torch.float64),
        "roof_p": torch.tensor(10.0, dtype=torch.float64),
    }
    model.neighbour_x_ = torch.zeros((0, 4), dtype=torch.float64)
    model.neighbour_dtype_ = torch.zeros(0, dtype=torch.long)
    model.neighbour_log_ratio_ = torch.zeros(0, dtype=torch.float64)
    g = GemmBatch.from_dims(m=torch.tensor([64.0]), n=torch.tensor([17.0]),
                            k=torch.tensor([100.0]))
    pred = model.predict(g, cpu_spec())
    assert float(pred.time_ms[0]) == pytest.approx(0.008192, rel=1e-6)
    assert float(pred.details["last_wave_fill"][0]) == 0.5
    assert pred.bound == ("compute",)
    with pytest.raises(ValueError, match="no bfloat16 measurements; calibrated dtypes: float32"):
        model.predict(GemmBatch.from_dims(m=[8], n=[8], k=[8], dtype="bf16"), cpu_spec())


def synthetic(spec: DeviceSpec, rows: int = 240, seed: int = 1) -> MeasuredGemms:
    """Latencies of a known device: 1 µs floor, 100 GFLOP/s, 10 GB/s, ±5% noise."""
    gen = torch.Generator().manual_seed(seed)
    dims = torch.exp(torch.rand(rows, 3, generator=gen, dtype=torch.float64) * math.log(2048))
    dims = torch.round(dims) + 1
    g = GemmBatch.from_dims(m=dims[:, 0], n=dims[:, 1], k=dims[:, 2])
    noise = 1 + 0.05 * (2 * torch.rand(rows, generator=gen, dtype=torch.float64) - 1)
    ms = (1e-3 + torch.maximum(g.flops / 1e11, g.compulsory_bytes / 1e10) * 1e3) * noise
    return MeasuredGemms(g, gpu=("cpu",) * rows, source=("calibrate",) * rows,
                         timing=("wall",) * rows, latency_ms=ms).on_device(spec)


def test_fit_recovers_a_known_device() -> None:
    spec = cpu_spec(dram_bw_bytes_per_s=1e10)
    data = synthetic(spec)
    model = CalibratedPredictor(steps=400).fit(data)
    consts = model.physical_constants()
    # the sustained rate is recovered within 25% (par and half-dims trade off a little)
    assert consts["sustained_flops_per_s"]["float32"] == pytest.approx(1e11, rel=0.25)
    held = synthetic(spec, rows=60, seed=2)  # shapes the fit never saw
    score = summarize_errors(model.predict(held.gemms, spec).time_ms, held.latency_ms)
    assert score.median_ape < 0.15


# ------------------------------------------------------------------------------- files
def test_measurements_round_trip_in_the_data_schema(tmp_path: Path) -> None:
    spec = cpu_spec()
    runs = [Measurement(SweepPoint(2, 3, 5, 7, "float32", "random"), 0.0123, 7),
            Measurement(SweepPoint(1, 64, 64, 64, "bfloat16", "square"), 0.5, 7)]
    path = write_measurements(tmp_path / "m.csv", spec, runs, "wall")
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS
    rec = dict(zip(rows[0], rows[1]))
    assert (rec["gpu"], rec["source"], rec["timing"], rec["op"], rec["layout"]) == \
        ("cpu", "calibrate", "wall", "bmm", "A@B")
    back = read_measurements(path)
    assert back.gemms.batch.tolist() == [2.0, 1.0] and back.gemms.k.tolist() == [7.0, 64.0]
    assert back.latency_ms.tolist() == [0.0123, 0.5]
    assert back.gemms.dtype_names() == ["float32", "bfloat16"]
    # row 3 gets a bad latency: the error names file, line and column
    text = path.read_text().splitlines()
    text[2] = text[2].replace(",0.5,", ",-1,")
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(ValueError, match=r"m.csv line 3, column 'latency_ms'"):
        read_measurements(path)


@pytest.fixture(scope="module")
def profile_doc() -> dict:
    spec = cpu_spec(dram_bw_bytes_per_s=1e10)
    return fit_profile(spec, synthetic(spec, rows=120), steps=60, hybrid_steps=0)


def test_profile_round_trips(tmp_path: Path, profile_doc: dict) -> None:
    path = save_profile(tmp_path / "profile.json", profile_doc)
    spec, predictor = load_profile(path)
    assert spec.id == "cpu" and spec.sm_count == 2 and spec.architecture == "cpu"
    ms = predict_gemm_ms(path, m=100, n=200, k=300)
    assert isinstance(ms, float) and ms > 0
    direct = predictor.predict(GemmBatch.from_dims(m=[100], n=[200], k=[300]), spec)
    assert ms == pytest.approx(float(direct.time_ms[0]))
    assert set(profile_doc["fit"]["holdout"]) == {"calibrated_n1", "calibrated_n16",
                                                  "calibrated_n32"}


def test_a_profile_narrows_its_own_intervals(tmp_path: Path, profile_doc: dict) -> None:
    """The profile keeps the chosen candidate's residuals on the rows it was not fitted on (24
    of 120) as its device's own interval calibration: its 80% interval is narrower than the
    catalog's for a device from a spec file."""
    from torch_gemm_cost.predict import default_predictor
    from torch_gemm_cost.predict.intervals import default_calibration, uncertainty_of

    assert profile_doc["intervals"]["buckets"][0]["rows"] == 24
    path = save_profile(tmp_path / "profile.json", profile_doc)
    spec, predictor = load_profile(path)
    assert predictor.own_intervals_ is not None
    t, lo, hi, _ = predict_gemm_ms(path, m=512, n=512, k=512, interval=0.8)
    assert lo <= t <= hi
    if default_calibration() is not None:
        g = GemmBatch.from_dims(m=[512], n=[512], k=[512])
        unc = uncertainty_of(g, spec, default_predictor())
        assert unc is not None and unc.novelty == "spec_file"
        lo_c, hi_c = unc.gemm_bounds(torch.tensor([t], dtype=torch.float64), 0.8)
        assert hi / lo < float(hi_c[0] / lo_c[0])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(format="something.else"), "format is 'something.else'"),
        (lambda d: d.update(version=99), "version is 99"),
        (lambda d: d.pop("device"), "missing 'device'"),
        (lambda d: d["device"].pop("sm_count"), "'device' lacks 'sm_count'"),
        (lambda d: d["device"].update(sm_count="two"), "'device.sm_count' has type str"),
        (lambda d: d["device"]["peak_flops_per_s"].update(fp32=-1),
         "'device.peak_flops_per_s.fp32' must be a positive number"),
        (lambda d: d["predictor"].update(kind="magic"), "predictor kind is 'magic'; known"),
        (lambda d: d["predictor"]["params"].update(log_peak=[1.0, 2.0, 3.0]),
         "parameter 'log_peak' has shape"),
        (lambda d: d["predictor"]["params"].pop("roof_p"), "missing parameter 'roof_p'"),
        (lambda d: d["predictor"]["hyperparameters"].update(tile_n=0), "'tile_n' must be"),
        (lambda d: d["predictor"].update(dtypes=["float33"]), "unknown dtype 'float33'"),
    ],
)
def test_bad_profile_errors_name_the_file_and_entry(tmp_path: Path, profile_doc: dict,
                                                    mutate, message: str) -> None:
    doc = json.loads(json.dumps(profile_doc))
    mutate(doc)
    path = save_profile(tmp_path / "bad.json", doc)
    with pytest.raises(ValueError, match="bad.json") as err:
        load_profile(path)
    assert message in str(err.value)


def test_unreadable_profiles(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_profile(tmp_path / "nope.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": ')
    with pytest.raises(ValueError, match="broken.json.*not valid JSON"):
        load_profile(broken)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ValueError, match="list.json.*format is 'list'"):
        load_profile(listed)


# ------------------------------------------------------------------------------- the CPU target
def test_host_cpu_describes_this_machine() -> None:
    spec = host_cpu()
    assert spec.architecture == "cpu" and spec.sm_count == torch.get_num_threads()
    assert spec.peak("fp32") > 0 and spec.peak("fp64") == spec.peak("fp32") / 2
    assert 1e8 < spec.dram_bw_bytes_per_s < 1e13
    assert spec.l2_bytes >= 0 and (spec.l3_bytes is None or spec.l3_bytes > spec.l2_bytes)


def test_whole_loop_on_the_cpu_through_the_cli(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cal"
    code = main(["calibrate", "--device", "cpu", "--budget-s", "6", "--out", str(out),
                 "--reps", "3"])
    assert code == 0
    captured = capsys.readouterr()
    assert "calibrate [" in captured.err  # the progress bar
    assert "held-out MAPE" in captured.out
    data = read_measurements(out / "measurements.csv")
    assert len(data) >= 50 and set(data.timing) == {"wall"} and set(data.gpu) == {"cpu"}
    doc = json.loads((out / "profile.json").read_text())
    assert doc["calibration"]["measured"] == len(data)
    assert set(doc["fit"]["holdout"]) >= {"calibrated_n1", "calibrated_n16", "calibrated_n32"}
    spec, predictor = load_profile(out / "profile.json")
    pred = predictor.predict(data.gemms, spec).time_ms
    assert bool(torch.isfinite(pred).all()) and bool((pred > 0).all())
    # NB: accuracy is checked on synthetic data above and benchmarked in benchmarks/; on a
    # shared host other jobs can stall every run of a 6 s sweep. Size still orders the times:
    small, large = predict_gemm_ms(out / "profile.json", m=[8, 1024], n=[8, 1024],
                                   k=[8, 1024]).tolist()
    assert 0 < small < large < 1e4
    # the measurements feed predict-csv as they are, rows and predictions in the same order
    assert main(["predict-csv", str(out / "measurements.csv"), "--out", str(tmp_path / "p.csv"),
                 "--device-profile", str(out / "profile.json")]) == 0
    with open(tmp_path / "p.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["predicted_ms"]) for r in rows] == pytest.approx(pred.tolist(), rel=1e-5)


def test_gpu_timing_path_runs_on_the_cpu(tmp_path: Path) -> None:
    """The GPU path differs only in its timer: with a flushing timer the loop flushes before
    every timed run and records the timer's method in the timing column."""
    timer = FlushRecorder()
    result = cal.calibrate("cpu", 1.5, tmp_path, dtypes=["float32"], reps=3, fit_steps=30,
                           timer=timer)
    assert timer.calls.count("flush") * 2 == timer.calls.count("mark") > 0
    assert set(read_measurements(result.measurements_path).timing) == {"event"}


def test_cli_rejects_unknown_devices(tmp_path: Path, capsys) -> None:
    assert main(["calibrate", "--device", "tpu", "--budget-s", "1", "--out", str(tmp_path),
                 "--no-progress"]) == 2
    assert "device must be 'cpu', 'cuda' or 'cuda:N', got 'tpu'" in capsys.readouterr().err


@pytest.fixture()
def shipped_weights(tmp_path: Path, monkeypatch) -> Path:
    """Stand-in shipped hybrid weights (an unfitted hybrid's initial parameters)."""
    from torch_gemm_cost import predict
    from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor

    model = HybridPredictor(seed=0)
    model.params_ = model._init_params()
    path = model.save(tmp_path / "hybrid_weights.json")
    monkeypatch.setattr(predict, "shipped_weights_path", lambda: path)
    return path


def test_fit_fine_tunes_the_shipped_hybrid_as_a_candidate(shipped_weights: Path,
                                                          tmp_path: Path) -> None:
    spec = cpu_spec(dram_bw_bytes_per_s=1e10)
    doc = fit_profile(spec, synthetic(spec, rows=120), steps=60, hybrid_steps=5)
    assert "hybrid" in doc["fit"]["holdout"] and doc["fit"]["holdout"]["hybrid"]["n"] == 24
    # a profile that keeps the hybrid loads it back and predicts on the profile's own device
    from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor

    tuned = HybridPredictor.load(shipped_weights)
    doc["predictor"] = {"kind": "hybrid", "weights": tuned.to_dict()}
    path = save_profile(tmp_path / "hybrid_profile.json", doc)
    loaded_spec, predictor = load_profile(path)
    assert isinstance(predictor, HybridPredictor)
    ms = predict_gemm_ms(path, m=64, n=64, k=64)
    assert ms == pytest.approx(float(predictor.predict(
        GemmBatch.from_dims(m=[64], n=[64], k=[64]), loaded_spec).time_ms[0]))
    doc["predictor"]["weights"]["version"] = "7"  # a profile fitted before a model change
    with pytest.raises(ValueError, match=r"hybrid_profile.json.*version 7.*reads version "
                                         r"\d+: run `torch-gemm-cost calibrate` again"):
        load_profile(save_profile(path, doc))
    doc["predictor"]["weights"]["version"] = HybridPredictor.version
    doc["predictor"]["weights"]["params"].pop("eta_dram")
    with pytest.raises(ValueError, match="hybrid_profile.json.*eta_dram"):
        load_profile(save_profile(path, doc))


def test_other_jobs_share_from_cpu_times() -> None:
    # 10 s of host CPU time, 4 s idle, 3 s ours: others used the remaining 3 s, 30%
    assert cal._other_jobs_share((100.0, 1000.0, 5.0), (104.0, 1010.0, 8.0)) == \
        pytest.approx(0.3)
    assert cal._other_jobs_share(None, (1.0, 2.0, 3.0)) is None
    now = cal._cpu_times()
    assert now is None or (now[1] >= now[0] >= 0 and now[2] >= 0)


# ------------------------------------------------------------------------------- alignment sweep
def test_alignment_sweep_hand_worked() -> None:
    # one weight (n, k) = (64, 32), 8 tokens, offsets 0 and -1, float16:
    #   align_n: (8, 64, 32), (8, 63, 32); align_k: (8, 64, 32) again (kept once), (8, 64, 31);
    #   bias: (8, 64, 32) with a bias; layout (matmul): (8, 64, 32), (8, 63, 32), (8, 64, 31)
    # = 3 linear + 1 linear with bias + 3 matmul = 7 points
    pts = cal.design_alignment_sweep(cpu_spec(), ["float16"], weights=((64, 32),), tokens=(8,),
                                     offsets=(0, -1))
    got = sorted((p.op, p.bias, p.m, p.n, p.k, p.regime) for p in pts)
    assert got == [
        ("linear", False, 8, 63, 32, "align_n"), ("linear", False, 8, 64, 31, "align_k"),
        ("linear", False, 8, 64, 32, "align_n"), ("linear", True, 8, 64, 32, "bias"),
        ("matmul", False, 8, 63, 32, "layout"), ("matmul", False, 8, 64, 31, "layout"),
        ("matmul", False, 8, 64, 32, "layout"),
    ]
    assert [p.est_s for p in pts] == sorted(p.est_s for p in pts)
    # fp8 runs through a column-major-B kernel only: no matmul twins
    fp8 = cal.design_alignment_sweep(cpu_spec(), ["float8_e4m3fn"], weights=((64, 32),),
                                     tokens=(8,), offsets=(0, -1))
    assert {p.op for p in fp8} == {"linear"} and len(fp8) == 4


def test_alignment_dtypes_add_fp8_where_the_gpu_has_it() -> None:
    assert "float8_e4m3fn" in cal.alignment_dtypes(get_device("h200_sxm_141gb"))
    assert "float8_e4m3fn" not in cal.alignment_dtypes(get_device("a100_sxm4_80gb"))
    assert "float8_e4m3fn" not in cal.alignment_dtypes(cpu_spec())


def test_sweep_point_rejects_impossible_calls() -> None:
    with pytest.raises(ValueError, match=r"unknown op 'mm'; did you mean 'bmm'\?"):
        SweepPoint(1, 2, 3, 4, "float32", "x", op="mm")
    with pytest.raises(ValueError, match=r"op 'linear' takes batch 1, got batch=2"):
        SweepPoint(2, 2, 3, 4, "float32", "x", op="linear")
    with pytest.raises(ValueError, match=r"only op 'linear' fuses a bias"):
        SweepPoint(1, 2, 3, 4, "float32", "x", op="matmul", bias=True)


@pytest.mark.parametrize("op", ["bmm", "linear", "matmul"])
def test_each_sweep_op_computes_its_gemm(op: str) -> None:
    ops = timing._Operands("cpu")
    p = SweepPoint(1, 5, 7, 3, "float32", "x", op=op, bias=op == "linear")
    a, b = ops.get(p)
    out = ops.call(p)()
    if op == "bmm":
        want = a @ b
    elif op == "matmul":
        want = a.view(5, 3) @ b.view(3, 7)
    else:  # F.linear: the same buffer read as W (n, k), plus the bias pool
        want = a.view(5, 3) @ b.view(7, 3).T + ops._pool("bias", torch.float32, 7)[:7]
    torch.testing.assert_close(out, want)


def test_fp8_linear_runs_through_scaled_mm() -> None:
    ops = timing._Operands("cpu")
    p = SweepPoint(1, 4, 32, 16, "float8_e4m3fn", "x", op="linear")
    x, w = ops.get(p)
    out = ops.call(p)()
    assert out.dtype == torch.bfloat16 and out.shape == (4, 32)
    want = x.view(4, 16).float() @ w.view(32, 16).float().T
    torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2)


def test_refused_points_are_skipped_and_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuBLAS's fp8 kernels refuse dims off a multiple of 16; the sweep records that and goes
    on. Here torch._scaled_mm is made to refuse the same way on the CPU."""
    real = torch._scaled_mm

    def picky(a: torch.Tensor, b: torch.Tensor, *args: object, **kw: object) -> torch.Tensor:
        if a.shape[1] % 16:
            raise RuntimeError(f"Expected trailing dimension of mat1 to be divisible by 16 "
                               f"but got mat1 shape: ({a.shape[0]}x{a.shape[1]}).")
        return real(a, b, *args, **kw)

    monkeypatch.setattr(torch, "_scaled_mm", picky)
    pts = [SweepPoint(1, 4, 32, 16, "float8_e4m3fn", "align_k", op="linear"),
           SweepPoint(1, 4, 32, 15, "float8_e4m3fn", "align_k", op="linear")]
    refused: list = []
    runs = run_sweep(pts, "cpu", CpuTimer(), 5.0, reps=3, refused=refused)
    assert [r.point.k for r in runs] == [16]
    assert [(p.k, msg.split(" but")[0]) for p, msg in refused] == \
        [(15, "Expected trailing dimension of mat1 to be divisible by 16")]


class _SlowTimer:
    """Every run takes 2 ms, whatever the GEMM: long enough for the sweep to re-time it."""

    timing = "wall"

    def flush(self) -> None:
        pass

    def mark(self) -> None:
        return None

    def elapsed_ms(self, marks: list) -> list[float]:
        return [2.0] * len(marks)


def test_points_without_an_estimate_are_re_timed_last() -> None:
    """A point of 0.5 ms or more is re-timed in the budget's last quarter, the slowest against
    its estimate first; a point with no estimate (est_s 0) sorts last instead of dividing by
    zero."""
    pts = [SweepPoint(1, 8, 8, 8, "float32", "square"),
           SweepPoint(1, 16, 16, 16, "float32", "square", est_s=1e-3)]
    runs = run_sweep(pts, "cpu", _SlowTimer(), 5.0, reps=3)
    assert [(r.point.m, r.latency_ms) for r in runs] == [(8, 2.0), (16, 2.0)]


def test_linear_rows_and_kernels_in_the_data_schema(tmp_path: Path) -> None:
    spec = cpu_spec()
    p = SweepPoint(1, 8, 64, 32, "float16", "bias", op="linear", bias=True)
    gemm = ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_f16_128x256_64x3_tn_align2>"
            "(Params)")
    kernels = ("Memset (Device)", gemm, "cublasLt::splitKreduce_kernel")
    path = write_measurements(tmp_path / "m.csv", spec, [Measurement(p, 0.25, 7, kernels)],
                              "event", source="tgc-align")
    with open(path, newline="") as fh:
        rec = next(csv.DictReader(fh))
    # the GEMM kernel is named, not the workspace memset before it
    assert (rec["source"], rec["op"], rec["layout"], rec["bias"]) == \
        ("tgc-align", "linear", "x@W^T", "1")
    assert rec["kernel"] == kernels[1] and rec["n_kernels"] == "3"
    assert rec["aux_kernels"] == "Memset;cublasLt::splitKreduce_kernel"
    back = read_measurements(path)
    assert back.gemms.b_transposed.tolist() == [1.0] and back.gemms.bias.tolist() == [1.0]


def test_kernel_names_are_empty_on_the_cpu() -> None:
    pts = [SweepPoint(1, 4, 8, 8, "float32", "x"), SweepPoint(1, 4, 8, 8, "float32", "x",
                                                             op="linear")]
    assert cal.kernel_names(pts, "cpu") == [(), ()]
