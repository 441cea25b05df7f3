"""One device resolver for every entry point: catalog ids, driver names, DeviceSpecs, spec files
and calibration profiles mean the same device everywhere, collectives included."""

from __future__ import annotations

import csv
import json
import math
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import main
from torch_gemm_cost.hardware.catalog import DeviceSpec, get_device, spec_to_record
from torch_gemm_cost.hardware.datasheet import SpecFallbackWarning, template
from torch_gemm_cost.hardware.target import Target, resolve_target
from torch_gemm_cost.predict import GemmBatch, RooflinePredictor
from torch_gemm_cost.predict.collectives import CollectiveCall, _shipped
from torch_gemm_cost.predict.gemm.calibrated import CalibratedPredictor
from torch_gemm_cost.predict.profile import FORMAT, VERSION, profile_predictor

H100 = "h100_sxm5_80gb"
DRIVER_NAME = "NVIDIA H100 80GB HBM3"  # what torch.cuda.get_device_name() says on one
GIB = 2**30
TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 1024, "max_position_embeddings": 4096, "tie_word_embeddings": False}
ROOF = RooflinePredictor()


def spec_file(tmp_path: Path, name: str = "my_h100", **facts: Any) -> Path:
    """A spec file of an H100 (the catalog's facts, as ``devices --template --like`` writes
    them) under another id, with ``facts`` changed."""
    record = {**template(get_device(H100)), "id": name, "name": name.replace("_", " "), **facts}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(record))
    return path


def calibrated_profile(tmp_path: Path, spec: DeviceSpec) -> Path:
    """A calibration profile of ``spec`` with a hand-set calibrated predictor (no measured
    neighbours): its times differ from the shipped hybrid's, so a test sees which ran."""
    dtypes = ["float32", "bfloat16", "float16"]

    def per_dtype(value: float) -> list[float]:
        return [math.log(value)] * len(dtypes)

    params = {"log_peak": per_dtype(2e14), "log_floor_ms": per_dtype(0.01),
              "log_floor_big_ms": per_dtype(0.012), "log_switch_flops": per_dtype(1e9),
              "log_m_half": per_dtype(16.0), "log_n_half": per_dtype(16.0),
              "log_k_half": per_dtype(16.0), "log_bw_dram": math.log(2e12),
              "log_bw_llc": math.log(5e12), "log_bw_out": math.log(2e12),
              "log_par_flops": math.log(1e8), "pack": 0.0, "roof_p": 0.0}
    predictor = {"kind": "calibrated", "version": "1",
                 "hyperparameters": CalibratedPredictor().get_params(), "dtypes": dtypes,
                 "params": params, "neighbours": {"log2_dims": [], "dtype": [], "log_ratio": []}}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"format": FORMAT, "version": VERSION,
                                "device": spec_to_record(spec), "predictor": predictor}))
    return path


@pytest.fixture()
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecFallbackWarning)
        yield


# ---------------------------------------------------------------- the resolver itself
def test_each_kind_of_argument_resolves_and_says_where_it_came_from(tmp_path, quiet):
    h100 = get_device(H100)
    assert resolve_target(H100) == Target(h100, "catalog")
    assert resolve_target(DRIVER_NAME) == Target(h100, "catalog")
    assert resolve_target(h100) == Target(h100, "DeviceSpec given")
    path = spec_file(tmp_path, peer_link_bw_gbps=900.0)
    from_file = resolve_target(path)
    assert from_file.source == f"spec file {path}" and from_file.profile is None
    assert from_file.spec.id == "my_h100" and from_file.spec.origin == "spec_file"
    assert from_file.spec.peer_link_bw_bytes_per_s == 900e9  # the file's, not the catalog's
    profile = calibrated_profile(tmp_path, from_file.spec)
    from_profile = resolve_target(str(profile))
    assert from_profile == Target(from_file.spec, f"profile {profile}")
    assert isinstance(profile_predictor(from_profile), CalibratedPredictor)
    assert profile_predictor(from_file) is None


def test_an_unknown_name_lists_the_nearest_good_ones():
    with pytest.raises(ValueError, match=r"unknown device 'h100_sxm5'.*'h100_sxm5_80gb'"):
        resolve_target("h100_sxm5")
    with pytest.raises(TypeError, match="got 3"):
        resolve_target(3)  # type: ignore[arg-type]


# ---------------------------------------------------------------- collectives on any record
def test_a_spec_file_gpu_with_twice_the_nvlink_halves_the_bandwidth_term(tmp_path, quiet):
    """1 GiB all-reduce on 2 GPUs of an NVSwitch node, ring/Simple (no NVLS at 2 GPUs; one node:
    no tree), nccl-tests timing. With the shipped constants (eta = NVLink efficiency, c = the
    local chunks of an all-reduce, s = latency scale):

        latency   = s · (base_simple + 2(n−1) · hop_simple)   = s · (8.4 + 2 · 3.4) µs
        bandwidth = (2(n−1)/n · S + c · S/n) / (B · eta)       = (1 + c/2) · S / (B · eta)

    The catalog H100 has B = 450e9 B/s one way; the spec file says 900 GB/s, so its bandwidth
    term is half the catalog's and the latency the same (about 0.020 ms + 4.16 ms -> 2.08 ms)."""
    p = _shipped().physical_constants()
    s, eta, c = p["latency_scale"], p["eta_link"]["nvlink"], p["local_chunks"]["all_reduce"]
    latency_ms = s * (p["base_us"]["simple"] + 2 * p["hop_us"]["simple"]) * 1e-3
    bandwidth_ms = (1 + c / 2) * GIB / (450e9 * eta) * 1e3
    catalog = tgc.predict_collective_ms(H100, "all_reduce", size_bytes=GIB, num_gpus=2)
    assert catalog == pytest.approx(latency_ms + bandwidth_ms, rel=1e-9)
    doubled = spec_file(tmp_path, peer_link_bw_gbps=900.0)
    mine = tgc.predict_collective_ms(str(doubled), "all_reduce", size_bytes=GIB, num_gpus=2)
    assert mine == pytest.approx(latency_ms + bandwidth_ms / 2, rel=1e-9)
    # a spec file that keeps the catalog's id but edits its links is priced by its own links
    edited = spec_file(tmp_path, name=H100, peer_link_bw_gbps=900.0)
    assert resolve_target(edited).spec.id == H100
    same_id = tgc.predict_collective_ms(edited, "all_reduce", size_bytes=GIB, num_gpus=2)
    assert same_id == pytest.approx(mine, rel=1e-12)
    # and a copy of the catalog's facts under another name is the catalog's GPU
    copy = tgc.predict_collective_ms(spec_file(tmp_path, name="my_copy"), "all_reduce",
                                     size_bytes=GIB, num_gpus=2)
    assert copy == catalog


def test_the_collective_model_reads_the_record_it_is_given():
    """predict(calls, device) prices the calls on the record it is handed, even one the catalog
    never had: a PCIe-only node of the H100's GPUs crosses PCIe Gen5 (64e9 B/s), not NVLink."""
    h100 = get_device(H100)
    pcie_node = replace(h100, id="h100_on_pcie", peer_link=None, peer_links=0,
                        peer_link_bw_bytes_per_s=None, node_fabric="pcie")
    call = [CollectiveCall("all_reduce", float(GIB), 2, 2)]
    model = _shipped()
    p = model.physical_constants()
    on_pcie = float(model.predict(call, pcie_node).time_ms[0])
    latency_ms = p["latency_scale"] * (p["base_us"]["simple"] + 2 * p["pcie_hop_scale"]
                                       * p["hop_us"]["simple"]) * 1e-3
    bandwidth_ms = (1 + p["local_chunks"]["all_reduce"] / 2) * GIB / (
        64e9 * p["eta_link"]["pcie"]) * 1e3
    assert on_pcie == pytest.approx(latency_ms + bandwidth_ms, rel=1e-9)
    on_nvlink = float(model.predict(call, h100).time_ms[0])
    assert on_nvlink < on_pcie
    # one record per call prices each call on its own device
    both = model.predict(call * 2, [h100, pcie_node]).time_ms
    assert both.tolist() == [on_nvlink, on_pcie]
    with pytest.raises(ValueError, match="one device for every call or one per call"):
        model.predict(call * 2, [h100, pcie_node, h100])


def test_plan_llm_tp2_on_a_spec_file_gpu_follows_the_files_links(tmp_path, quiet):
    kw = {"dtype": "bf16", "prompt": 512, "gen": 64, "batches": [8], "tp": 2}
    doubled = spec_file(tmp_path, peer_link_bw_gbps=900.0)
    mine = tgc.plan_llm(TINY, device=str(doubled), **kw)
    catalog = tgc.plan_llm(TINY, device=H100, **kw)
    # per decode step of 8 tokens: 2 all-reduces a layer and one after the embedding, of
    # 8 tokens · 256 hidden · 2 bytes, and an all-gather of 8 sampled tokens' 1024 logits
    reduce = tgc.predict_collective_ms(doubled, "all_reduce", size_bytes=8 * 256 * 2, num_gpus=2)
    gather = tgc.predict_collective_ms(doubled, "all_gather", size_bytes=8 * 1024 * 2,
                                       num_gpus=2)
    assert mine.rows[0].decode_comm_ms == pytest.approx(5 * reduce + gather, rel=1e-12)
    # twice the NVLink moves the bytes in less time; the GEMMs run on the same chip
    assert mine.rows[0].decode_comm_ms < catalog.rows[0].decode_comm_ms
    assert mine.device.id == "my_h100"


# ---------------------------------------------------------------- every entry point agrees
KINDS = ("catalog id", "driver name", "DeviceSpec", "spec file", "profile")


def argument(kind: str, tmp_path: Path) -> tuple[Any, DeviceSpec]:
    """The device argument of ``kind`` and the DeviceSpec it must resolve to. The spec file and
    the profile hold an H100 whose DRAM is slower than the catalog's, so a resolver that fell
    back to the catalog would be seen."""
    if kind in ("catalog id", "driver name", "DeviceSpec"):
        h100 = get_device(H100)
        return {"catalog id": H100, "driver name": DRIVER_NAME, "DeviceSpec": h100}[kind], h100
    path = spec_file(tmp_path, mem_bw_gbps=2000.0, peer_link_bw_gbps=900.0)
    spec = resolve_target(path).spec
    assert spec.dram_bw_bytes_per_s == 2000e9
    return (path if kind == "spec file" else calibrated_profile(tmp_path, spec)), spec


def tiny_model() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 64)), (torch.randn(8, 64),)


@pytest.mark.parametrize("kind", KINDS)
def test_predict_gemm_ms_and_explain(kind, tmp_path, quiet):
    device, spec = argument(kind, tmp_path)
    # the roofline: 2 · 4096³ bf16 FLOPs at the H100's 989.4e12 FLOP/s; the memory term
    # (3 · 4096² · 2 B / DRAM bw) is far smaller on either DRAM
    t = tgc.predict_gemm_ms(device, m=4096, n=4096, k=4096, dtype="bf16", predictor=ROOF)
    assert t == pytest.approx(2 * 4096**3 / 989.4e12 * 1e3, rel=1e-12)
    # a memory-bound one shows the DRAM: 64 x 8192 x 8192 bf16 moves (64·8192 + 8192² +
    # 64·8192) · 2 B
    mem = tgc.predict_gemm_ms(device, m=64, n=8192, k=8192, dtype="bf16", predictor=ROOF)
    moved = (64 * 8192 + 8192 * 8192 + 64 * 8192) * 2
    assert mem == pytest.approx(moved / spec.dram_bw_bytes_per_s * 1e3, rel=1e-12)
    (row,) = tgc.explain(device, m=64, n=8192, k=8192, dtype="bf16", predictor=ROOF)
    assert row["time_ms"] == mem and row["bound"] == "memory"


@pytest.mark.parametrize("kind", KINDS)
def test_predict_collective_ms(kind, tmp_path, quiet):
    device, spec = argument(kind, tmp_path)
    got = tgc.predict_collective_ms(device, "all_reduce", size_bytes=GIB, num_gpus=8)
    call = CollectiveCall("all_reduce", float(GIB), 8, 8)
    assert got == float(_shipped().predict([call], spec).time_ms[0])


@pytest.mark.parametrize("kind", KINDS)
def test_estimate_compare_and_annotate(kind, tmp_path, quiet):
    device, spec = argument(kind, tmp_path)
    model, args = tiny_model()
    report = tgc.estimate(model, args, device=device, dtype="bf16", predictor=ROOF)
    assert report.device == spec and report.device.id == spec.id
    reports = tgc.compare(model, args, devices=[device, H100], dtypes=["bf16"], predictor=ROOF)
    assert [r.device for r in reports] == [spec, get_device(H100)]
    assert [g.time_ms for g in reports[0].gemms] == [g.time_ms for g in report.gemms]
    assert len(report.gemms) == 2
    # both Linears (8 x 64 x 256: 6.9 FLOP/B) are memory-bound, so each GEMM's roofline time
    # is its bytes over the resolved device's DRAM bandwidth: times scale as 1 / bandwidth
    assert [g.time_ms * spec.dram_bw_bytes_per_s for g in reports[0].gemms] == pytest.approx(
        [g.time_ms * 3350e9 for g in reports[1].gemms], rel=1e-12)
    graph = tgc.annotate(model, args, device=device, dtype="bf16")
    assert any("torch_gemm_cost" in n.meta for n in graph.graph.nodes)


@pytest.mark.parametrize("kind", KINDS)
def test_plan_llm(kind, tmp_path, quiet):
    device, spec = argument(kind, tmp_path)
    plan = tgc.plan_llm(TINY, device=device, dtype="bf16", prompt=128, gen=16, batches=[1],
                        predictor=ROOF)
    assert plan.device == spec and plan.device.id == spec.id


@pytest.mark.parametrize("kind", ["catalog id", "driver name", "spec file", "profile"])
def test_predict_csv(kind, tmp_path, quiet):
    device, spec = argument(kind, tmp_path)
    flags: list[str] = []
    gpu = str(device)
    if kind == "spec file":
        flags, gpu = ["--device-spec", str(device)], spec.id  # the file's records, by name
    elif kind == "profile":
        flags, gpu = ["--device-profile", str(device)], spec.name  # the profile's device
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text(f"gpu,op,dtype,batch,m,n,k\n{gpu},mm,bf16,1,64,8192,8192\n")
    assert main(["predict-csv", str(src), "--out", str(out), *flags]) == 0
    with out.open() as fh:
        (row,) = list(csv.DictReader(fh))
    expected = tgc.predict_gemm_ms(device, m=64, n=8192, k=8192, dtype="bf16")
    assert float(row["predicted_ms"]) == pytest.approx(expected, rel=1e-5)  # 6 digits written
    if kind != "profile":  # the default predictor on the resolved spec
        assert expected == tgc.predict_gemm_ms(spec, m=64, n=8192, k=8192, dtype="bf16")


def test_every_entry_point_names_the_nearest_good_device(tmp_path, capsys):
    wrong = "h100_sxm5"
    model, args = tiny_model()
    calls = [
        lambda: tgc.predict_gemm_ms(wrong, m=8, n=8, k=8),
        lambda: tgc.explain(wrong, m=8, n=8, k=8),
        lambda: tgc.predict_collective_ms(wrong, "all_reduce", size_bytes=1024, num_gpus=2),
        lambda: tgc.estimate(model, args, device=wrong),
        lambda: tgc.compare(model, args, devices=[H100, wrong]),
        lambda: tgc.annotate(model, args, device=wrong),
        lambda: tgc.plan_llm(TINY, device=wrong, prompt=128, gen=16, batches=[1]),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"unknown device 'h100_sxm5'.*'h100_sxm5_80gb'"):
            call()
    src = tmp_path / "in.csv"
    src.write_text(f"gpu,op,dtype,batch,m,n,k\n{wrong},mm,bf16,1,8,8,8\n")
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert "unknown device 'h100_sxm5'" in capsys.readouterr().err


# ---------------------------------------------------------------- a profile's own predictor
def test_a_profile_path_brings_its_predictor_everywhere(tmp_path, quiet):
    spec = resolve_target(spec_file(tmp_path)).spec
    profile = calibrated_profile(tmp_path, spec)
    own = profile_predictor(resolve_target(profile))
    assert isinstance(own, CalibratedPredictor)
    gemms = GemmBatch.from_dims(m=[64], n=[8192], k=[8192], dtype="bfloat16")
    by_hand = float(own.predict(gemms, spec).time_ms[0])
    assert by_hand != pytest.approx(tgc.predict_gemm_ms(spec, m=64, n=8192, k=8192,
                                                        dtype="bf16"), rel=1e-3)
    assert tgc.predict_gemm_ms(profile, m=64, n=8192, k=8192, dtype="bf16") == by_hand
    (row,) = tgc.explain(profile, m=64, n=8192, k=8192, dtype="bf16")
    assert row["time_ms"] == by_hand and "neighbour_ratio" in row  # the calibrated model's
    model, args = tiny_model()
    report = tgc.estimate(model, args, device=profile, dtype="bf16")
    assert report.predictor == "calibrated"
    reports = tgc.compare(model, args, devices=[profile, H100], dtypes=["bf16"])
    assert reports[0].predictor == "calibrated" and reports[1].predictor != "calibrated"
    plan = tgc.plan_llm(TINY, device=profile, dtype="bf16", prompt=128, gen=16, batches=[1])
    assert plan.predictor.startswith("calibrated")
    # a predictor given by the caller wins over the profile's
    given = tgc.estimate(model, args, device=profile, dtype="bf16", predictor=ROOF)
    assert given.predictor == ROOF.name
