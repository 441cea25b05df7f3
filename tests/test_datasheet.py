"""A GPU from its datasheet: spec records round-trip to the catalog's DeviceSpec, each impossible
value is named with its unit and a similar GPU's value, fallbacks are said once, a spec file is
told from a profile by content, and a spec-file device predicts exactly as a catalog one."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import main
from torch_gemm_cost.hardware import catalog as devices
from torch_gemm_cost.hardware.catalog import spec_from_record
from torch_gemm_cost.hardware.datasheet import (
    SPEC_FIELDS,
    TEMPLATE_FIELDS,
    SpecError,
    SpecFallbackWarning,
    catalog_record,
    datasheet_record,
    document_kind,
    load_spec_file,
    template,
)
from torch_gemm_cost.hardware.target import resolve_target
from torch_gemm_cost.predict.profile import profile_predictor
from torch_gemm_cost.predict.query import predict_gemm_ms

ROOT = Path(__file__).resolve().parents[1]
CATALOG_IDS = [d.id for d in tgc.list_devices()]


def _build_catalog() -> Any:
    spec = importlib.util.spec_from_file_location("build_catalog",
                                                  ROOT / "scripts" / "build_catalog.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_catalog"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def without(monkeypatch):
    """``without(id)``: the catalog lacks that GPU for the rest of the test."""

    def cut(device_id: str) -> None:
        rest = {k: v for k, v in devices._catalog().items() if k != device_id}
        monkeypatch.setattr(devices, "_catalog", lambda: rest)
        devices._by_name.cache_clear()
        with pytest.raises(ValueError, match="unknown device"):
            tgc.get_device(device_id)

    yield cut
    monkeypatch.undo()
    devices._by_name.cache_clear()


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc, indent=1))
    return path


def _quiet_load(path: Path) -> list[tgc.DeviceSpec]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecFallbackWarning)
        return load_spec_file(path)


# ---------------------------------------------------------------- one conversion, round trips
def test_every_gpus_json_record_is_the_catalogs_spec_through_a_spec_file(data_dir, tmp_path):
    build = _build_catalog()
    shipped = json.loads((ROOT / "torch_gemm_cost" / "data" / "devices.json").read_text())
    records = json.loads((data_dir / "devices" / "gpus.json").read_text())
    for rec in records + build.extra_records():  # and the boards gpus.json lacks
        # the catalog is what the one conversion makes of the record (devices.json is current)
        record, _ = build.convert(rec)
        assert json.loads(json.dumps(record)) in shipped["devices"], rec["id"]
        # and the record as a spec file is the catalog's DeviceSpec, field for field
        path = _write(tmp_path / f"{rec['id']}.json", build.spec_file_record(rec))
        spec = _quiet_load(path)[0]
        catalog = tgc.get_device(rec["id"])
        assert spec == catalog, rec["id"]
        assert spec.origin == "spec_file" and catalog.origin == "catalog"


@pytest.mark.parametrize("device_id", CATALOG_IDS)
def test_a_catalog_spec_as_a_record_reads_back_to_itself(device_id):
    spec = tgc.get_device(device_id)
    record, _ = catalog_record(datasheet_record(spec))
    back = spec_from_record(record)
    assert back == spec
    assert back.notes == spec.notes and back.interconnect_sources == spec.interconnect_sources


@pytest.mark.parametrize("device_id", CATALOG_IDS)
def test_the_template_like_a_catalog_gpu_loads_back_to_it_once_filled(device_id, tmp_path):
    like = tgc.get_device(device_id)
    filled = template(like)
    assert filled["id"] is None and filled["name"] is None and filled["aliases"] == []
    # the user names the GPU; the rest was pre-filled from the catalog GPU
    filled.update(id="my_gpu", name="My GPU", _uncertain=list(like.uncertain))
    spec = _quiet_load(_write(tmp_path / "my_gpu.json", filled))[0]
    assert spec.id == "my_gpu" and spec.name == "My GPU" and spec.aliases == ()
    from dataclasses import replace
    assert replace(spec, id=like.id, name=like.name, aliases=like.aliases) == like


def test_the_cli_template_filled_in_loads_and_estimates(tmp_path, capsys):
    assert main(["devices", "--template"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert "--device" in err and "_help" in doc
    assert list(doc)[:len(TEMPLATE_FIELDS)] == list(TEMPLATE_FIELDS)
    assert all(doc[k] is None for k in ("id", "sm_count", "mem_bw_gbps", "peak_tflops_fp16"))
    # the units are in the field names, as gpus.json has them
    assert {"mem_bw_gbps", "l2_mb", "boost_clock_mhz", "peak_tflops_bf16"} <= set(doc)
    doc.update(id="rtx_pro_6000", name="NVIDIA RTX PRO 6000 Blackwell", vendor="NVIDIA",
               architecture="Blackwell", chip="GB202", compute_capability="12.0",
               sm_count=188, boost_clock_mhz=2617, peak_tflops_fp32=126.0,
               peak_tflops_fp16=503.8, peak_tflops_bf16=503.8, peak_tflops_tf32=126.0,
               peak_tflops_fp8=1007.6, mem_gb=96, mem_bw_gbps=1792, l2_mb=128, tdp_w=600)
    path = _write(tmp_path / "rtx_pro_6000.json", doc)
    with pytest.warns(SpecFallbackWarning, match="base_clock_mhz -> none"):
        assert main(["devices", str(path)]) == 0
    assert "rtx_pro_6000" in capsys.readouterr().out
    with pytest.warns(SpecFallbackWarning):
        t = predict_gemm_ms(path, m=4096, n=4096, k=4096, dtype="bf16")
    assert 0.2 < t < 2.0  # 137 GFLOP at 504 TFLOP/s peak: 0.27 ms at peak


def test_template_like_an_unknown_gpu_names_close_matches(capsys):
    assert main(["devices", "--template", "--like", "h100_sxm"]) == 2
    assert "h100_sxm5_80gb" in capsys.readouterr().err


# ---------------------------------------------------------------- validation that teaches
def _h100() -> dict[str, Any]:
    rec = datasheet_record(tgc.get_device("h100_sxm5_80gb"))
    rec.update(id="my_hopper", name="My Hopper", aliases=[])
    return rec


CASES: list[tuple[str, dict[str, Any], str]] = [
    ("no SM count", {"sm_count": None},
     r"sm_count \(SMs or CUs\) is missing.*h100_sxm5_80gb has 132"),
    ("bandwidth in TB/s", {"mem_bw_gbps": 3.35},
     (r"mem_bw_gbps \(GB/s\) = 3\.35: outside the plausible 50-20000 GB/s; it looks like "
      r"TB/s: 3350 GB/s; h100_sxm5_80gb has 3350")),
    ("bandwidth in MB/s", {"mem_bw_gbps": 3350000},
     r"mem_bw_gbps \(GB/s\) = 3350000: .*it looks like MB/s: 3350 GB/s"),
    ("dense above sparse", {"peak_tflops_fp16": 1979, "peak_tflops_fp16_sparse": 989.5},
     (r"peak_tflops_fp16 \(TFLOP/s, dense\) = 1979 is above peak_tflops_fp16_sparse = 989\.5"
      r".*h100_sxm5_80gb has 989\.4")),
    ("a sparse figure as the dense one", {"peak_tflops_fp16": 1979, "peak_tflops_bf16": 1979},
     (r"peak_tflops_fp16 .* needs a tensor clock of 3660 MHz at 4096 FLOP/clk on 132 SMs, "
      r"above the boost clock.*with-sparsity figure \(dense: half, 989\.5\)")),
    ("sparse fp8 beside dense fp16", {"peak_tflops_fp8": 3958},
     (r"peak_tflops_fp8 \(TFLOP/s, dense\) = 3958 is over 2x peak_tflops_fp16.*h100_sxm5_80gb "
      r"has 1978\.9")),
    ("base clock above boost", {"base_clock_mhz": 2100},
     r"base_clock_mhz \(MHz\) = 2100 is above boost_clock_mhz = 1980.*has 1590"),
    ("negative", {"l2_mb": -50}, r"l2_mb \(MiB\) = -50: must be positive; h100_sxm5_80gb has 50"),
    ("wrong type", {"sm_count": "132"},
     r"sm_count \(SMs or CUs\) is \"132\" \(str\); expected a whole number"),
    ("a fraction of an SM", {"sm_count": 132.5}, r"sm_count .* expected a whole number"),
    ("a bool for a number", {"boost_clock_mhz": True}, r"boost_clock_mhz \(MHz\) is true"),
    ("clock in GHz", {"boost_clock_mhz": 1.98}, r"it looks like GHz: 1980 MHz"),
    ("L2 in bytes", {"l2_mb": 52428800}, r"l2_mb \(MiB\) = 52428800: .*looks like bytes: 50 MiB"),
    ("CUDA cores for SMs", {"sm_count": 16896}, r"looks like CUDA cores, 128 per SM: 132"),
    ("PFLOP/s", {"peak_tflops_fp16": 0.9894, "peak_tflops_bf16": 0.9894},
     r"peak_tflops_fp16 .* a unit 1000 times off"),
    ("a typo'd field", {"mem_bw_gb_s": 3350},
     r"unknown spec record field 'mem_bw_gb_s'; did you mean 'mem_bw_gbps'"),
    ("vendor spelling", {"vendor": "nvidia"}, r"vendor = 'nvidia'.*write 'NVIDIA'"),
    ("compute capability", {"compute_capability": "sm_90"},
     r"compute_capability = 'sm_90': NVIDIA writes it as '9.0'"),
    ("sparse tensor figures", {"tensor_figures_are_dense": False},
     r"tensor_figures_are_dense is false"),
    ("node fabric", {"node_fabric": "infiniband"}, r"node_fabric = 'infiniband': one of"),
    ("GEMM clock above boost", {"gemm_clock_mhz": 2100},
     r"gemm_clock_mhz \(MHz\) = 2100 is above boost_clock_mhz = 1980"),
    ("board class", {"board_class": "gaming"},
     r"board_class = 'gaming': one of datacenter, workstation, geforce"),
    # a GeForce board's fp16 figure given as the fp16-accumulate one: 989.4 > 0.55 · 989.4
    ("GeForce fp16 at the fp16-accumulate rate",
     {"board_class": "geforce", "peak_tflops_fp16_fp16acc": 989.4},
     (r"peak_tflops_fp16 \(TFLOP/s, dense\) = 989\.4 on a GeForce board is more than half of "
      r"peak_tflops_fp16_fp16acc = 989\.4.*\(dense: 494\.7\)")),
    ("a list of numbers", {"aliases": [1]},
     r"aliases is \[1\] \(list\); expected a list of strings"),
]


@pytest.mark.parametrize("change, pattern", [(c, p) for _, c, p in CASES],
                         ids=[name for name, _, _ in CASES])
def test_each_impossible_value_is_named_with_its_unit_and_a_similar_gpus(change, pattern,
                                                                         tmp_path):
    rec = {**_h100(), **change}
    path = _write(tmp_path / "my_gpu.json", rec)
    with pytest.raises(SpecError) as info:
        tgc.predict_gemm_ms(path, m=64, n=64, k=64)
    message = str(info.value)
    assert str(path) in message and "my_hopper" in message
    assert "most similar catalog GPU, h100_sxm5_80gb" in message
    assert re.search(pattern, message), message


def test_every_problem_is_listed_at_once():
    rec = {**_h100(), "sm_count": None, "mem_bw_gbps": 3.35, "l2_mb": -1}
    with pytest.raises(SpecError, match=r"3 problems") as info:
        catalog_record(rec, "x.json")
    assert len([ln for ln in str(info.value).splitlines() if ln.startswith("  - ")]) == 3


def test_a_record_that_says_nothing_gets_no_hints():
    with pytest.raises(SpecError) as info:
        catalog_record({"sm_count": None}, "x.json")
    assert "has " not in str(info.value) and "id is missing" in str(info.value)


@pytest.mark.parametrize("device_id", CATALOG_IDS)
def test_the_ranges_admit_every_catalog_gpu(device_id):
    catalog_record(datasheet_record(tgc.get_device(device_id)), device_id)  # no SpecError


def test_the_plausible_ranges_are_documented():
    for f in SPEC_FIELDS:
        if f.kind in ("int", "float") and f.role != "ignored":
            assert f.unit, f.name
        if f.lo is not None:
            assert f.hi is not None and 0 <= f.lo < f.hi, f.name


# ---------------------------------------------------------------- fallbacks, said once
def test_absent_optional_facts_fall_back_with_one_warning_listing_each(tmp_path):
    rec = _h100()
    for key in ("base_clock_mhz", "cuda_cores_per_sm", "tensor_cores_per_sm", "chip",
                "l1_smem_per_sm_kb", "regfile_per_sm_kb", "node_fabric", "node_gpus",
                "pcie_generation", "peak_tflops_bf16", "peak_tflops_fp16"):
        rec.pop(key)
    rec["peak_tflops_fp16_sparse"] = 1978.9
    path = _write(tmp_path / "my_gpu.json", rec)
    with pytest.warns(SpecFallbackWarning) as caught:
        spec = resolve_target(path).spec
    assert len(caught) == 1
    message = str(caught[0].message)
    for field in ("base_clock_mhz", "cuda_cores_per_sm", "tensor_cores_per_sm",
                  "issue_lanes_per_sm", "l1_smem_per_sm_kb", "regfile_per_sm_kb",
                  "interconnect", "peak_tflops_bf16", "peak_tflops_fp16"):
        assert f"{field} -> " in message, field
    h100 = tgc.get_device("h100_sxm5_80gb")
    assert spec.base_clock_mhz is None  # no clock drop
    assert spec.fp32_lanes_per_sm == 128  # 67 TFLOP/s / (2 · 132 · 1980 MHz) = 128.2
    assert spec.tensor_cores_per_sm == 4 and spec.issue_lanes_per_sm == 128  # CC 9.0
    assert spec.l1_bytes_per_sm == 256 * 1024  # CC 9.0: 256 KiB L1/shared
    assert spec.peak("fp16") == pytest.approx(h100.peak("fp16"), rel=1e-4)  # sparse / 2
    assert spec.peak("bf16") is None  # said in the warning, priced at the fp32 rate
    assert any(n.startswith("fallback base_clock_mhz") for n in spec.notes)


def test_a_geforce_name_gives_the_board_class_with_a_fallback_line():
    # an RTX 3090's record without board_class: "GeForce" in its name says it
    rec = datasheet_record(tgc.get_device("rtx_3090"))
    rec.update(id="my_3090", aliases=[])
    rec.pop("board_class")
    out, fallbacks = catalog_record(rec, "x.json")
    assert out["board_class"] == "geforce"
    assert "board_class -> geforce (from the name 'GeForce RTX 3090')" in fallbacks
    # and a GeForce record whose fp16 figure is the fp32-accumulate one (71 = 142 / 2) passes
    catalog_record({**rec, "peak_tflops_fp16_fp16acc": 142.0}, "x.json")


def test_a_full_record_warns_of_nothing(tmp_path):
    path = _write(tmp_path / "my_gpu.json", _h100())
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpecFallbackWarning)
        assert load_spec_file(path)[0].origin == "spec_file"


# ---------------------------------------------------------------- spec file or profile
def _profile_doc() -> dict[str, Any]:
    from torch_gemm_cost.hardware.catalog import spec_to_record
    from torch_gemm_cost.predict.profile import FORMAT, VERSION

    weights = json.loads((ROOT / "torch_gemm_cost" / "data" / "hybrid_weights.json").read_text())
    return {"format": FORMAT, "version": VERSION,
            "device": spec_to_record(tgc.get_device("l4")),
            "predictor": {"kind": "hybrid", "weights": weights}}


def test_a_spec_file_and_a_profile_are_told_apart_by_content_not_name(tmp_path):
    # each saved under the other's kind of name
    profile = _write(tmp_path / "my_gpu_spec.json", _profile_doc())
    spec_file = _write(tmp_path / "profile.json", _h100())
    assert document_kind(json.loads(profile.read_text())) == "profile"
    assert document_kind(json.loads(spec_file.read_text())) == "spec"
    target = resolve_target(profile)
    assert target.spec.id == "l4" and target.source == f"profile {profile}"
    assert profile_predictor(target) is not None
    target = resolve_target(spec_file)
    assert target.spec.id == "my_hopper" and target.spec.origin == "spec_file"
    assert target.source == f"spec file {spec_file}" and profile_predictor(target) is None
    # neither name ends in .json: still read by content
    odd = tmp_path / "device.spec"
    odd.write_text(spec_file.read_text())
    assert resolve_target(str(odd)).spec.id == "my_hopper"
    with pytest.raises(ValueError, match="is a calibration profile, not a spec file"):
        load_spec_file(profile)


def test_other_json_says_what_a_device_file_is(tmp_path):
    catalog_layout = _write(tmp_path / "h100.json",
                            devices.spec_to_record(tgc.get_device("h100_sxm5_80gb")))
    with pytest.raises(ValueError, match=r"catalog's SI layout .* --template --like"):
        resolve_target(catalog_layout)
    with pytest.raises(ValueError, match=r"neither a spec file .* nor a calibration profile"):
        resolve_target(_write(tmp_path / "other.json", {"hello": 1}))
    with pytest.raises(SpecError, match="empty list"):
        load_spec_file(_write(tmp_path / "empty.json", []))


def test_a_file_of_many_records_is_a_list_of_devices(tmp_path):
    other = {**_h100(), "id": "my_hopper_2", "name": "My Hopper 2", "mem_bw_gbps": 4800}
    path = _write(tmp_path / "gpus.json", [_h100(), other])
    assert [s.id for s in tgc.load_spec_file(path)] == ["my_hopper", "my_hopper_2"]
    with pytest.raises(ValueError, match=r"holds 2 devices \(my_hopper, my_hopper_2\)"):
        predict_gemm_ms(path, m=8, n=8, k=8)
    with pytest.raises(SpecError, match="id 'my_hopper' names more than one record"):
        load_spec_file(_write(tmp_path / "dup.json", [_h100(), _h100()]))


# ---------------------------------------------------------------- only the datasheet
def test_l40s_out_of_the_catalog_predicts_exactly_as_through_it(tmp_path, without):
    l40s = tgc.get_device("l40s")
    # aiconfigurator's shapes: vLLM Linear layers, m tokens by (n, k) weights, bf16 and fp8
    m = torch.tensor([1, 16, 128, 1024, 8192, 32768])
    kw = {"m": m, "n": 4096, "k": 14336, "op": "linear"}
    by_catalog = {dt: predict_gemm_ms("l40s", dtype=dt, **kw) for dt in ("bf16", "fp8")}
    path = _write(tmp_path / "l40s.json", datasheet_record(l40s))
    without("l40s")
    for dt in ("bf16", "fp8"):
        assert torch.equal(predict_gemm_ms(path, dtype=dt, **kw), by_catalog[dt])


def test_estimate_with_a_spec_file_is_the_catalog_estimate_marked_as_datasheet_only(tmp_path):
    model, x = torch.nn.Linear(512, 1024), (torch.randn(64, 512),)
    path = _write(tmp_path / "my_l4.json", {**datasheet_record(tgc.get_device("l4")),
                                            "id": "my_l4", "name": "My L4", "aliases": []})
    by_file = tgc.estimate(model, x, device=str(path), dtype="fp16")
    by_id = tgc.estimate(model, x, device="l4", dtype="fp16")
    assert by_file.gemms[0].time_ms == by_id.gemms[0].time_ms > 0
    assert by_file.device.origin == "spec_file"
    assert by_file.to_dict()["device_origin"] == "spec_file"
    assert "device from a spec file" in by_file.footer()
    assert "spec file" not in by_id.footer()


def test_no_fitted_constant_belongs_to_one_gpu():
    """The shipped weights index their parameters by engine, precision family, kernel-library
    family, timing and data source, never by device: a spec-file GPU gets what any GPU of its
    facts gets (the L4 twin above predicts exactly as the L4)."""
    doc = json.loads((ROOT / "torch_gemm_cost" / "data" / "hybrid_weights.json").read_text())
    names = {n.lower() for d in tgc.list_devices() for n in (d.id, d.name, *d.aliases)}
    schema = {str(v).lower() for values in doc["schema"].values() for v in values}
    assert not schema & names
    assert not {k.lower() for k in doc["params"]} & names


# ---------------------------------------------------------------- predict-csv --device-spec
def test_predict_csv_takes_the_gpus_the_catalog_lacks_from_the_spec_file(tmp_path, caplog):
    l4 = tgc.get_device("l4")
    mine = {**datasheet_record(l4), "id": "my_l4", "name": "My L4", "aliases": ["L4 (mine)"]}
    shadow = {**datasheet_record(tgc.get_device("h100_sxm5_80gb")), "mem_bw_gbps": 1.0e3}
    spec = _write(tmp_path / "gpus.json", [mine, shadow])
    src = tmp_path / "in.csv"
    rows = [["my_l4", "linear", "bfloat16", "1", "4096", "4096", "4096"],
            ["L4 (mine)", "linear", "bfloat16", "1", "4096", "4096", "4096"],
            ["l4", "linear", "bfloat16", "1", "4096", "4096", "4096"],
            ["h100_sxm5_80gb", "linear", "bfloat16", "1", "4096", "4096", "4096"]]
    with open(src, "w", newline="") as fh:
        csv.writer(fh).writerows([["gpu", "op", "dtype", "batch", "m", "n", "k"], *rows])
    out = tmp_path / "out.csv"
    assert main(["predict-csv", str(src), "--out", str(out), "--device-spec", str(spec)]) == 0
    with open(out, newline="") as fh:
        got = [float(r["predicted_ms"]) for r in csv.DictReader(fh)]
    assert got[0] == got[1] == got[2]  # the spec file's L4 twin is the L4
    h100 = predict_gemm_ms("h100_sxm5_80gb", m=4096, n=4096, k=4096, dtype="bf16", op="linear")
    assert got[3] == pytest.approx(h100, rel=1e-5)  # the catalog wins over a record of its id
    assert "rows naming it use the catalog" in caplog.text
    # a gpu in neither
    rows.append(["my_l5", "linear", "bfloat16", "1", "8", "8", "8"])
    with open(src, "w", newline="") as fh:
        csv.writer(fh).writerows([["gpu", "op", "dtype", "batch", "m", "n", "k"], *rows])
    assert main(["predict-csv", str(src), "--out", str(out), "--device-spec", str(spec)]) == 2


def test_predict_csv_device_spec_must_exist(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("gpu,op,dtype,batch,m,n,k\nl4,mm,fp16,1,8,8,8\n")
    assert main(["predict-csv", str(src), "--out", str(tmp_path / "o.csv"), "--device-spec",
                 str(tmp_path / "absent.json")]) == 2
    assert "--device-spec" in capsys.readouterr().err
