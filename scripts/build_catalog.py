"""Build the packaged device catalog from the measured-data hardware facts.

    python scripts/build_catalog.py [--data ../shared/data]

Reads ``devices/gpus.json`` and writes ``torch_gemm_cost/data/devices.json`` with the fields the
predictor uses, converted to SI units, plus the names ``torch.cuda.get_device_name()`` returns.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

# Names that torch.cuda.get_device_name() returns, and the names the data sources recorded.
ALIASES: dict[str, list[str]] = {
    "tesla_p4": ["Tesla P4"],
    "tesla_p100_pcie_16gb": ["Tesla P100-PCIE-16GB", "P100"],
    "tesla_v100_pcie_32gb": ["Tesla V100-PCIE-32GB", "Tesla V100-PCIE-16GB"],
    "tesla_v100_sxm2": ["Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB", "V100"],
    "tesla_t4": ["Tesla T4", "T4"],
    "a10": ["NVIDIA A10"],
    "a100_pcie_40gb": ["NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"],
    "a100_sxm4_40gb": ["NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"],
    "a100_sxm4_80gb": ["NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", "A100-80GB"],
    "a100_pcie_80gb": ["NVIDIA A100 80GB PCIe", "A100 80GB PCIe"],
    "l4": ["NVIDIA L4"],
    "l40s": ["NVIDIA L40S"],
    "h100_pcie": ["NVIDIA H100 PCIe"],
    "h100_sxm5_80gb": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", "H100"],
    "h200_sxm_141gb": ["NVIDIA H200", "H200"],
    "b200": ["NVIDIA B200", "B200(sm_100)", "B200"],
    "rtx_3090": ["NVIDIA GeForce RTX 3090"],
    "rtx_4090": ["NVIDIA GeForce RTX 4090"],
    "mi100": ["AMD Instinct MI100"],
    "mi210": ["AMD Instinct MI210", "MI210"],
    "mi250": ["AMD Instinct MI250X / MI250", "AMD Instinct MI250"],
    "mi250_gcd": [],
    "mi300x": ["AMD Instinct MI300X", "gfx942(MI300-class)", "MI300X"],
    "mi355x": ["AMD Instinct MI355X"],
    "a40": ["NVIDIA A40", "A40"],
}

# Board power where the form factor names none: one MI250 GCD is half of the 560 W OAM module.
TDP_W: dict[str, float] = {"mi250_gcd": 280.0}

# Base clock (MHz): the clock NVIDIA guarantees under the board's power limit on a heavy load;
# where a board is power-bound, a long GEMM sustains a clock tied to it rather than the boost.
# Sources (the letters follow shared/data/devices/sources.md where they coincide):
#   B1 NVIDIA product briefs and datasheets: Tesla P4 (810/1063), P100 PCIe PB-08248 (1126/1303),
#      T4 PB-09256 (585/1590), A100 PCIe PB-10137 (765/1410), A100 80GB PCIe PB-10577 (1065),
#      A10 (885/1695), A40 (1305/1740), L4 (795/2040), L40S (1110/2520), GA102 whitepaper
#      appendix for RTX 3090 (1395/1695), Ada whitepaper for RTX 4090 (2235/2520);
#   B2 TechPowerUp's GPU database (no vendor figure published for these boards): V100 PCIe 32GB
#      1230, V100 SXM2 1290, A100 SXM4 40GB 1095 and 80GB 1275, H100 PCIe 1095, H100 SXM5 1590;
#      B200 1665 (technical.city). The H200 takes the H100 SXM5's (the same GH100 at 700 W).
# AMD publishes a peak engine clock only, so its parts have none.
BASE_CLOCK_MHZ: dict[str, float] = {
    "tesla_p4": 810, "tesla_p100_pcie_16gb": 1126, "tesla_v100_pcie_32gb": 1230,
    "tesla_v100_sxm2": 1290, "tesla_t4": 585, "a10": 885, "a40": 1305, "a100_pcie_40gb": 765,
    "a100_sxm4_40gb": 1095, "a100_sxm4_80gb": 1275, "a100_pcie_80gb": 1065, "l4": 795,
    "l40s": 1110, "h100_pcie": 1095, "h100_sxm5_80gb": 1590, "h200_sxm_141gb": 1590,
    "b200": 1665, "rtx_3090": 1395, "rtx_4090": 2235,
}

# Warp schedulers per SM and dispatch units per scheduler, from NVIDIA's architecture
# whitepapers: Pascal GP100 (two processing blocks, each a scheduler with two dispatch units)
# and GP104 (four such blocks); from Volta on, four blocks each with one scheduler and one
# dispatch unit (Volta, Turing, GA100, GA102, Ada, Hopper and Blackwell whitepapers). Each
# dispatch issues one instruction for 32 threads a clock, so an SM issues schedulers x dispatch
# x 32 lanes of instructions a clock: twice its FP32 lanes on Pascal, Volta, Turing and GA100,
# exactly its FP32 lanes on GA102, Ada, Hopper and Blackwell, where every load or address
# instruction an SGEMM issues takes a slot from an FMA.
ISSUE_BY_CHIP: dict[str, tuple[int, int]] = {
    "GP100": (2, 2), "GP104": (4, 2), "GV100": (4, 1), "TU104": (4, 1), "GA100": (4, 1),
    "GA102": (4, 1), "AD102": (4, 1), "AD104": (4, 1), "GH100": (4, 1), "GB100": (4, 1),
}

TFLOPS = 1e12
MB = 1 << 20
KB = 1 << 10


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else float(value) * scale


def board_power_w(rec: dict) -> float | None:
    """TDP from the form factor ("PCIe LP 75W" -> 75), or the table above."""
    found = re.search(r"(\d+)\s*W\b", rec.get("form_factor") or "")
    return float(found.group(1)) if found else TDP_W.get(rec["id"])


def chip_of(rec: dict) -> str:
    """The die a board carries, without its packaging note: "Aldebaran (1 GCD)" -> "Aldebaran"."""
    return re.sub(r"\s*\(.*\)$", "", rec.get("chip") or "")


def issue_lanes(chip: str) -> int | None:
    """Lanes of instructions an SM issues a clock (schedulers x dispatch units x 32)."""
    if chip not in ISSUE_BY_CHIP:
        return None
    schedulers, dispatch = ISSUE_BY_CHIP[chip]
    return schedulers * dispatch * 32


def convert(rec: dict) -> dict:
    l1_kb = rec.get("l1_smem_per_sm_kb") or rec.get("l1_vector_cache_per_cu_kb")
    return {
        "id": rec["id"],
        "name": rec["name"],
        "aliases": ALIASES.get(rec["id"], []),
        "vendor": rec["vendor"],
        "architecture": rec["architecture"],
        "compute_capability": rec["compute_capability"],
        "sm_count": rec["sm_count"],
        "boost_clock_mhz": rec.get("boost_clock_mhz"),
        "tensor_cores_per_sm": rec.get("tensor_cores_per_sm") or 0,
        "tdp_w": board_power_w(rec),
        "mem_bytes": _scaled(rec.get("mem_gb"), 1e9),
        "dram_bw_bytes_per_s": _scaled(rec["mem_bw_gbps"], 1e9),
        "l2_bytes": _scaled(rec.get("l2_mb"), MB),
        "l3_bytes": _scaled(rec.get("l3_mb"), MB),
        "l1_bytes_per_sm": _scaled(l1_kb, KB),
        "smem_bytes_per_sm": _scaled(rec.get("smem_max_per_sm_kb"), KB),
        "regfile_bytes_per_sm": _scaled(rec.get("regfile_per_sm_kb"), KB),
        "peak_flops_per_s": {
            "fp64": _scaled(rec.get("peak_tflops_fp64"), TFLOPS),
            "fp32": _scaled(rec.get("peak_tflops_fp32"), TFLOPS),
            "fp32_matrix": _scaled(rec.get("peak_tflops_fp32_matrix"), TFLOPS),
            "tf32": _scaled(rec.get("peak_tflops_tf32"), TFLOPS),
            "fp16": _scaled(rec.get("peak_tflops_fp16"), TFLOPS),
            "bf16": _scaled(rec.get("peak_tflops_bf16"), TFLOPS),
            "fp8": _scaled(rec.get("peak_tflops_fp8"), TFLOPS),
            "int8": _scaled(rec.get("peak_tops_int8"), TFLOPS),
        },
        "uncertain": rec.get("_uncertain", []),
        "notes": rec.get("notes", []),
        "chip": chip_of(rec),
        "fp32_lanes_per_sm": rec.get("cuda_cores_per_sm"),
        "base_clock_mhz": BASE_CLOCK_MHZ.get(rec["id"]),
        "issue_lanes_per_sm": issue_lanes(chip_of(rec)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data", type=Path)
    args = parser.parse_args()
    records = json.loads((args.data / "devices" / "gpus.json").read_text())
    out = {
        "provenance": "Built by scripts/build_catalog.py from devices/gpus.json of the measured-data "
        "bundle; every figure traces to a vendor datasheet or whitepaper listed in its sources.md.",
        "devices": [convert(r) for r in records],
    }
    path = Path(__file__).resolve().parent.parent / "torch_gemm_cost" / "data" / "devices.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {len(out['devices'])} devices to {path}")


if __name__ == "__main__":
    main()
