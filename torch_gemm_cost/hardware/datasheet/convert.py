"""The one conversion: a spec record (gpus.json's schema) as the catalog's SI record, with every
fallback it used, and as a ``DeviceSpec``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..catalog import DeviceSpec, board_class_from_name, spec_from_record
from .arch import L1_KB_BY_GFX, L1_SMEM_KB_BY_CC, PCIE_BW_PER_LANE, _issue_lanes, chip_of
from .check import _check
from .fields import GB, GIB, KB, MB, PEAK_FIELDS, TFLOPS, _fmt


def catalog_record(rec: Mapping[str, Any], where: str = "spec record"
                   ) -> tuple[dict[str, Any], list[str]]:
    """A spec record (gpus.json's schema, plus the extension fields of ``SPEC_FIELDS``) as the
    catalog's SI record (``spec_from_record`` reads it), and the fallbacks it used.

    The record is checked first: a SpecError lists every problem. Each fallback is one
    ``"field -> what was used"`` line; scripts/build_catalog.py and spec files both call this.
    """
    rec = _check(rec, where)
    cc = rec["compute_capability"]
    chip = chip_of(rec.get("chip"))
    fallbacks: list[str] = []
    peaks = _peaks(rec, fallbacks)
    units = _compute_units(rec, chip, fallbacks)
    l1_kb = _l1_kb(rec, fallbacks)
    if rec.get("regfile_per_sm_kb") is None:
        fallbacks.append("regfile_per_sm_kb -> none: the predictor assumes 256 KiB")
    if rec.get("base_clock_mhz") is None:
        fallbacks.append("base_clock_mhz -> none: no clock drop under the power limit" + (
            "" if rec["vendor"] == "NVIDIA"
            else " (AMD publishes none; neither do the catalog's AMD GPUs)"))
    board_class = rec.get("board_class")
    if board_class is None:
        board_class = board_class_from_name(rec["name"])
        if board_class != "datacenter":
            fallbacks.append(f"board_class -> {board_class} (from the name {rec['name']!r})")
    out = {
        "id": rec["id"],
        "name": rec["name"],
        "aliases": list(rec.get("aliases") or []),
        "vendor": rec["vendor"],
        "architecture": rec["architecture"],
        "compute_capability": cc,
        "sm_count": rec["sm_count"],
        "boost_clock_mhz": rec["boost_clock_mhz"],
        "tensor_cores_per_sm": units["tensor_cores_per_sm"],
        "tdp_w": _board_power_w(rec),
        "mem_bytes": _scaled(rec.get("mem_gb"), GIB),
        "dram_bw_bytes_per_s": _scaled(rec["mem_bw_gbps"], GB),
        "l2_bytes": _scaled(rec["l2_mb"], MB),
        "l3_bytes": _scaled(rec.get("l3_mb"), MB),
        "l1_bytes_per_sm": _scaled(l1_kb, KB),
        "smem_bytes_per_sm": _scaled(rec.get("smem_max_per_sm_kb"), KB),
        "regfile_bytes_per_sm": _scaled(rec.get("regfile_per_sm_kb"), KB),
        "peak_flops_per_s": peaks,
        "uncertain": list(rec.get("_uncertain") or []),
        "notes": list(rec.get("notes") or []),
        "chip": chip,
        "fp32_lanes_per_sm": units["fp32_lanes_per_sm"],
        "base_clock_mhz": rec.get("base_clock_mhz"),
        "issue_lanes_per_sm": units["issue_lanes_per_sm"],
        "board_class": board_class,
        "gemm_clock_mhz": rec.get("gemm_clock_mhz"),
        **_interconnect(rec, fallbacks),
    }
    return out, fallbacks


def _cc_major(rec: Mapping[str, Any]) -> int | None:
    """An NVIDIA record's compute capability major, None for any other."""
    major = rec["compute_capability"].split(".")[0]
    return int(major) if rec["vendor"] == "NVIDIA" and major.isdigit() else None


def _peaks(rec: Mapping[str, Any], fallbacks: list[str]) -> dict[str, float | None]:
    """Dense peaks in FLOP/s by catalog key: half the sparse figure where only that is given;
    a missing tf32/bf16 (and fp8 from Ada on) rate on a GPU that has one is named."""
    cc, cc_major = rec["compute_capability"], _cc_major(rec)
    peaks: dict[str, float | None] = {}
    for key, field in PEAK_FIELDS.items():
        dense, sparse = rec.get(field), rec.get(f"{field}_sparse")
        if dense is None and sparse is not None:
            dense = float(sparse) / 2
            fallbacks.append(f"{field} -> half of {field}_sparse ({_fmt(dense)})")
        peaks[key] = _scaled(dense, TFLOPS)
    if cc_major is not None and cc_major >= 8:
        for key in ("tf32", "bf16") + (("fp8",) if cc in ("8.9",) or cc_major >= 9 else ()):
            if peaks[key] is None:
                fallbacks.append(
                    f"{PEAK_FIELDS[key]} -> none given: {key} GEMMs "
                    + ("are refused" if key == "fp8" else "run at the fp32 rate")
                    + f"; every catalog GPU of compute capability {cc} has a {key} rate")
    return peaks


def _compute_units(rec: Mapping[str, Any], chip: str, fallbacks: list[str]
                   ) -> dict[str, Any]:
    """Tensor cores, FP32 lanes and issue lanes per SM, each from the record or, failing it,
    from the compute capability, the peak or the whitepaper table."""
    cc, cc_major = rec["compute_capability"], _cc_major(rec)
    nvidia = rec["vendor"] == "NVIDIA"
    tensor_cores = rec.get("tensor_cores_per_sm")
    if tensor_cores is None:
        tensor_cores = 0
        if cc_major is not None:
            tensor_cores = 0 if cc_major < 7 else 8 if cc_major == 7 else 4
            fallbacks.append(f"tensor_cores_per_sm -> {tensor_cores} (compute capability {cc})")
    fp32_lanes = rec.get("cuda_cores_per_sm")
    if fp32_lanes is None and nvidia:
        per_sm = rec["peak_tflops_fp32"] * 1e6 / (2 * rec["sm_count"] * rec["boost_clock_mhz"])
        fp32_lanes = max(32, 32 * round(per_sm / 32))
        fallbacks.append(f"cuda_cores_per_sm -> {fp32_lanes} (peak_tflops_fp32 / (2 x "
                         "sm_count x boost clock))")
    issue = rec.get("issue_lanes_per_sm")
    if issue is None:
        issue, from_cc = _issue_lanes(chip, cc, nvidia)
        if from_cc:
            fallbacks.append(
                f"issue_lanes_per_sm -> {issue} (compute capability {cc}; chip "
                f"{chip or 'not given'} not in the whitepaper table)" if issue else
                f"issue_lanes_per_sm -> none (compute capability {cc} unknown: issue never "
                "binds)")
    return {"tensor_cores_per_sm": tensor_cores, "fp32_lanes_per_sm": fp32_lanes,
            "issue_lanes_per_sm": issue}


def _l1_kb(rec: Mapping[str, Any], fallbacks: list[str]) -> float | None:
    """L1 (with shared memory) per SM in KiB: the record's, else its compute capability's
    (Pascal's separate L1 stays None)."""
    cc, cc_major = rec["compute_capability"], _cc_major(rec)
    nvidia = rec["vendor"] == "NVIDIA"
    l1_kb = rec.get("l1_smem_per_sm_kb") or rec.get("l1_vector_cache_per_cu_kb")
    if l1_kb is None and not (cc_major is not None and cc_major < 7):  # Pascal: separate L1
        l1_kb = (L1_SMEM_KB_BY_CC if nvidia else L1_KB_BY_GFX).get(cc)
        field = "l1_smem_per_sm_kb" if nvidia else "l1_vector_cache_per_cu_kb"
        fallbacks.append(f"{field} -> " + (f"{_fmt(l1_kb)} KiB (compute capability {cc})"
                                           if l1_kb is not None
                                           else "none: the predictor assumes 24 KiB"))
    return l1_kb


def _interconnect(rec: Mapping[str, Any], fallbacks: list[str]) -> dict[str, Any]:
    """The catalog's interconnect fields: peer links, the node, PCIe and the network."""
    generation = rec.get("pcie_generation")
    lanes = rec.get("pcie_lanes") or (16 if generation is not None else None)
    if all(rec.get(k) is None for k in ("node_fabric", "node_gpus", "pcie_generation")):
        fallbacks.append("interconnect -> none given: one GPU on PCIe of unknown generation "
                         "(collectives need node_fabric, node_gpus, pcie_generation)")
    return {
        "peer_link": rec.get("peer_link"),
        "peer_links": rec.get("peer_links") or 0,
        "peer_link_bw_bytes_per_s": _scaled(rec.get("peer_link_bw_gbps"), GB),
        "node_fabric": rec.get("node_fabric") or "pcie",
        "node_gpus": rec.get("node_gpus") or 1,
        "pcie_generation": generation,
        "pcie_lanes": lanes,
        "pcie_bw_bytes_per_s": (None if generation is None or lanes is None
                                else lanes * PCIE_BW_PER_LANE[generation]),
        "network": rec.get("network"),
        "network_bw_bytes_per_s": _scaled(rec.get("network_bw_gbps"), GB),
        "interconnect_uncertain": list(rec.get("interconnect_uncertain") or []),
        "interconnect_sources": list(rec.get("interconnect_sources") or []),
    }


def spec_from_datasheet(rec: Mapping[str, Any], where: str = "spec record"
                        ) -> tuple[DeviceSpec, list[str]]:
    """The ``DeviceSpec`` of a spec record (``origin="spec_file"``) and its fallbacks."""
    record, fallbacks = catalog_record(rec, where)
    spec = spec_from_record(record, where)
    notes = (*spec.notes, *(f"fallback {f}" for f in fallbacks))
    return replace(spec, origin="spec_file", notes=notes), fallbacks


def _board_power_w(rec: Mapping[str, Any]) -> float | None:
    """``tdp_w``, else the watts in the form factor ("PCIe LP 75W" -> 75), else None."""
    if rec.get("tdp_w") is not None:
        return float(rec["tdp_w"])
    found = re.search(r"(\d+)\s*W\b", rec.get("form_factor") or "")
    return float(found.group(1)) if found else None


def _scaled(value: Any, scale: float) -> float | None:
    return None if value is None else float(value) * scale
