"""Collective profiles: nccl-tests logs read (the hand-written samples in tests/data, whose
numbers are illustrative), the measured bus bandwidth interpolated in log-size, the collective
model outside it, the file's format checked, and the profile in a training plan."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import main
from torch_gemm_cost.measured.nccl_tests import (
    format_nccl_tests,
    parse_nccl_tests,
    read_nccl_tests,
)
from torch_gemm_cost.predict.collectives import (
    HOST_SPREAD,
    collective_interval_ms,
    predict_collective_ms,
    with_nccl_host,
)
from torch_gemm_cost.predict.comm_profile import (
    CommMeasurement,
    CommProfile,
    bus_factor,
    load_comm_profile,
)

DATA = Path(__file__).resolve().parent / "data"
ALL_REDUCE = DATA / "all_reduce_perf_8xa100.txt"
ALL_GATHER = DATA / "all_gather_perf_2x8xa100.txt"
DEVICE = "a100_sxm4_80gb"


def test_a_log_gives_its_test_ranks_hosts_and_rows() -> None:
    rows, gpu = parse_nccl_tests(ALL_REDUCE.read_text(), str(ALL_REDUCE))
    assert gpu == "NVIDIA A100-SXM4-80GB"
    assert {(r.collective, r.num_gpus, r.gpus_per_node) for r in rows} == {("all_reduce", 8, 8)}
    # the 8 B .. 8 GiB sweep, doubling: 31 sizes; the 16 MiB row reads 152.51 us out of place,
    # 150.23 us in place
    assert len(rows) == 31
    row = next(r for r in rows if r.size_bytes == 2**24)
    assert (row.time_us, row.in_place_time_us) == (152.51, 150.23)
    # busbw = size / time · 2(n - 1)/n = 16777216 B / 152.51 us · 1.75 = 192.5 GB/s, as logged
    assert row.busbw_bytes_per_s / 1e9 == pytest.approx(192.51, abs=0.01)
    # no "test starting" line in the all_gather log: its file name names it; 16 ranks on 2 hosts
    rows, _ = parse_nccl_tests(ALL_GATHER.read_text(), str(ALL_GATHER))
    assert {(r.collective, r.num_gpus, r.gpus_per_node) for r in rows} == {("all_gather", 16, 8)}


def test_busbw_is_interpolated_in_log_size() -> None:
    p = CommProfile((CommMeasurement("all_reduce", 8, 8, 2**20, 40.0),
                     CommMeasurement("all_reduce", 8, 8, 2**22, 80.0)))
    b0 = 2**20 * 1.75 / 40e-6  # 45.9 GB/s
    b1 = 2**22 * 1.75 / 80e-6  # 91.8 GB/s
    # 2 MiB is halfway in log-size: busbw (b0 + b1)/2, time = size · 1.75 / busbw
    t = p.time_ms("all_reduce", 2**21, 8, 8)
    assert t == pytest.approx(1e3 * 2**21 * 1.75 / ((b0 + b1) / 2))
    assert p.time_ms("all_reduce", 2**20, 8, 8) == pytest.approx(0.040)
    assert p.time_ms("all_reduce", 2**23, 8, 8) is None  # outside: the model's
    assert p.time_ms("all_reduce", 2**21, 4, 4) is None  # a group not measured
    assert bus_factor("all_gather", 16) == 15 / 16 and bus_factor("send_recv", 2) == 1.0


def test_the_profile_prices_what_it_measured_and_the_model_the_rest() -> None:
    profile = read_nccl_tests([ALL_REDUCE, ALL_GATHER])
    measured = tgc.predict_collective_ms(DEVICE, "all_reduce", size_bytes=2**24, num_gpus=8,
                                         comm_profile=profile)
    assert measured == pytest.approx(0.15251)
    model = tgc.predict_collective_ms(DEVICE, "all_reduce", size_bytes=2**24, num_gpus=4)
    assert tgc.predict_collective_ms(DEVICE, "all_reduce", size_bytes=2**24, num_gpus=4,
                                     comm_profile=profile) == model
    lo, hi = collective_interval_ms(DEVICE, "all_gather", size_bytes=2**28, num_gpus=16)
    assert lo < hi and math.isfinite(hi)


def test_a_profile_file_is_checked(tmp_path: Path) -> None:
    path = read_nccl_tests([ALL_REDUCE]).save(tmp_path / "comm.json")
    assert load_comm_profile(path).groups() == (("all_reduce", 8, 8),)
    doc = json.loads(path.read_text())
    (tmp_path / "v2.json").write_text(json.dumps({**doc, "version": 2}))
    with pytest.raises(ValueError, match="version is 2, this reader knows 1"):
        load_comm_profile(tmp_path / "v2.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something"}))
    with pytest.raises(ValueError, match="expected 'torch_gemm_cost.comm_profile'"):
        load_comm_profile(tmp_path / "other.json")
    (tmp_path / "log.txt").write_text("# nThread 1 nGpus 1\n")
    with pytest.raises(ValueError, match="log.txt: the log does not say which test ran"):
        read_nccl_tests([tmp_path / "log.txt"])


def test_calibrate_comm_then_a_plan_with_the_profile(tmp_path: Path, capsys) -> None:
    out = tmp_path / "comm.json"
    assert main(["calibrate-comm", str(ALL_REDUCE), str(ALL_GATHER), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "all_reduce" in text and "all_gather" in text
    tiny = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 8, "vocab_size": 512,
            "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0}
    base = tgc.plan_training(tiny, DEVICE, tp=8, seq=64)
    measured = tgc.plan_training(tiny, DEVICE, tp=8, seq=64, comm_profile=out)
    # the tensor-parallel all-reduces (8 GPUs, one node) come from the profile: its floor of
    # about 26 us per small all-reduce, not the model's
    assert measured.comm_ms["tensor"] != base.comm_ms["tensor"]
    assert measured.step_interval_ms[0] == measured.step_interval_ms[1] == measured.step_ms
    assert "comm profile (all_reduce_perf_8xa100.txt" in measured.comm_source


def test_a_written_log_reads_back_to_its_rows() -> None:
    # oracle: the sample log's rows written again and read by the same reader as calibrate-comm
    rows, gpu = parse_nccl_tests(ALL_REDUCE.read_text(), str(ALL_REDUCE))
    again, gpu2 = parse_nccl_tests(format_nccl_tests(rows, gpu or ""), "again")
    assert again == rows and gpu2 == gpu
    sends = [CommMeasurement("send_recv", 2, 1, 2.0**20, 50.0)]
    text = format_nccl_tests(sends, "NVIDIA A40", element_bytes=1)
    # 1 MiB in 50 us: algbw = busbw = 1048576 / 50e-6 = 20.97 GB/s; two ranks on two hosts
    assert "    50.00   20.97   20.97" in text and "on host1 device  0" in text
    assert parse_nccl_tests(text, "s")[0] == tuple(sends)
    with pytest.raises(ValueError, match="one test a log: got 2"):
        format_nccl_tests([*rows[:1], *sends], "x")
    with pytest.raises(ValueError, match="element_bytes=3.*nearest good: 2"):
        format_nccl_tests(sends, "x", element_bytes=3)


def test_the_interval_spans_the_held_out_host_spread_within_a_node() -> None:
    # within a node: low = min(prior·0.70, NCCL's), high = max(prior·8.49, NCCL's)
    call = {"size_bytes": 2**26, "num_gpus": 8}
    prior = predict_collective_ms(DEVICE, "all_reduce", **call)
    lo, hi = collective_interval_ms(DEVICE, "all_reduce", **call)
    assert lo <= prior * HOST_SPREAD[0] + 1e-12 and hi >= prior * HOST_SPREAD[1] - 1e-12
    # across nodes (16 GPUs, 8 a node) no held-out spread: the fit's host constants to NCCL's
    from torch_gemm_cost.hardware.catalog import get_device
    from torch_gemm_cost.predict.collectives import _shipped, check_call

    spec = get_device(DEVICE)
    c = check_call(spec, "all_reduce", size_bytes=2**26, num_gpus=16)
    fitted = float(_shipped().predict([c], spec).time_ms[0])
    nccl = float(with_nccl_host(_shipped()).predict([c], spec).time_ms[0])
    assert collective_interval_ms(DEVICE, "all_reduce", size_bytes=2**26, num_gpus=16) == (
        pytest.approx(min(fitted, nccl)), pytest.approx(max(fitted, nccl)))


def test_nccl_host_constants_price_a_dgx_network_faster_than_the_fitted_cluster() -> None:
    # the fitted network efficiency comes from Vidur's cluster (about a fifth of a DGX A100's
    # 8x 200 Gb/s); NCCL's constants take 0.8 of it: a 1 GiB all-reduce over 16 GPUs, 8 a
    # node, is bandwidth-bound and so about 0.8 / 0.21 = 3.8x faster (more than 2x here)
    from torch_gemm_cost.hardware.catalog import get_device
    from torch_gemm_cost.predict.collectives import nccl_host_collective_ms
    from torch_gemm_cost.trainplan.comm import Collectives

    call = {"size_bytes": 2**30, "num_gpus": 16, "gpus_per_node": 8}
    fitted = predict_collective_ms(DEVICE, "all_reduce", **call)
    nccl = nccl_host_collective_ms(DEVICE, "all_reduce", **call)
    assert nccl < fitted / 2
    coll = Collectives(get_device(DEVICE), None, "reference")
    assert coll.ms("all_reduce", 2**30, 16, 8) == pytest.approx(nccl)
