"""The inverse of the conversion: a ``DeviceSpec`` back as a spec record in gpus.json's units."""

from __future__ import annotations

from typing import Any

from ..catalog import DeviceSpec
from .arch import _issue_lanes
from .fields import GB, GIB, KB, MB, PEAK_FIELDS, TFLOPS


def _round(value: float | None) -> float | None:
    """A figure read back from SI units, rid of the scaling's last-bit noise (12 digits)."""
    return None if value is None else float(f"{value:.12g}")


def datasheet_record(spec: DeviceSpec) -> dict[str, Any]:
    """``spec`` as a spec record in gpus.json's units; ``catalog_record`` reads it back to the
    same spec (the catalog's ``form_factor`` is not kept: its watts are ``tdp_w``)."""
    amd = spec.vendor.upper() == "AMD"

    def per(value: float | None, unit: float) -> float | None:
        return _round(None if value is None else value / unit)

    rec: dict[str, Any] = {
        "id": spec.id, "name": spec.name, "vendor": spec.vendor,
        "architecture": spec.architecture, "chip": spec.chip or None, "form_factor": None,
        "compute_capability": spec.compute_capability, "sm_count": spec.sm_count,
        "boost_clock_mhz": spec.boost_clock_mhz, "base_clock_mhz": spec.base_clock_mhz,
        "board_class": spec.board_class, "gemm_clock_mhz": spec.gemm_clock_mhz,
        "cuda_cores_per_sm": spec.fp32_lanes_per_sm,
        "tensor_cores_per_sm": spec.tensor_cores_per_sm,
        "issue_lanes_per_sm": None,
    }
    for key, field in PEAK_FIELDS.items():
        rec[field] = per(spec.peak(key), TFLOPS)
    rec.update({
        "mem_gb": per(spec.mem_bytes, GIB),
        "mem_bw_gbps": per(spec.dram_bw_bytes_per_s, GB),
        "l2_mb": per(spec.l2_bytes, MB),
        "l3_mb": per(spec.l3_bytes, MB),
        "l1_smem_per_sm_kb": None if amd else per(spec.l1_bytes_per_sm, KB),
        "l1_vector_cache_per_cu_kb": per(spec.l1_bytes_per_sm, KB) if amd else None,
        "smem_max_per_sm_kb": per(spec.smem_bytes_per_sm, KB),
        "regfile_per_sm_kb": per(spec.regfile_bytes_per_sm, KB),
        "tdp_w": spec.tdp_w,
        "aliases": list(spec.aliases),
        "peer_link": spec.peer_link, "peer_links": spec.peer_links,
        "peer_link_bw_gbps": per(spec.peer_link_bw_bytes_per_s, GB),
        "node_fabric": spec.node_fabric, "node_gpus": spec.node_gpus,
        "pcie_generation": spec.pcie_generation, "pcie_lanes": spec.pcie_lanes,
        "network": spec.network, "network_bw_gbps": per(spec.network_bw_bytes_per_s, GB),
        "interconnect_uncertain": list(spec.interconnect_uncertain),
        "interconnect_sources": list(spec.interconnect_sources),
        "notes": list(spec.notes),
        "_uncertain": list(spec.uncertain),
    })
    if spec.issue_lanes_per_sm is not None:
        derived, _ = _issue_lanes(spec.chip, spec.compute_capability, not amd)
        if derived != spec.issue_lanes_per_sm:
            rec["issue_lanes_per_sm"] = spec.issue_lanes_per_sm
    return rec
