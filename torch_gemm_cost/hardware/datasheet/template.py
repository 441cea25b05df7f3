"""A spec record to fill in, pre-filled from a catalog GPU, with each field's unit and fallback."""

from __future__ import annotations

from typing import Any

from ..catalog import DeviceSpec
from .fields import FIELDS, PEAK_FIELDS, SpecField
from .record import datasheet_record

# the template's fields, in gpus.json's order; the rest of SPEC_FIELDS are accepted too
TEMPLATE_FIELDS: tuple[str, ...] = (
    "id", "name", "vendor", "architecture", "chip", "form_factor", "compute_capability",
    "sm_count", "boost_clock_mhz", "base_clock_mhz", "gemm_clock_mhz", "board_class",
    "cuda_cores_per_sm", "tensor_cores_per_sm",
    *PEAK_FIELDS.values(), "peak_tflops_fp16_sparse", "mem_gb", "mem_bw_gbps", "l2_mb",
    "l3_mb", "l1_smem_per_sm_kb", "l1_vector_cache_per_cu_kb", "smem_max_per_sm_kb",
    "regfile_per_sm_kb", "tdp_w", "aliases", "peer_link", "peer_links", "peer_link_bw_gbps",
    "node_fabric", "node_gpus", "pcie_generation", "pcie_lanes", "network", "network_bw_gbps",
)


def _help_line(f: SpecField) -> str:
    role = {"required": "required", "check": "optional, only checked",
            "ignored": "optional, not read"}.get(f.role, "optional")
    unit = f" [{f.unit}]" if f.unit else ""
    text = f"{role}{unit}: {f.help}"
    if f.fallback and f.role != "required":
        text += f". If null: {f.fallback}"
    return text


def template(like: DeviceSpec | None = None) -> dict[str, Any]:
    """A spec record to fill in: the template fields, null where unknown, pre-filled from
    ``like`` (a catalog GPU) but for its identity (id, name, driver names, citations), and a
    ``_help`` object (ignored when read back) saying each field's unit and fallback."""
    known = datasheet_record(like) if like is not None else {}
    out: dict[str, Any] = {}
    for name in TEMPLATE_FIELDS:
        value = known.get(name)
        if name in ("id", "name"):
            value = None
        elif name == "aliases":
            value = []
        out[name] = value
    out["_help"] = {
        "how": "Fill in every null you know from the datasheet, in the unit in the field's "
               "name; leave null what it does not say. Every peak is dense (no 2:4 "
               "sparsity); a with-sparsity figure goes in peak_tflops_*_sparse. Fields "
               "starting with '_' are comments. Then: torch-gemm-cost estimate ... --device "
               "THIS_FILE.json",
        **({"prefilled_from": f"{like.id} ({like.name}): check every value against your GPU's "
            "datasheet"} if like is not None else {}),
        **{name: _help_line(FIELDS[name]) for name in TEMPLATE_FIELDS},
    }
    return out
