"""The device catalog: lookups, units and the dtype peaks that a GEMM runs at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import torch_gemm_cost as tgc
from torch_gemm_cost.hardware.catalog import DeviceSpec

EXTRA_GPUS = Path(__file__).resolve().parents[1] / "scripts" / "extra_gpus.json"


def test_every_shared_device_is_in_the_catalog(data_dir):
    ids = {d["id"] for d in json.loads((data_dir / "devices" / "gpus.json").read_text())}
    # and the boards gpus.json lacks that the data was timed on (KernelBench's A10G, A6000),
    # or that people own (RTX PRO 6000 Blackwell)
    extra = {d["id"] for d in json.loads(EXTRA_GPUS.read_text())["gpus"]}
    assert extra == {"a10g", "rtx_a6000", "rtx_pro_6000"} and not extra & ids
    assert ids | extra == {d.id for d in tgc.list_devices()}


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
        # torch names each of an MI250's two GCDs so: a torch device is one GCD
        ("AMD Instinct MI250X/MI250", "mi250_gcd"),
        ("AMD Instinct MI250X / MI250", "mi250_gcd"),
        ("AMD Instinct MI250", "mi250"),  # the product: the two-GCD module
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA RTX A6000", "rtx_a6000"),
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


def test_an_mi250_torch_device_is_one_gcd_half_the_module(monkeypatch):
    module, gcd = tgc.get_device("mi250"), tgc.get_device("AMD Instinct MI250X/MI250")
    assert gcd.id == "mi250_gcd"
    # 208 CUs, 3276.8 GB/s, 128 GB and 362.1 TFLOP/s fp16 on the module: 104, 1638.4, 64, 181
    assert (module.sm_count, gcd.sm_count) == (208, 104)
    assert gcd.dram_bw_bytes_per_s * 2 == module.dram_bw_bytes_per_s == 3276.8e9
    assert gcd.mem_bytes is not None and module.mem_bytes == 2 * gcd.mem_bytes
    assert gcd.peak("fp16") == pytest.approx(module.peak("fp16") / 2, rel=1e-3)

    # the local GPU as torch describes it on an MI250: one GCD, its CUs as the driver counts
    class Props:
        name, multi_processor_count = "AMD Instinct MI250X/MI250", 104

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Props())
    local = tgc.get_device("cuda:1")
    assert local.id == "mi250_gcd" and local.sm_count == 104


def test_the_rtx_pro_6000_blackwell_by_hand():
    # NVIDIA: 188 SMs, FP32 125 TFLOPS, 4,000 AI TOPS (FP4 with sparsity). Dense FP4 2,000,
    # FP8 1,000, FP16 500 = 188 SMs · 1024 FLOP/clk · 2597 MHz = 499.96 TFLOP/s; a workstation
    # board (full-rate fp32 accumulation, rated boost as its top clock); Blackwell of compute
    # capability 12 runs the warp-level MMA engine, not Hopper's large tiles
    from torch_gemm_cost.predict.gemm.features import DeviceTable
    from torch_gemm_cost.predict.gemm.tiles import ENGINES
    from torch_gemm_cost.records.types import DTYPE_NAMES

    d = tgc.get_device("NVIDIA RTX PRO 6000 Blackwell Workstation Edition")
    assert d.id == "rtx_pro_6000" and d.board_class == "workstation"
    assert d.peak("fp16") == pytest.approx(188 * 1024 * 2597e6, rel=1e-3)
    assert (d.peak("fp8"), d.dram_bw_bytes_per_s, d.l2_bytes) == (1000e12, 1792e9, 128 * 2**20)
    table = DeviceTable.build([d])
    assert ENGINES[int(table.engine[0, DTYPE_NAMES.index("bfloat16")])] == "mma"
    assert tgc.get_device("NVIDIA GeForce RTX 4090").board_class == "geforce"
