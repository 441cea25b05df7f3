"""Build the packaged device catalog from the measured-data hardware facts.

    python scripts/build_catalog.py [--data ../shared/data]

Reads ``devices/gpus.json`` and the boards it lacks that the measured data was timed on
(``scripts/extra_gpus.json``: its records in gpus.json's schema, their sources beside them), and
writes ``torch_gemm_cost/data/devices.json``. This script adds only facts: the tables below (driver names, board power where the form factor names none, base
clocks, interconnect with its sources), as the extension fields a spec file may carry too. The
conversion to the catalog's SI record, its checks and its fallbacks are the package's
``torch_gemm_cost.hardware.datasheet.catalog_record``, the one a spec file goes through, so a catalog GPU
given as a spec file (``spec_file_record``) is the catalog's DeviceSpec by construction.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch_gemm_cost.hardware.datasheet import catalog_record

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
    # torch sees an MI250 (or MI250X) as two devices, one per GCD, each named
    # "AMD Instinct MI250X/MI250": that name is one GCD; the product name is the module
    "mi250": ["AMD Instinct MI250"],
    "mi250_gcd": ["AMD Instinct MI250X/MI250", "AMD Instinct MI250X / MI250"],
    "mi300x": ["AMD Instinct MI300X", "gfx942(MI300-class)", "MI300X"],
    "mi355x": ["AMD Instinct MI355X"],
    "a40": ["NVIDIA A40", "A40"],
    "rtx_a6000": ["NVIDIA RTX A6000", "RTX A6000", "A6000"],
    "a10g": ["NVIDIA A10G", "A10G"],
    "rtx_pro_6000": ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                     "NVIDIA RTX PRO 6000 Blackwell"],
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
#      B200 1665 (technical.city); RTX A6000 1410 (extra_gpus.json E2, a TechPowerUp copy).
#      The H200 takes the H100 SXM5's (the same GH100 at 700 W). The A10G has none published.
# AMD publishes a peak engine clock only, so its parts have none.
BASE_CLOCK_MHZ: dict[str, float] = {
    "tesla_p4": 810, "tesla_p100_pcie_16gb": 1126, "tesla_v100_pcie_32gb": 1230,
    "tesla_v100_sxm2": 1290, "tesla_t4": 585, "a10": 885, "a40": 1305, "a100_pcie_40gb": 765,
    "a100_sxm4_40gb": 1095, "a100_sxm4_80gb": 1275, "a100_pcie_80gb": 1065, "l4": 795,
    "l40s": 1110, "h100_pcie": 1095, "h100_sxm5_80gb": 1590, "h200_sxm_141gb": 1590,
    "b200": 1665, "rtx_3090": 1395, "rtx_4090": 2235, "rtx_a6000": 1410,
}

# Who each board is built for (catalog.BOARD_CLASSES), from its product line: GeForce cards are
# fan-cooled consumer boards whose rated boost clock is a typical one (NVIDIA GeForce product
# pages list "Boost Clock" beside a base clock and board power); RTX A6000 and RTX PRO 6000 are
# workstation boards; every other catalog GPU is a datacenter board. An id absent here takes the
# class its name says (datasheet.catalog_record's fallback), so the table only states it.
BOARD_CLASS: dict[str, str] = {"rtx_3090": "geforce", "rtx_4090": "geforce",
                               "rtx_a6000": "workstation", "rtx_pro_6000": "workstation"}

# The SM's issue width (schedulers x dispatch units x 32) comes from the chip, by the table
# torch_gemm_cost.hardware.datasheet.arch.ISSUE_BY_CHIP (NVIDIA's whitepapers), as it does for a spec file.

# Interconnect of each GPU and of its usual node. Bandwidths are per GPU and ONE direction: a
# datasheet's "bidirectional" figure halved, a NIC's Gb/s over 8. PCIe per direction, x16, as
# NVIDIA's datasheets round it: Gen3 16 GB/s, Gen4 32 GB/s, Gen5 64 GB/s (PCI-SIG: 8, 16, 32 GT/s
# per lane, 128b/130b; torch_gemm_cost.hardware.datasheet.arch.PCIE_BW_PER_LANE). Figures here are in GB/s, the
# spec-file unit (peer_link_bw_gbps, network_bw_gbps). fabric: "nvswitch" (every GPU pair at
# full NVLink bandwidth), "nvlink_pairs" (NVLink bridges join pairs; pairs meet over PCIe),
# "mesh" (direct links to each peer) or "pcie". The source ids (N*) are keys of
# INTERCONNECT_SOURCES.


@dataclass(frozen=True)
class Interconnect:
    fabric: str
    node_gpus: int
    pcie_generation: int
    sources: tuple[str, ...]
    link: str | None = None
    links: int = 0
    link_bw_gbps: float | None = None  # GB/s, one direction, all links
    network: tuple[str, float] | None = None  # (description, GB/s per GPU one direction)
    uncertain: tuple[str, ...] = ()


@dataclass(frozen=True)
class Citation:
    source: str
    used_for: str


DGX_A100_NET = ("8x 200 Gb/s HDR InfiniBand per 8 GPUs (DGX A100)", 25)
DGX_NDR_NET = ("8x 400 Gb/s NDR InfiniBand per 8 GPUs (DGX H100/H200)", 50)
DGX_B200_NET = ("8x 400 Gb/s InfiniBand (ConnectX-7) per 8 GPUs (DGX B200)", 50)
PCIE_BOARD = ("node_gpus", "pcie_generation")
NOT_CATALOGUED_IF = "peer_link: Infinity Fabric links not catalogued"
A10G_LINK = "peer_link: not cross-checked against a stored source"
INTERCONNECT: dict[str, Interconnect] = {
    "tesla_p4": Interconnect("pcie", 8, 3, ("N13", "N14"), uncertain=PCIE_BOARD),
    "tesla_p100_pcie_16gb": Interconnect("pcie", 8, 3, ("N13", "N14"), uncertain=PCIE_BOARD),
    "tesla_v100_pcie_32gb": Interconnect("pcie", 8, 3, ("N13", "N14"), uncertain=PCIE_BOARD),
    "tesla_v100_sxm2": Interconnect(
        "mesh", 8, 3, ("N5", "N16", "N14"), "NVLink 2", 6, 150,
        ("4x 100 Gb/s EDR InfiniBand per 8 GPUs (DGX-1)", 6.25),
        ("node_fabric: DGX-1's hybrid cube-mesh is not a full mesh", "network_bw_bytes_per_s"),
    ),
    "tesla_t4": Interconnect("pcie", 8, 3, ("N13", "N14"), uncertain=PCIE_BOARD),
    "a10": Interconnect("pcie", 8, 4, ("N13", "N14"), uncertain=PCIE_BOARD),
    "a100_pcie_40gb": Interconnect("nvlink_pairs", 8, 4, ("N9", "N5", "N14"),
                                   "NVLink 3 (bridge)", 12, 300, uncertain=("node_gpus",)),
    "a100_sxm4_40gb": Interconnect("nvswitch", 8, 4, ("N1", "N5", "N9", "N14"),
                                   "NVLink 3", 12, 300, DGX_A100_NET),
    "a100_sxm4_80gb": Interconnect("nvswitch", 8, 4, ("N1", "N5", "N9", "N14"),
                                   "NVLink 3", 12, 300, DGX_A100_NET),
    "a100_pcie_80gb": Interconnect("nvlink_pairs", 8, 4, ("N9", "N5", "N14"),
                                   "NVLink 3 (bridge)", 12, 300, uncertain=("node_gpus",)),
    "l4": Interconnect("pcie", 8, 4, ("N13", "N14"), uncertain=PCIE_BOARD),
    "l40s": Interconnect("pcie", 8, 4, ("N8", "N18", "N14")),
    "h100_pcie": Interconnect("nvlink_pairs", 8, 5, ("N10", "N14"), "NVLink 4 (bridge)", 12,
                              300, uncertain=("node_gpus", "peer_links")),
    "h100_sxm5_80gb": Interconnect("nvswitch", 8, 5, ("N2", "N4", "N5", "N10", "N14"),
                                   "NVLink 4", 18, 450, DGX_NDR_NET),
    "h200_sxm_141gb": Interconnect("nvswitch", 8, 5, ("N2", "N5", "N11", "N14"),
                                   "NVLink 4", 18, 450, DGX_NDR_NET),
    "b200": Interconnect("nvswitch", 8, 5, ("N2", "N3", "N12", "N14"), "NVLink 5", 18,
                         900, DGX_B200_NET, ("pcie_generation",)),
    "rtx_3090": Interconnect("nvlink_pairs", 4, 4, ("N6", "N14"), "NVLink 3 (GA102 bridge)", 4,
                             56.25, uncertain=("node_gpus",)),
    "rtx_4090": Interconnect("pcie", 4, 4, ("N14",), uncertain=PCIE_BOARD),
    "mi100": Interconnect("pcie", 8, 4, ("N15", "N14"), uncertain=(NOT_CATALOGUED_IF, "node_gpus")),
    "mi210": Interconnect("pcie", 8, 4, ("N15", "N14"), uncertain=(NOT_CATALOGUED_IF, "node_gpus")),
    "mi250": Interconnect("pcie", 4, 4, ("N15", "N14"), uncertain=(NOT_CATALOGUED_IF,)),
    "mi300x": Interconnect("mesh", 8, 5, ("N15", "N14"), "Infinity Fabric (xGMI 3)", 7,
                           448, ("8x 400 Gb/s per 8 GPUs (typical MI300X platform)", 50),
                           ("network_bw_bytes_per_s",)),
    "a40": Interconnect("nvlink_pairs", 8, 4, ("N6", "N7", "N14"), "NVLink 3 (GA102 bridge)", 4,
                        56.25, uncertain=("node_gpus",)),
    "mi355x": Interconnect("mesh", 8, 5, ("N15", "N14"), "Infinity Fabric", 7, 537.6,
                           ("8x 400 Gb/s per 8 GPUs (typical MI355X platform)", 50),
                           ("all interconnect values: not cross-checked against a stored source",)),
    "mi250_gcd": Interconnect("pcie", 8, 4, ("N15", "N14"), uncertain=(NOT_CATALOGUED_IF,)),
    "rtx_a6000": Interconnect("nvlink_pairs", 4, 4, ("N6", "N14"), "NVLink 3 (GA102 bridge)", 4,
                              56.25, uncertain=("node_gpus",)),
    "a10g": Interconnect("pcie", 8, 4, ("N19", "N14"), uncertain=(*PCIE_BOARD, A10G_LINK)),
    "rtx_pro_6000": Interconnect("pcie", 4, 5, ("N14",), uncertain=("node_gpus",)),
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
    "N19": Citation(
        "AWS EC2 G5 instance types (aws.amazon.com/ec2/instance-types/g5); not re-read for "
        "this table",
        "A10G boards on PCIe Gen4, up to 8 per instance (g5.48xlarge), no NVLink",
    ),
}


def interconnect(device_id: str) -> dict:
    """The interconnect of one device as a spec record's fields (GB/s, see INTERCONNECT)."""
    rec = INTERCONNECT[device_id]
    return {
        "peer_link": rec.link,
        "peer_links": rec.links,
        "peer_link_bw_gbps": rec.link_bw_gbps,
        "node_fabric": rec.fabric,
        "node_gpus": rec.node_gpus,
        "pcie_generation": rec.pcie_generation,
        "pcie_lanes": 16,
        "network": rec.network[0] if rec.network else None,
        "network_bw_gbps": rec.network[1] if rec.network else None,
        "interconnect_uncertain": list(rec.uncertain),
        "interconnect_sources": [f"{n}: {INTERCONNECT_SOURCES[n].source}" for n in rec.sources],
    }


def spec_file_record(rec: dict) -> dict:
    """A gpus.json record with this script's facts added in the extension fields: the record
    a spec file of this GPU holds."""
    return {
        **rec,
        "aliases": ALIASES.get(rec["id"], []),
        "tdp_w": TDP_W.get(rec["id"]),
        "base_clock_mhz": BASE_CLOCK_MHZ.get(rec["id"]),
        "board_class": BOARD_CLASS.get(rec["id"], "datacenter"),
        **interconnect(rec["id"]),
    }


EXTRA_GPUS = ROOT / "scripts" / "extra_gpus.json"


def extra_records() -> list[dict]:
    """The records of ``extra_gpus.json``, each of its source ids checked to be listed there."""
    doc = json.loads(EXTRA_GPUS.read_text())
    for rec in doc["gpus"]:
        unknown = sorted(set(rec["sources"]) - set(doc["sources"]))
        if unknown:
            raise ValueError(f"{EXTRA_GPUS.name}: {rec['id']} cites unknown sources {unknown}")
    return list(doc["gpus"])


def convert(rec: dict) -> tuple[dict, list[str]]:
    """The catalog record of a gpus.json record, and the fallbacks its conversion used."""
    return catalog_record(spec_file_record(rec), f"gpus.json {rec.get('id')!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data", type=Path)
    args = parser.parse_args()
    records = json.loads((args.data / "devices" / "gpus.json").read_text()) + extra_records()
    converted = [convert(r) for r in records]
    out = {
        "provenance": "Built by scripts/build_catalog.py from devices/gpus.json of the measured-data "
        "bundle and scripts/extra_gpus.json; every figure traces to a vendor datasheet or "
        "whitepaper listed in its sources.md, or to the sources extra_gpus.json lists.",
        "devices": [record for record, _ in converted],
    }
    path = ROOT / "torch_gemm_cost" / "data" / "devices.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {len(out['devices'])} devices to {path}")
    for record, fallbacks in converted:
        if fallbacks:
            print(f"  {record['id']}: fallbacks: {'; '.join(fallbacks)}")


if __name__ == "__main__":
    main()
