"""A GPU from its datasheet: a hardware-facts record as a ``DeviceSpec``, checked field by field.

The record is the schema of the measured data's ``devices/gpus.json`` (``DATA.md``): units in
the field names (``mem_bw_gbps`` in GB/s, ``l2_mb`` in MiB, ``peak_tflops_fp16`` in dense
TFLOP/s), ``null`` where a value is unknown or the device lacks the rate. ``catalog_record``
is the one conversion from such a record to the catalog's SI record: ``scripts/build_catalog.py``
builds ``data/devices.json`` with it, and a spec file (``device="my_gpu.json"``) goes through it
too, so a catalog GPU given as a spec file is the catalog's ``DeviceSpec`` by construction.

Beyond gpus.json, a record may carry the facts that the catalog keeps in tables of its own
(``SPEC_FIELDS`` marks them ``extension``): ``aliases``, ``base_clock_mhz``, ``tdp_w``,
``issue_lanes_per_sm``, the dense peaks' ``*_sparse`` twins (only to check the dense figure),
and the interconnect (``peer_link*``, ``node_*``, ``pcie_*``, ``network*``). An optional fact
that is absent falls back as ``SPEC_FIELDS`` says, and a spec file says every fallback it used in
one ``SpecFallbackWarning``. A missing or impossible value raises one ``SpecError`` listing each
problem with its field, unit, and the value the most similar catalog GPU has.

A calibration profile is JSON too; ``read_device_file`` tells the two apart by content (a
profile has ``"format": "torch_gemm_cost.profile"``), never by file name.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..suggest import unknown
from .catalog import DeviceSpec, _norm, _stacklevel_of_caller, list_devices, spec_from_record

__all__ = [
    "PROFILE_FORMAT",
    "PROFILE_VERSION",
    "SPEC_FIELDS",
    "SpecError",
    "SpecFallbackWarning",
    "catalog_record",
    "datasheet_record",
    "document_kind",
    "load_spec_file",
    "most_similar",
    "read_device_file",
    "spec_from_datasheet",
    "template",
]

# The format marker of a calibration profile (predict/profile.py writes it): the content that
# tells a profile from a spec file; and the version of the profile layout this package reads.
PROFILE_FORMAT = "torch_gemm_cost.profile"
PROFILE_VERSION = 1

MB = 1 << 20  # gpus.json's "mb" of caches is MiB (B200: 129536 KiB -> 126.5)
KB = 1 << 10
GB = 1e9  # memory size and bandwidth are decimal (HBM3 80 GB, 3350 GB/s)
TFLOPS = 1e12


class SpecError(ValueError):
    """A spec record that cannot describe a GPU: every problem, each on a line of its own."""


class SpecFallbackWarning(UserWarning):
    """A spec file left out optional facts; the warning lists what was used instead."""


# ---------------------------------------------------------------- the fields of a record
@dataclass(frozen=True)
class SpecField:
    """One field of a spec record.

    ``role``: ``required``; ``optional`` (absent or null falls back as ``fallback`` says);
    ``extension`` (optional, and not in gpus.json: the catalog keeps it in a table of
    scripts/build_catalog.py); ``check`` (read only to check other fields); ``ignored``
    (gpus.json carries it, the predictor does not read it; type-checked only).
    ``lo``..``hi`` is the plausible range in ``unit``; ``misread`` lists (factor, unit) pairs:
    a value out of range that lands in range times ``factor`` was likely written in ``unit``.
    """

    name: str
    kind: str  # "str", "int", "float", "bool", "list"
    role: str
    unit: str = ""
    help: str = ""
    lo: float | None = None
    hi: float | None = None
    misread: tuple[tuple[float, str], ...] = ()
    fallback: str = ""


_TFLOPS_MISREAD = ((1e-3, "GFLOP/s"), (1e-12, "FLOP/s"), (1e3, "PFLOP/s"))
_CLOCK_MISREAD = ((1e3, "GHz"), (1e-6, "Hz"), (1e-3, "kHz"))
_KIB_MISREAD = ((1 / KB, "bytes"), (KB, "MiB"))


def _peak(name: str, what: str, lo: float, hi: float, role: str = "optional") -> SpecField:
    unit = "TOP/s" if "tops" in name else "TFLOP/s"
    misread = tuple((f, u.replace("FLOP", "OP") if unit == "TOP/s" else u)
                    for f, u in _TFLOPS_MISREAD)
    return SpecField(name, "float", role, f"{unit}, dense", f"{what}, dense (no 2:4 sparsity)",
                     lo, hi, misread, "the device lacks this rate: a GEMM in it is priced on "
                     "the path that runs instead (tf32 and bf16 at the fp32 rate), or refused "
                     "(fp8, int8)")


# Plausible ranges. Each spans the catalog's smallest and largest GPU (a 75 W Tesla P4 to a
# B200, MI300X and MI355X) with room for a generation or two either side, and is narrow
# enough that the usual slip, a figure in a unit 1000 or 1024 times off, lands outside it.
SPEC_FIELDS: tuple[SpecField, ...] = (
    SpecField("id", "str", "required", "", "a short id of your choosing (lowercase, digits, _), "
              "not a catalog id"),
    SpecField("name", "str", "required", "", "the product name, e.g. 'NVIDIA RTX PRO 6000'"),
    SpecField("vendor", "str", "required", "", "'NVIDIA' or 'AMD'"),
    SpecField("architecture", "str", "required", "", "'Ampere', 'Ada', 'Hopper', 'Blackwell', "
              "'CDNA3', ..."),
    SpecField("chip", "str", "optional", "", "the die, e.g. 'GH100', 'AD102' (a note in "
              "parentheses is dropped); sets the SM's issue width", fallback="issue width from "
              "compute_capability"),
    SpecField("form_factor", "str", "optional", "", "e.g. 'SXM5 700W': the board power is read "
              "from the 'NNNW' in it unless tdp_w is given"),
    SpecField("compute_capability", "str", "required", "", "NVIDIA 'major.minor' ('9.0'); AMD "
              "the LLVM target ('gfx942')"),
    SpecField("sm_unit", "str", "ignored", "", "'SM' (NVIDIA) or 'CU' (AMD)"),
    # SMs: 20 on a P4, 304 CUs on an MI300X; a count in the thousands is CUDA cores
    SpecField("sm_count", "int", "required", "SMs or CUs", "streaming multiprocessors "
              "(AMD compute units), not CUDA cores", 1, 1024, ((1 / 128, "CUDA cores, 128 per SM"),
                                                               (1 / 64, "CUDA cores, 64 per SM"))),
    # clocks: 585 MHz (T4 base) to 2520 MHz (Ada boost)
    SpecField("boost_clock_mhz", "float", "required", "MHz", "the boost (maximum) clock",
              300, 4000, _CLOCK_MISREAD),
    SpecField("base_clock_mhz", "float", "extension", "MHz", "the clock the board guarantees at "
              "its power limit on a heavy load (NVIDIA's 'base clock'); must not exceed boost",
              100, 4000, _CLOCK_MISREAD, "no clock drop under the power limit: power-bound "
              "boards (an L40S holds 1110 of 2520 MHz) come out too fast"),
    SpecField("tensor_peak_implied_clock_mhz", "float", "check", "MHz", "the clock the dense "
              "fp16 peak implies (gpus.json derives it); checked against boost_clock_mhz, not "
              "read by the predictor", 100, 4000, _CLOCK_MISREAD),
    # FP32 lanes per SM: 64 (GA100, Volta, CDNA) or 128 (Pascal GP104, GA102, Ada, Hopper)
    SpecField("cuda_cores_per_sm", "int", "optional", "lanes per SM", "FP32 (CUDA-core) lanes "
              "per SM", 8, 512, fallback="NVIDIA: peak_tflops_fp32 / (2 * sm_count * boost "
              "clock), to a multiple of 32; AMD: none (issue never binds)"),
    SpecField("tensor_cores_per_sm", "int", "optional", "per SM", "tensor cores per SM (0: "
              "none); AMD matrix cores are used whatever it says", 0, 64,
              fallback="NVIDIA: 8 on compute capability 7.x, 4 from 8.0, 0 before 7.0; AMD: 0"),
    SpecField("issue_lanes_per_sm", "int", "extension", "lanes per clock", "instruction lanes "
              "an SM issues a clock (schedulers x dispatch units x 32)", 32, 1024,
              fallback="from chip, else from compute_capability (NVIDIA whitepapers); AMD: "
              "none (issue never binds)"),
    SpecField("fp16_dense_flops_per_clk_per_sm", "int", "check", "FLOP/clk/SM", "dense fp16 "
              "FLOPs per clock per SM; checks peak_tflops_fp16", 16, 65536),
    # peaks: P4 fp64 0.17 and fp32 5.5 TFLOP/s up to MI355X fp8 5033
    _peak("peak_tflops_fp64", "FP64", 0.005, 1000),
    SpecField("peak_tflops_fp64_tensor", "float", "ignored", "TFLOP/s", "FP64 on tensor "
              "cores", 0.005, 2000, _TFLOPS_MISREAD),
    _peak("peak_tflops_fp32", "FP32 on CUDA cores (vector units)", 0.1, 1000, "required"),
    _peak("peak_tflops_fp32_matrix", "FP32 on AMD matrix cores", 0.1, 2000),
    _peak("peak_tflops_tf32", "TF32 tensor", 0.1, 20000),
    _peak("peak_tflops_fp16", "FP16 tensor, fp32 accumulate", 0.1, 50000),
    SpecField("peak_tflops_fp16_fp16acc", "float", "ignored", "TFLOP/s", "FP16 tensor with "
              "fp16 accumulate", 0.1, 50000, _TFLOPS_MISREAD),
    _peak("peak_tflops_bf16", "BF16 tensor", 0.1, 50000),
    _peak("peak_tflops_fp8", "FP8 tensor", 0.1, 100000),
    SpecField("peak_tflops_fp8_fp16acc", "float", "ignored", "TFLOP/s", "FP8 with fp16 "
              "accumulate", 0.1, 100000, _TFLOPS_MISREAD),
    _peak("peak_tops_int8", "INT8 tensor (or DP4A)", 0.1, 100000),
    SpecField("peak_tflops_fp4", "float", "ignored", "TFLOP/s", "FP4 tensor", 0.1, 200000,
              _TFLOPS_MISREAD),
    # memory: 8 GB (P4) to 288 GB (MI355X); DRAM bandwidth 192 GB/s (P4) to 8000 GB/s (MI355X)
    SpecField("mem_gb", "float", "optional", "GB", "memory size", 0.5, 4096,
              ((1 / 1024, "MiB"), (1e-9, "bytes"))),
    SpecField("mem_type", "str", "ignored", "", "'HBM3', 'GDDR6', ..."),
    SpecField("mem_bw_gbps", "float", "required", "GB/s", "DRAM bandwidth in GB/s (not "
              "gigabits)", 50, 20000, ((1e3, "TB/s"), (1e-3, "MB/s"), (1e-9, "bytes/s"))),
    # caches: L2 2 MiB (P4) to 126.5 MiB (B200); L3 (AMD Infinity Cache) up to 256 MiB
    SpecField("l2_mb", "float", "required", "MiB", "L2 cache", 0.25, 1024,
              ((1 / KB, "KiB"), (1 / MB, "bytes"))),
    SpecField("l3_mb", "float", "optional", "MiB", "last-level cache beyond L2 (AMD Infinity "
              "Cache); null: none", 1, 4096, ((1 / KB, "KiB"), (1 / MB, "bytes"))),
    # per-SM storage: L1 16 KiB (CDNA CU) to 256 KiB (Hopper); register file 256-512 KiB
    SpecField("l1_smem_per_sm_kb", "float", "optional", "KiB", "NVIDIA: combined L1 / shared "
              "memory per SM", 8, 1024, _KIB_MISREAD, "from compute_capability (CUDA guide: "
              "7.0 128, 7.5 96, 8.0 192, 8.6/8.9/12.0 128, 9.0/10.0 256); otherwise the "
              "predictor's 24 KiB (Pascal's separate L1)"),
    SpecField("l1_vector_cache_per_cu_kb", "float", "optional", "KiB", "AMD: vector L1 per CU",
              4, 1024, _KIB_MISREAD, "AMD: from compute_capability (ROCm: gfx908/gfx90a 16, "
              "gfx942 32); otherwise the predictor's 24 KiB"),
    SpecField("smem_max_per_sm_kb", "float", "optional", "KiB", "shared memory (LDS) per SM",
              0, 1024, _KIB_MISREAD),
    SpecField("smem_max_per_block_kb", "float", "ignored", "KiB", "shared memory per block",
              0, 1024, _KIB_MISREAD),
    SpecField("smem_default_per_block_kb", "float", "ignored", "KiB", "default shared memory "
              "per block", 0, 1024, _KIB_MISREAD),
    SpecField("regfile_per_sm_kb", "float", "optional", "KiB", "register file per SM", 16,
              4096, _KIB_MISREAD, "the predictor's 256 KiB (every NVIDIA SM since Kepler)"),
    # board power: 70 W (T4) to 1400 W (MI355X)
    SpecField("tdp_w", "float", "extension", "W", "board power; overrides the 'NNNW' of "
              "form_factor", 5, 3000, ((1e3, "kW"),)),
    SpecField("tensor_figures_are_dense", "bool", "check", "", "must be true: every peak here "
              "is dense; put with-sparsity figures in peak_tflops_*_sparse"),
    SpecField("sparsity_2_4_supported", "bool", "ignored"),
    SpecField("sparsity_doubles_tensor_peak", "bool", "ignored"),
    SpecField("datasheet_tensor_figures_sparse_only", "bool", "ignored"),
    *(SpecField(f"{p}_sparse", "float", "extension", f"{u}, with 2:4 sparsity",
                f"the datasheet's with-sparsity figure; only checks {p} (dense = half), or "
                f"gives it when {p} is null", lo, hi, misread)
      for p, u, lo, hi, misread in (
          ("peak_tflops_tf32", "TFLOP/s", 0.2, 40000, _TFLOPS_MISREAD),
          ("peak_tflops_fp16", "TFLOP/s", 0.2, 100000, _TFLOPS_MISREAD),
          ("peak_tflops_bf16", "TFLOP/s", 0.2, 100000, _TFLOPS_MISREAD),
          ("peak_tflops_fp8", "TFLOP/s", 0.2, 200000, _TFLOPS_MISREAD),
          ("peak_tops_int8", "TOP/s", 0.2, 200000,
           tuple((f, u.replace("FLOP", "OP")) for f, u in _TFLOPS_MISREAD)))),
    SpecField("aliases", "list", "extension", "", "names torch.cuda.get_device_name() returns"),
    # interconnect, per GPU and one direction (a datasheet's bidirectional figure halved)
    SpecField("peer_link", "str", "extension", "", "GPU-to-GPU link, e.g. 'NVLink 4'; null: "
              "PCIe only"),
    SpecField("peer_links", "int", "extension", "links", "GPU-to-GPU links per GPU", 0, 64),
    # NVLink: 56.25 GB/s (GA102 bridge) to 900 GB/s (NVLink 5) one direction
    SpecField("peer_link_bw_gbps", "float", "extension", "GB/s, one direction", "all peer "
              "links together", 1, 10000, ((1e3, "TB/s"), (1 / 8, "Gb/s"))),
    SpecField("node_fabric", "str", "extension", "", "'nvswitch', 'nvlink_pairs', 'mesh' or "
              "'pcie'"),
    SpecField("node_gpus", "int", "extension", "GPUs", "GPUs in the usual node", 1, 1024),
    SpecField("pcie_generation", "int", "extension", "generation", "PCIe generation (1-6)", 1,
              6),
    SpecField("pcie_lanes", "int", "extension", "lanes", "PCIe lanes (16 when a generation is "
              "given without lanes)", 1, 32),
    SpecField("network", "str", "extension", "", "the usual node's inter-node network"),
    SpecField("network_bw_gbps", "float", "extension", "GB/s, one direction", "that network's "
              "share per GPU (a NIC's Gb/s over 8)", 0.1, 1000, ((1 / 8, "Gb/s"),)),
    SpecField("interconnect_uncertain", "list", "extension", "", "interconnect values not "
              "cross-checked"),
    SpecField("interconnect_sources", "list", "extension", "", "where the interconnect facts "
              "come from"),
    SpecField("notes", "list", "optional", "", "free text"),
    SpecField("sources", "list", "ignored", "", "source ids (gpus.json's sources.md)"),
    SpecField("_uncertain", "list", "optional", "", "fields whose values were not "
              "cross-checked"),
)
FIELDS: dict[str, SpecField] = {f.name: f for f in SPEC_FIELDS}
# a record with any of these is a spec record (a profile has none of them at its top level)
_SPEC_MARKERS = ("sm_count", "mem_bw_gbps", "peak_tflops_fp32", "boost_clock_mhz", "l2_mb")

# DeviceSpec peak key -> spec field
PEAK_FIELDS: dict[str, str] = {
    "fp64": "peak_tflops_fp64", "fp32": "peak_tflops_fp32",
    "fp32_matrix": "peak_tflops_fp32_matrix", "tf32": "peak_tflops_tf32",
    "fp16": "peak_tflops_fp16", "bf16": "peak_tflops_bf16", "fp8": "peak_tflops_fp8",
    "int8": "peak_tops_int8",
}
VENDORS = ("NVIDIA", "AMD")
NODE_FABRICS = ("nvswitch", "nvlink_pairs", "mesh", "pcie")

# ---------------------------------------------------------------- architecture tables
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
# The same by compute capability, for a chip the table lacks: 6.0 is GP100; 6.1 and 6.2 are
# GP10x like GP104; from 7.0 on every NVIDIA SM is four blocks of one scheduler and one
# dispatch unit (the whitepapers above).
ISSUE_BY_CC: dict[str, tuple[int, int]] = {"6.0": (2, 2), "6.1": (4, 2), "6.2": (4, 2)}
ISSUE_FROM_CC_MAJOR = 7  # and later: (4, 1)
# Combined L1 / shared memory per SM by compute capability (CUDA programming and tuning
# guides, sources.md S20; 12.0 from the programming guide's table of technical specifications
# per compute capability). Pascal's L1 is separate and is left to the predictor.
L1_SMEM_KB_BY_CC: dict[str, float] = {"7.0": 128, "7.5": 96, "8.0": 192, "8.6": 128,
                                      "8.9": 128, "9.0": 256, "10.0": 256, "12.0": 128}
# AMD vector L1 per CU (ROCm's GPU spec table, sources.md S3)
L1_KB_BY_GFX: dict[str, float] = {"gfx908": 16, "gfx90a": 16, "gfx942": 32}
# Dense fp16 FLOPs per clock per SM, the most each compute capability has (sources.md
# "Derived values": Volta/Turing 1024, GA100 2048, GA102/AD10x 1024, GH100 4096, GB100 8192,
# CDNA1/2 1024 per CU, CDNA3 2048). A peak that needs a clock above boost at this rate is not
# dense.
FP16_FLOPS_PER_CLK_BY_CC: dict[str, int] = {
    "7.0": 1024, "7.5": 1024, "8.0": 2048, "8.6": 1024, "8.9": 1024, "9.0": 4096,
    "10.0": 8192, "gfx908": 1024, "gfx90a": 1024, "gfx942": 2048,
}
# PCIe bytes per second per lane and direction as NVIDIA's datasheets round them: 2.5 and
# 5 GT/s with 8b/10b for Gen1/2; 8, 16, 32 GT/s with 128b/130b for Gen3-5 (PCI-SIG); Gen6
# 64 GT/s with FLIT encoding, 128 GB/s per direction at x16 on NVIDIA's sheets.
PCIE_BW_PER_LANE: dict[int, float] = {1: 0.25 * GB, 2: 0.5 * GB, 3: 1 * GB, 4: 2 * GB,
                                      5: 4 * GB, 6: 8 * GB}
# A half-precision peak over these multiples of the fp16 (or bf16) one is not dense: bf16 runs
# at the fp16 rate or below (CDNA1: half), tf32 at half of it, fp8 at twice, int8 at most four
# times (GA102 GeForce, whose fp16 figure is the fp32-accumulate rate). 5% for rounding.
_RATIO_TO_HALF: dict[str, float] = {"bf16": 1.0, "tf32": 0.5, "fp8": 2.0, "int8": 4.0}


def chip_of(chip: str | None) -> str:
    """The die without its packaging note: "Aldebaran (1 GCD)" -> "Aldebaran"."""
    return re.sub(r"\s*\(.*\)$", "", chip or "")


def _issue_lanes(chip: str, cc: str, nvidia: bool) -> tuple[int | None, bool]:
    """(issue lanes per SM, whether compute capability stood in for the chip)."""
    if chip in ISSUE_BY_CHIP:
        schedulers, dispatch = ISSUE_BY_CHIP[chip]
        return schedulers * dispatch * 32, False
    if not nvidia:
        return None, False
    major = cc.split(".")[0]
    if cc in ISSUE_BY_CC:
        schedulers, dispatch = ISSUE_BY_CC[cc]
    elif major.isdigit() and int(major) >= ISSUE_FROM_CC_MAJOR:
        schedulers, dispatch = 4, 1
    else:
        return None, True
    return schedulers * dispatch * 32, True


def _board_power_w(rec: Mapping[str, Any]) -> float | None:
    """``tdp_w``, else the watts in the form factor ("PCIe LP 75W" -> 75), else None."""
    if rec.get("tdp_w") is not None:
        return float(rec["tdp_w"])
    found = re.search(r"(\d+)\s*W\b", rec.get("form_factor") or "")
    return float(found.group(1)) if found else None


def _scaled(value: Any, scale: float) -> float | None:
    return None if value is None else float(value) * scale


# ---------------------------------------------------------------- checking a record
def _type_error(f: SpecField, value: Any) -> str | None:
    """Why ``value`` is not of the field's kind, or None."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if f.kind == "str":
        ok = isinstance(value, str) and value.strip() != ""
        want = "a non-empty string"
    elif f.kind == "int":
        ok = number and math.isfinite(value) and float(value).is_integer()
        want = "a whole number"
    elif f.kind == "float":
        ok = number and math.isfinite(value)
        want = "a number"
    elif f.kind == "bool":
        ok = isinstance(value, bool)
        want = "true or false"
    else:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        want = "a list of strings"
    if ok:
        return None
    return f"is {json.dumps(value)} ({type(value).__name__}); expected {want}"


def _fmt(value: float) -> str:
    """A number as a person writes it: 3350, 0.17, 52428800 (no exponent below 1e15)."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def _range_error(f: SpecField, value: float) -> str | None:
    """Why ``value`` is implausible for the field, with the unit it was likely written in."""
    if f.lo is None or f.hi is None:
        return None
    if value < 0 or (value == 0 and f.lo > 0):
        return f"= {_fmt(value)}: must be {'positive' if f.lo > 0 else 'zero or more'}"
    if f.lo <= value <= f.hi:
        return None
    unit = f.unit.split(",")[0]
    why = f"= {_fmt(value)}: outside the plausible {_fmt(f.lo)}-{_fmt(f.hi)} {unit}"
    for factor, misread_unit in f.misread:
        if f.lo <= value * factor <= f.hi:
            fixed = value * factor
            if f.kind == "int":
                fixed = round(fixed)
            return f"{why}; it looks like {misread_unit}: {_fmt(fixed)} {unit}"
    return why


@dataclass(frozen=True)
class _Problems:
    """Errors found in one record, and the catalog GPU the hints quote."""

    where: str
    similar: DeviceSpec | None
    errors: list[str]

    def add(self, field: str, message: str, hint: bool = True) -> None:
        f = FIELDS.get(field)
        unit = f" ({f.unit})" if f is not None and f.unit else ""
        text = f"{field}{unit} {message}"
        if (hint and self.similar is not None and f is not None and f.role != "ignored"
                and field not in ("id", "name", "aliases")):
            known = datasheet_record(self.similar)
            if field in known:
                have = known[field]
                shown = ("none" if have is None else _fmt(have) if isinstance(have, float)
                         else json.dumps(have))
                text += f"; {self.similar.id} has {shown}"
        self.errors.append(text)

    def raise_if_any(self) -> None:
        if not self.errors:
            return
        about = ""
        if self.similar is not None:
            s = self.similar
            about = (f" (hints quote the most similar catalog GPU, {s.id}: {s.name}, "
                     f"{s.architecture}, {s.compute_capability})")
        lines = "\n".join(f"  - {e}" for e in self.errors)
        n = len(self.errors)
        raise SpecError(f"{self.where}: {n} problem{'s' if n > 1 else ''}{about}:\n{lines}")


def most_similar(rec: Mapping[str, Any]) -> DeviceSpec | None:
    """The catalog GPU most like ``rec``: same chip, then compute capability, architecture and
    vendor, then the closest figures (SMs, clock, bandwidth, fp16 peak) and name. None when
    ``rec`` says none of these."""
    def text(key: str) -> str:
        value = rec.get(key)
        return _norm(value) if isinstance(value, str) else ""

    def number(key: str) -> float | None:
        value = rec.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if value > 0 and math.isfinite(value) else None

    figures = {key: number(key) for key in ("sm_count", "boost_clock_mhz", "mem_bw_gbps",
                                            "peak_tflops_fp16")}

    chip = _norm(chip_of(rec["chip"])) if isinstance(rec.get("chip"), str) else ""
    cc, arch = text("compute_capability"), text("architecture")
    vendor, name = text("vendor"), text("name") or text("id")
    best, best_score = None, -1.0
    for spec in list_devices():
        score = (8.0 * bool(chip and _norm(spec.chip) == chip)
                 + 4.0 * bool(cc and _norm(spec.compute_capability) == cc)
                 + 4.0 * bool(arch and _norm(spec.architecture) == arch)
                 + 2.0 * bool(vendor and _norm(spec.vendor) == vendor)
                 + 2.0 * difflib.SequenceMatcher(None, name, _norm(spec.name)).ratio())
        theirs = datasheet_record(spec)
        for key, mine in figures.items():  # 1 for the same figure, 0 from a factor of e apart
            if mine is not None and theirs.get(key):
                score += max(0.0, 1.0 - abs(math.log(mine / theirs[key])))
        if score > best_score:
            best, best_score = spec, score
    return best if best_score > 0 else None


def _check(rec: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The fields of ``rec`` that are given (whole numbers as ``int``, other numbers as they
    are), or a SpecError listing every missing, mistyped or impossible value."""
    if not isinstance(rec, Mapping):
        raise SpecError(f"{where}: a spec record is a JSON object of gpus.json fields, got "
                        f"{type(rec).__name__}")
    problems = _Problems(where, most_similar(rec), [])
    for key in rec:
        if key not in FIELDS and not str(key).startswith("_"):
            problems.errors.append(f"{unknown('spec record field', key, FIELDS)} Keys "
                                   "starting with '_' are comments.")
    good: dict[str, Any] = {}
    for f in SPEC_FIELDS:
        value = rec.get(f.name)
        if value is None:
            if f.role == "required":
                problems.add(f.name, f"is missing: {f.help}")
            continue
        bad = _type_error(f, value)
        if bad is None and f.kind in ("int", "float"):
            bad = _range_error(f, float(value))
        if bad is not None:
            problems.add(f.name, bad)
        else:
            good[f.name] = int(value) if f.kind == "int" else value
    _check_identity(good, problems)
    _check_clocks_and_peaks(good, problems)
    problems.raise_if_any()
    return good


def _check_identity(good: Mapping[str, Any], problems: _Problems) -> None:
    vendor = good.get("vendor")
    if vendor is not None and vendor not in VENDORS:
        fixed = next((v for v in VENDORS if v.lower() == str(vendor).lower()), None)
        problems.add("vendor", f"= {vendor!r}: the predictor models "
                     f"{' and '.join(map(repr, VENDORS))} GPUs"
                     + (f"; write {fixed!r}" if fixed else ""))
    cc = good.get("compute_capability")
    if cc is not None and vendor in VENDORS:
        pattern, example = ((r"\d+\.\d+", "'9.0'") if vendor == "NVIDIA"
                            else (r"gfx[0-9a-f]+", "'gfx942'"))
        if not re.fullmatch(pattern, cc):
            problems.add("compute_capability", f"= {cc!r}: {vendor} writes it as {example}")
    fabric = good.get("node_fabric")
    if fabric is not None and fabric not in NODE_FABRICS:
        problems.add("node_fabric", f"= {fabric!r}: one of {', '.join(NODE_FABRICS)}")
    if good.get("tensor_figures_are_dense") is False:
        problems.add("tensor_figures_are_dense", "is false: every peak_tflops_* must be dense; "
                     "halve with-sparsity figures, or give them as peak_tflops_*_sparse",
                     hint=False)


def _check_clocks_and_peaks(good: Mapping[str, Any], problems: _Problems) -> None:
    boost, base = good.get("boost_clock_mhz"), good.get("base_clock_mhz")
    if boost is not None and base is not None and base > boost:
        problems.add("base_clock_mhz", f"= {_fmt(base)} is above boost_clock_mhz = "
                     f"{_fmt(boost)}: the base clock is the lower one")
    implied = good.get("tensor_peak_implied_clock_mhz")
    if boost is not None and implied is not None and implied > 1.05 * boost:
        problems.add("tensor_peak_implied_clock_mhz", f"= {_fmt(implied)} is above "
                     f"boost_clock_mhz = {_fmt(boost)}: the dense fp16 peak cannot need a "
                     "clock the GPU never reaches")
    for key in ("tf32", "fp16", "bf16", "fp8", "int8"):
        dense_field = PEAK_FIELDS[key]
        dense, sparse = good.get(dense_field), good.get(f"{dense_field}_sparse")
        if dense is not None and sparse is not None and dense > sparse:
            problems.add(dense_field, f"= {_fmt(dense)} is above {dense_field}_sparse = "
                         f"{_fmt(sparse)}: the dense figure is the smaller one (half the "
                         "sparse one on 2:4-sparse tensor cores)")
    half_field = "peak_tflops_fp16" if "peak_tflops_fp16" in good else "peak_tflops_bf16"
    half = good.get(half_field)
    sms, cc = good.get("sm_count"), good.get("compute_capability")
    per_clk = good.get("fp16_dense_flops_per_clk_per_sm") or FP16_FLOPS_PER_CLK_BY_CC.get(cc or "")
    if half is not None and sms and per_clk and boost:
        need_mhz = half * 1e6 / (sms * per_clk)
        if need_mhz > 1.1 * boost:
            problems.add(half_field, f"= {_fmt(half)} needs a tensor clock of "
                         f"{need_mhz:.0f} MHz at {per_clk} FLOP/clk on {sms} SMs, above the "
                         f"boost clock ({_fmt(boost)} MHz): it looks like a with-sparsity "
                         f"figure (dense: half, {_fmt(half / 2)})")
            return  # the ratios below would only repeat it
        if need_mhz < 0.3 * boost:
            problems.add(half_field, f"= {_fmt(half)} needs only {need_mhz:.0f} MHz at "
                         f"{per_clk} FLOP/clk on {sms} SMs, under a third of the boost clock: "
                         f"a unit 1000 times off? ({_fmt(half)} PFLOP/s is "
                         f"{_fmt(half * 1e3)} TFLOP/s)")
            return
    if half is None:
        return
    for key, ratio in _RATIO_TO_HALF.items():
        field = PEAK_FIELDS[key]
        value = good.get(field)
        if field != half_field and value is not None and value > 1.05 * ratio * half:
            problems.add(field, f"= {_fmt(value)} is over {_fmt(ratio)}x {half_field} "
                         f"({_fmt(half)}), more than any GPU runs {key} against it: it looks "
                         f"like a with-sparsity figure (dense: half, {_fmt(value / 2)})")


# ---------------------------------------------------------------- the one conversion
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
        "mem_bytes": _scaled(rec.get("mem_gb"), GB),
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


# ---------------------------------------------------------------- the inverse: spec -> record
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
        "cuda_cores_per_sm": spec.fp32_lanes_per_sm,
        "tensor_cores_per_sm": spec.tensor_cores_per_sm,
        "issue_lanes_per_sm": None,
    }
    for key, field in PEAK_FIELDS.items():
        rec[field] = per(spec.peak(key), TFLOPS)
    rec.update({
        "mem_gb": per(spec.mem_bytes, GB),
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


# the template's fields, in gpus.json's order; the rest of SPEC_FIELDS are accepted too
TEMPLATE_FIELDS: tuple[str, ...] = (
    "id", "name", "vendor", "architecture", "chip", "form_factor", "compute_capability",
    "sm_count", "boost_clock_mhz", "base_clock_mhz", "cuda_cores_per_sm", "tensor_cores_per_sm",
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


# ---------------------------------------------------------------- spec files
def document_kind(doc: Any) -> str:
    """``"profile"`` (a calibration profile), ``"spec"`` (a spec record or a list of them) or
    ``"catalog_record"`` (a DeviceSpec in the catalog's SI layout), by content; else
    ``"unknown"``."""
    if isinstance(doc, list):
        return "spec"
    if not isinstance(doc, Mapping):
        return "unknown"
    if "format" in doc or "predictor" in doc:
        return "profile"
    if "dram_bw_bytes_per_s" in doc or "peak_flops_per_s" in doc:
        return "catalog_record"
    if any(key in doc for key in _SPEC_MARKERS):
        return "spec"
    return "unknown"


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"device file {str(path)!r} does not exist (a spec file or a "
                                "calibration profile)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"device file {str(path)!r} cannot be read: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"device file {str(path)!r} is not valid JSON: {e}") from None


def _not_a_device(path: Path, kind: str) -> ValueError:
    if kind == "catalog_record":
        return ValueError(
            f"{str(path)!r} is a device in the catalog's SI layout (`devices --json`); a spec "
            "file uses the datasheet's fields and units: `torch-gemm-cost devices --template "
            "--like ID` prints one")
    return ValueError(
        f"{str(path)!r} is neither a spec file (a gpus.json record, or a list of them, with "
        f"fields such as {', '.join(_SPEC_MARKERS[:3])}) nor a calibration profile "
        f"(\"format\": \"{PROFILE_FORMAT}\"): `torch-gemm-cost devices --template` prints a "
        "spec record to fill in")


def _specs(doc: Any, path: Path, warn: bool) -> list[DeviceSpec]:
    """The devices of a parsed spec file (see ``load_spec_file``)."""
    records = doc if isinstance(doc, list) else [doc]
    if not records:
        raise SpecError(f"spec file {str(path)!r} holds an empty list")
    specs: list[DeviceSpec] = []
    for i, rec in enumerate(records):
        label = rec.get("id") if isinstance(rec, Mapping) else None
        where = (f"spec file {str(path)!r}"
                 + (f", record {label!r}" if isinstance(label, str) else
                    f", record {i}" if len(records) > 1 else ""))
        spec, fallbacks = spec_from_datasheet(rec, where)
        if warn and fallbacks:
            warnings.warn(
                f"{where}: {len(fallbacks)} optional fact{'s' if len(fallbacks) > 1 else ''} "
                f"not given, fallen back: " + "; ".join(fallbacks),
                SpecFallbackWarning, stacklevel=_stacklevel_of_caller())
        specs.append(spec)
    ids = [s.id for s in specs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise SpecError(f"spec file {str(path)!r}: id {dup[0]!r} names more than one record")
    return specs


def load_spec_file(path: str | os.PathLike[str], *, warn: bool = True) -> list[DeviceSpec]:
    """Every device of a spec file: one record of gpus.json's schema, or a list of them.

    Each record is checked (a SpecError lists every problem, naming the file and record) and
    converted by ``catalog_record``; the specs carry ``origin="spec_file"``. One
    ``SpecFallbackWarning`` per record lists the optional facts it left out and what stands in.
    A calibration profile, or any other JSON, raises a ValueError saying what it is.
    """
    path = Path(path)
    doc = _read_json(path)
    kind = document_kind(doc)
    if kind == "profile":
        raise ValueError(f"{str(path)!r} is a calibration profile, not a spec file")
    if kind != "spec":
        raise _not_a_device(path, kind)
    return _specs(doc, path, warn)


def read_device_file(path: str | os.PathLike[str]) -> DeviceSpec | Mapping[str, Any]:
    """The device of a spec file, or the parsed document of a calibration profile.

    The two are told apart by content, never by name: a spec file (one gpus.json record) is
    read here into its spec; a calibration profile (written by ``torch-gemm-cost calibrate``)
    is returned as its document, for the predict stage to load its predictor
    (``predict/target.resolve_target``). A spec file of several devices, or any other JSON,
    raises a ValueError saying what it holds.
    """
    path = Path(path)
    doc = _read_json(path)
    kind = document_kind(doc)
    if kind == "profile":
        return doc
    if kind != "spec":
        raise _not_a_device(path, kind)
    specs = _specs(doc, path, warn=True)
    if len(specs) > 1:
        raise ValueError(
            f"spec file {str(path)!r} holds {len(specs)} devices "
            f"({', '.join(s.id for s in specs)}); a device is one of them: "
            "torch_gemm_cost.load_spec_file(path)[i], or predict-csv --device-spec for all")
    return specs[0]
