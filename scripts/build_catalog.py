"""Build the packaged device catalog from the measured-data hardware facts.

    python scripts/build_catalog.py [--data ../shared/data]

Reads ``devices/gpus.json`` and writes ``torch_gemm_cost/data/devices.json`` with the fields the
predictor uses, converted to SI units, plus the names ``torch.cuda.get_device_name()`` returns.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
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
# Interconnect of each GPU and of its usual node. Bandwidths are per GPU and ONE direction: a
# datasheet's "bidirectional" figure halved, a NIC's Gb/s over 8. PCIe per direction, x16, as
# NVIDIA's datasheets round it: Gen3 16 GB/s, Gen4 32 GB/s, Gen5 64 GB/s (PCI-SIG: 8, 16, 32 GT/s
# per lane, 128b/130b). fabric: "nvswitch" (every GPU pair at full NVLink bandwidth),
# "nvlink_pairs" (NVLink bridges join pairs; pairs meet over PCIe), "mesh" (direct links to each
# peer) or "pcie". The source ids (N*) are keys of INTERCONNECT_SOURCES.
GB = 1e9
PCIE_BW_PER_LANE: dict[int, float] = {3: 1 * GB, 4: 2 * GB, 5: 4 * GB}


@dataclass(frozen=True)
class Interconnect:
    fabric: str
    node_gpus: int
    pcie_generation: int
    sources: tuple[str, ...]
    link: str | None = None
    links: int = 0
    link_bw: float | None = None  # bytes/s, one direction, all links
    network: tuple[str, float] | None = None  # (description, bytes/s per GPU one direction)
    uncertain: tuple[str, ...] = ()


@dataclass(frozen=True)
class Citation:
    source: str
    used_for: str


DGX_A100_NET = ("8x 200 Gb/s HDR InfiniBand per 8 GPUs (DGX A100)", 25 * GB)
DGX_NDR_NET = ("8x 400 Gb/s NDR InfiniBand per 8 GPUs (DGX H100/H200)", 50 * GB)
DGX_B200_NET = ("8x 400 Gb/s InfiniBand (ConnectX-7) per 8 GPUs (DGX B200)", 50 * GB)
PCIE_BOARD = ("node_gpus", "pcie_generation")
NOT_CATALOGUED_IF = "peer_link: Infinity Fabric links not catalogued"
INTERCONNECT: dict[str, Interconnect] = {
    "tesla_p4": Interconnect("pcie", 8, 3, ("N13", "N14"), uncertain=PCIE_BOARD),
    "tesla_p100_pcie_16gb": Interconnect("pcie", 8, 3, ("N13", "N14"), uncertain=PCIE_BOARD),
    "tesla_v100_pcie_32gb": Interconnect("pcie", 8, 3, ("N13", "N14"), uncertain=PCIE_BOARD),
    "tesla_v100_sxm2": Interconnect(
        "mesh", 8, 3, ("N5", "N16", "N14"), "NVLink 2", 6, 150 * GB,
        ("4x 100 Gb/s EDR InfiniBand per 8 GPUs (DGX-1)", 6.25 * GB),
        ("node_fabric: DGX-1's hybrid cube-mesh is not a full mesh", "network_bw_bytes_per_s"),
    ),
    "tesla_t4": Interconnect("pcie", 8, 3, ("N13", "N14"), uncertain=PCIE_BOARD),
    "a10": Interconnect("pcie", 8, 4, ("N13", "N14"), uncertain=PCIE_BOARD),
    "a100_pcie_40gb": Interconnect("nvlink_pairs", 8, 4, ("N9", "N5", "N14"),
                                   "NVLink 3 (bridge)", 12, 300 * GB, uncertain=("node_gpus",)),
    "a100_sxm4_40gb": Interconnect("nvswitch", 8, 4, ("N1", "N5", "N9", "N14"),
                                   "NVLink 3", 12, 300 * GB, DGX_A100_NET),
    "a100_sxm4_80gb": Interconnect("nvswitch", 8, 4, ("N1", "N5", "N9", "N14"),
                                   "NVLink 3", 12, 300 * GB, DGX_A100_NET),
    "a100_pcie_80gb": Interconnect("nvlink_pairs", 8, 4, ("N9", "N5", "N14"),
                                   "NVLink 3 (bridge)", 12, 300 * GB, uncertain=("node_gpus",)),
    "l4": Interconnect("pcie", 8, 4, ("N13", "N14"), uncertain=PCIE_BOARD),
    "l40s": Interconnect("pcie", 8, 4, ("N8", "N18", "N14")),
    "h100_pcie": Interconnect("nvlink_pairs", 8, 5, ("N10", "N14"), "NVLink 4 (bridge)", 12,
                              300 * GB, uncertain=("node_gpus", "peer_links")),
    "h100_sxm5_80gb": Interconnect("nvswitch", 8, 5, ("N2", "N4", "N5", "N10", "N14"),
                                   "NVLink 4", 18, 450 * GB, DGX_NDR_NET),
    "h200_sxm_141gb": Interconnect("nvswitch", 8, 5, ("N2", "N5", "N11", "N14"),
                                   "NVLink 4", 18, 450 * GB, DGX_NDR_NET),
    "b200": Interconnect("nvswitch", 8, 5, ("N2", "N3", "N12", "N14"), "NVLink 5", 18,
                         900 * GB, DGX_B200_NET, ("pcie_generation",)),
    "rtx_3090": Interconnect("nvlink_pairs", 4, 4, ("N6", "N14"), "NVLink 3 (GA102 bridge)", 4,
                             56.25 * GB, uncertain=("node_gpus",)),
    "rtx_4090": Interconnect("pcie", 4, 4, ("N14",), uncertain=PCIE_BOARD),
    "mi100": Interconnect("pcie", 8, 4, ("N15", "N14"), uncertain=(NOT_CATALOGUED_IF, "node_gpus")),
    "mi210": Interconnect("pcie", 8, 4, ("N15", "N14"), uncertain=(NOT_CATALOGUED_IF, "node_gpus")),
    "mi250": Interconnect("pcie", 4, 4, ("N15", "N14"), uncertain=(NOT_CATALOGUED_IF,)),
    "mi300x": Interconnect("mesh", 8, 5, ("N15", "N14"), "Infinity Fabric (xGMI 3)", 7,
                           448 * GB, ("8x 400 Gb/s per 8 GPUs (typical MI300X platform)", 50 * GB),
                           ("network_bw_bytes_per_s",)),
    "a40": Interconnect("nvlink_pairs", 8, 4, ("N6", "N7", "N14"), "NVLink 3 (GA102 bridge)", 4,
                        56.25 * GB, uncertain=("node_gpus",)),
    "mi355x": Interconnect("mesh", 8, 5, ("N15", "N14"), "Infinity Fabric", 7, 537.6 * GB,
                           ("8x 400 Gb/s per 8 GPUs (typical MI355X platform)", 50 * GB),
                           ("all interconnect values: not cross-checked against a stored source",)),
    "mi250_gcd": Interconnect("pcie", 8, 4, ("N15", "N14"), uncertain=(NOT_CATALOGUED_IF,)),
}
INTERCONNECT_SOURCES: dict[str, Citation] = {
    "N1": Citation(
        "NVIDIA DGX A100 system architecture (developer.nvidia.com/blog/defining-ai-innovation-"
        "with-dgx-a100); DGX SuperPOD reference architecture RA-09950-001 (2020)",
        "8 A100 SXM4 per node, six NVSwitches, 600 GB/s NVLink 3 per GPU (bidirectional), "
        "8 single-port ConnectX-6 HDR 200 Gb/s InfiniBand for the compute fabric",
    ),
    "N2": Citation(
        "NVIDIA DGX BasePOD reference architecture, Core Components (docs.nvidia.com/dgx-basepod/"
        "reference-architecture-infrastructure-foundation-enterprise-ai/latest/"
        "core-components.html)",
        "DGX H100/H200: 8 Hopper GPUs, four NVSwitch chips, eight single-port ConnectX-7 up to "
        "400 Gb/s InfiniBand; DGX B200: 8 B200, 8 single-port ConnectX-7 up to 400 Gb/s",
    ),
    "N3": Citation(
        "DGX B200 user guide, Introduction (docs.nvidia.com/dgx/dgxb200-user-guide/"
        "introduction-to-dgxb200.html)",
        "two 5th-generation NVLink switches, 14.4 TB/s aggregate (8 x 1.8 TB/s); 8 ConnectX-7 "
        "cards, InfiniBand up to 400 Gb/s each",
    ),
    "N4": Citation(
        "NVIDIA developer blog 'Introducing NVIDIA HGX H100' (copy at dynasys.com.hk)",
        "8 H100 and four third-generation NVSwitches; 900 GB/s bidirectional per GPU; multicast "
        "and SHARP in-network reductions (NCCL's NVLS) in the switch",
    ),
    "N5": Citation(
        "NVIDIA NVLink page (nvidia.com/data-center/nvlink); NVLink article (wikimili.com/en/NVLink)",
        "NVLink 2, 3 and 4 carry 50 GB/s per link, both directions together; V100 6 links "
        "(300 GB/s), A100 12 (600 GB/s), H100 18 (900 GB/s); A100 PCIe pairs over a bridge",
    ),
    "N6": Citation(
        "NVIDIA Ampere GA102 GPU architecture whitepaper, 'Third-Generation NVLink' (quoted in "
        "the Hugging Face perf_hardware guide)",
        "GA102: four x4 links, 14.0625 GB/s each per direction: 56.25 GB/s per direction, "
        "112.5 GB/s total between two GPUs (A40, RTX 3090)",
    ),
    "N7": Citation(
        "NVIDIA A40 product brief PB-09976-001 (spec table copies, e.g. relationship-nepal.org "
        "900-2G133-0000-000)",
        "NVLink 112.5 GB/s bidirectional; PCIe Gen4 x16",
    ),
    "N8": Citation(
        "NVIDIA L40/L40S datasheet table (verbatim copies at mullet.se and itcreations.com)",
        "PCIe Gen4 x16: 64 GB/s bidirectional; NVLink not supported",
    ),
    "N9": Citation(
        "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4, sources.md S10); "
        "A100 40GB PCIe product brief PB-10137-001 (docslib copy: NVLink bridge support)",
        "SXM4: NVLink 600 GB/s; PCIe card: NVLink bridge for 2 GPUs, 600 GB/s; PCIe Gen4 64 GB/s",
    ),
    "N10": Citation(
        "NVIDIA H100 datasheet table (sources.md S7 copy); H100 PCIe product brief PB-11133-001",
        "SXM5: NVLink 900 GB/s, PCIe Gen5 128 GB/s; PCIe card: two cards bridged at 600 GB/s "
        "bidirectional, PCIe Gen5 128 GB/s",
    ),
    "N11": Citation(
        "NVIDIA H200 datasheet figures (sources.md S8 copies)",
        "NVLink 900 GB/s, PCIe Gen5 128 GB/s; HGX H200 4- or 8-GPU boards",
    ),
    "N12": Citation(
        "NVIDIA HGX B200 specification table (sources.md S9 copy)",
        "fifth-generation NVLink, 1.8 TB/s per GPU; the host link is taken as PCIe Gen5 x16 (the "
        "DGX B200's CPUs are PCIe Gen5), not read from the table",
    ),
    "N13": Citation(
        "NVIDIA datasheets of the PCIe boards as carried in sources.md S12-S17",
        "PCIe generation of P4, P100, V100 PCIe, T4 (Gen3) and A10, L4 (Gen4); no NVLink. Not "
        "re-read for this table: listed under interconnect_uncertain",
    ),
    "N14": Citation(
        "PCI-SIG base specifications (8, 16, 32 GT/s per lane for Gen3, Gen4, Gen5; 128b/130b "
        "encoding) and NVIDIA's rounding on its datasheets (Gen4 x16 = 64 GB/s bidirectional)",
        "pcie_bw_bytes_per_s: 1, 2 or 4 GB/s per lane per direction",
    ),
    "N15": Citation(
        "ROCm documentation (ROCm/ROCm docs/conceptual/gpu-arch/mi250.md and mi300.md); AMD "
        "MI300X platform summaries (yobitel.com knowledge base)",
        "Infinity Fabric: 25 GT/s x16 = 50 GB/s per direction per link (CDNA 2); xGMI 3 at "
        "64 GB/s per direction per link, 7 links per MI300X, 8 GPUs fully connected (896 GB/s "
        "aggregate bidirectional); PCIe Gen4 (CDNA 1/2), Gen5 (CDNA 3)",
    ),
    "N16": Citation(
        "NVIDIA DGX-1 with V100 system description (hybrid cube-mesh NVLink, four EDR InfiniBand "
        "ports); not re-read for this table",
        "8 V100 SXM2 per node, six NVLink 2 links per GPU, 4x 100 Gb/s EDR for 8 GPUs",
    ),
    "N18": Citation(
        "ai-dynamo/aiconfigurator (Apache-2.0, Copyright NVIDIA) src/aiconfigurator/systems/"
        "l40s.yaml",
        "the L40S node it measured: 8 GPUs, PCIe 4.0 at 32 GB/s one direction",
    ),
}


def interconnect(device_id: str) -> dict:
    """The catalog's interconnect fields for one device, in SI units (see INTERCONNECT)."""
    rec = INTERCONNECT[device_id]
    return {
        "peer_link": rec.link,
        "peer_links": rec.links,
        "peer_link_bw_bytes_per_s": rec.link_bw,
        "node_fabric": rec.fabric,
        "node_gpus": rec.node_gpus,
        "pcie_generation": rec.pcie_generation,
        "pcie_lanes": 16,
        "pcie_bw_bytes_per_s": 16 * PCIE_BW_PER_LANE[rec.pcie_generation],
        "network": rec.network[0] if rec.network else None,
        "network_bw_bytes_per_s": rec.network[1] if rec.network else None,
        "interconnect_uncertain": list(rec.uncertain),
        "interconnect_sources": [f"{n}: {INTERCONNECT_SOURCES[n].source}" for n in rec.sources],
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
        **interconnect(rec["id"]),
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
