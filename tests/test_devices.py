"""The device catalog: lookups, units and the dtype peaks that a GEMM runs at."""

from __future__ import annotations

import json

import pytest
import torch

import torch_gemm_cost as tgc
from torch_gemm_cost.hardware.catalog import DeviceSpec


def test_every_shared_device_is_in_the_catalog(data_dir):
    ids = {d["id"] for d in json.loads((data_dir / "devices" / "gpus.json").read_text())}
    assert ids == {d.id for d in tgc.list_devices()}


def test_every_measured_gpu_resolves_by_the_name_the_source_recorded(data_dir):
    import csv
    import gzip

    for path in sorted((data_dir / "gemm").glob("*.csv.gz")):
        with gzip.open(path, "rt") as f:
            pairs = {(r["gpu"], r["gpu_name"]) for r in csv.DictReader(f)}
        for gpu, gpu_name in pairs:
            assert tgc.get_device(gpu).id == gpu
            assert tgc.get_device(gpu_name).id == gpu, (path.name, gpu_name)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("h100_sxm5_80gb", "h100_sxm5_80gb"),
        ("NVIDIA H100 80GB HBM3", "h100_sxm5_80gb"),
        ("Tesla T4", "tesla_t4"),
        ("AMD Instinct MI250X / MI250", "mi250"),
        ("NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb"),
        ("nvidia a100 80gb pcie", "a100_pcie_80gb"),
    ],
)
def test_lookup_by_id_or_driver_name(name, expected):
    assert tgc.get_device(name).id == expected


def test_unknown_device_names_close_matches():
    with pytest.raises(ValueError, match=r"'h100_sxm'.*h100_sxm5_80gb"):
        tgc.get_device("h100_sxm")


def test_units_are_si():
    h100 = tgc.get_device("h100_sxm5_80gb")
    assert h100.dram_bw_bytes_per_s == 3350e9
    assert h100.l2_bytes == 50 * 2**20
    assert h100.sm_count == 132
    assert h100.peak_flops_per_s(torch.bfloat16) == pytest.approx(989.4e12)
    assert h100.peak_flops_per_s("fp8") == pytest.approx(1978.9e12)


def test_missing_rates_take_the_path_that_runs_or_raise():
    v100 = tgc.get_device("tesla_v100_sxm2")
    # No bf16 tensor cores on Volta: bf16 GEMMs run at the fp32 CUDA-core rate.
    assert v100.peak_flops_per_s("bf16") == v100.peak_flops_per_s("fp32") == 15.7e12
    assert not v100.supports("bf16")
    with pytest.raises(ValueError, match=r"tesla_v100_sxm2.*no float8_e4m3fn support"):
        v100.peak_flops_per_s("fp8")


def test_amd_fp32_gemms_use_the_matrix_rate():
    assert tgc.get_device("mi210").peak_flops_per_s("float32") == pytest.approx(45.3e12)


def test_specs_are_frozen():
    spec = tgc.get_device("l4")
    assert isinstance(spec, DeviceSpec)
    with pytest.raises(AttributeError):
        spec.sm_count = 1  # type: ignore[misc]


def test_cuda_without_a_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="cuda"):
        tgc.get_device("cuda")


def test_board_power_comes_from_the_form_factor():
    assert tgc.get_device("tesla_t4").tdp_w == 70.0  # "PCIe LP 70W"
    assert tgc.get_device("h100_sxm5_80gb").tdp_w == 700.0  # "SXM5 700W"
    assert tgc.get_device("mi250_gcd").tdp_w == 280.0  # half the 560 W module
