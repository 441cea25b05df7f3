"""The hardware catalog: typed, frozen device records looked up by id or by driver name.

The catalog is ``data/devices.json``, built by ``scripts/build_catalog.py`` from the hardware facts
that ship with the measured data, through ``datasheet.catalog_record``, which also reads a GPU the
catalog lacks from a spec file. The local CUDA GPU, when there is one, is described from
``torch.cuda.get_device_properties`` and matched to the catalog by name.
"""

from __future__ import annotations

import json
import os
import re
import sys
import types
import typing
import warnings
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import lru_cache
from importlib import resources
from typing import Any

import torch

from ..suggest import nearest, unknown
from .dtypes import DTYPES, ComputeDtype, resolve_dtype

__all__ = [
    "BOARD_CLASSES",
    "DeviceLike",
    "DeviceSpec",
    "board_class_from_name",
    "check_dtype_on_device",
    "get_device",
    "is_cpu",
    "list_devices",
    "local_device",
    "spec_from_record",
    "spec_to_record",
]


# Who a board is built for, which sets how its clock behaves under load (not its chip: an RTX
# 3090 and an A40 are both GA102). "datacenter": passively cooled in a server's airflow, its
# boost clock the top clock it runs; "workstation": a blower-cooled professional card (RTX A6000,
# RTX PRO 6000), priced as datacenter until measured; "geforce": a fan-cooled consumer card,
# whose rated boost clock is a typical one that GPU Boost exceeds while power and temperature
# allow (predict/gemm/power.py).
BOARD_CLASSES: tuple[str, ...] = ("datacenter", "workstation", "geforce")


def board_class_from_name(name: str) -> str:
    """The board class a product name says (a name that says nothing: "datacenter").

    >>> [board_class_from_name(n) for n in ("NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000",
    ...                                     "NVIDIA RTX PRO 6000 Blackwell", "NVIDIA L40S")]
    ['geforce', 'workstation', 'workstation', 'datacenter']
    """
    low = name.lower()
    if "geforce" in low or "titan" in low:
        return "geforce"
    if re.search(r"\brtx (a\d|pro\b)|quadro|ada generation", low):
        return "workstation"
    return "datacenter"


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator. Every figure is dense (no 2:4 sparsity) and in SI units."""

    id: str
    name: str
    vendor: str
    architecture: str
    compute_capability: str  # "9.0" on NVIDIA, the LLVM target ("gfx942") on AMD
    sm_count: int  # SMs on NVIDIA, CUs on AMD
    boost_clock_mhz: float | None
    tensor_cores_per_sm: int
    mem_bytes: float | None
    dram_bw_bytes_per_s: float
    l2_bytes: float
    l3_bytes: float | None
    l1_bytes_per_sm: float | None
    smem_bytes_per_sm: float | None
    regfile_bytes_per_sm: float | None
    # keys: fp64, fp32, fp32_matrix, tf32, fp16, bf16, fp8, int8, fp4; None where the device
    # lacks it
    peak_flops: tuple[tuple[str, float | None], ...]
    aliases: tuple[str, ...] = ()
    tdp_w: float | None = None  # board power: power-capped parts sustain less than their peak
    uncertain: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=(), repr=False, compare=False)
    chip: str = ""  # the die ("GA100"): boards of one chip share their physics and leave together
    fp32_lanes_per_sm: int | None = None  # FP32 (CUDA-core) lanes per SM; None where unknown
    # the clock guaranteed under the board's power limit on a heavy load; None where unpublished
    base_clock_mhz: float | None = None
    issue_lanes_per_sm: int | None = None  # instruction lanes an SM issues a clock
    board_class: str = "datacenter"  # one of BOARD_CLASSES
    # the clock the board holds running a dense GEMM flat out at its power limit, where the
    # vendor publishes it (AMD: the median clock of its Max-Achievable FLOPs runs); None where not
    gemm_clock_mhz: float | None = None
    # Interconnect of the GPU and of its usual node. Every bandwidth is per GPU and one direction
    # (a datasheet's "bidirectional" figure halved); scripts/build_catalog.py cites the sources.
    peer_link: str | None = None  # "NVLink 3", "Infinity Fabric (xGMI 3)"; None: PCIe only
    peer_links: int = 0  # GPU-to-GPU links per GPU
    peer_link_bw_bytes_per_s: float | None = None  # all of them together
    node_fabric: str = "pcie"  # the usual node: "nvswitch", "nvlink_pairs", "mesh" or "pcie"
    node_gpus: int = 1  # GPUs in the usual node
    pcie_generation: int | None = None
    pcie_lanes: int | None = None
    pcie_bw_bytes_per_s: float | None = None
    network: str | None = None  # the usual node's inter-node network; None: no standard one
    network_bw_bytes_per_s: float | None = None  # that network's share per GPU
    interconnect_uncertain: tuple[str, ...] = field(default=(), repr=False, compare=False)
    interconnect_sources: tuple[str, ...] = field(default=(), repr=False, compare=False)
    # Where the facts came from: "catalog" (data/devices.json); "spec_file" (a datasheet record
    # the user gave, see hardware/datasheet.py: no GEMM of this device was ever measured, so an interval
    # should take the widest class, an architecture the fit has not seen); "detected" (a local
    # GPU the catalog lacks, or the host CPU). Not compared: a spec file holding a catalog GPU's
    # record is that GPU, and the predictor treats it so.
    origin: str = field(default="catalog", compare=False)

    def peak(self, key: str) -> float | None:
        """Raw datasheet peak in FLOP/s (or OP/s for int8) for a peak key, None if absent."""
        return dict(self.peak_flops).get(key)

    def supports(self, dtype: str | torch.dtype | ComputeDtype) -> bool:
        """Whether the device has a native datasheet rate for this dtype."""
        return self.peak(resolve_dtype(dtype).peak_key) is not None

    def peak_flops_per_s(self, dtype: str | torch.dtype | ComputeDtype) -> float:
        """Dense peak that a GEMM in ``dtype`` can reach on this device.

        Where the device lacks a native rate, the path that would actually run is used:
        tf32 falls back to fp32, bf16 without bf16 tensor cores runs at the fp32 rate. fp8 and
        int8 without hardware support have no such path and raise.
        """
        cd = resolve_dtype(dtype)
        key = cd.peak_key
        value = self.peak(key)
        if key == "fp32":
            # AMD CDNA runs fp32 GEMMs on the matrix cores (partly reached; see DESIGN.md).
            value = self.peak("fp32_matrix") or value
        if value is None and key in ("tf32", "bf16", "fp64"):
            value = self.peak("fp32")
        if value is None:
            have = [k for k, v in self.peak_flops if v is not None]
            raise ValueError(
                f"device {self.id!r} ({self.name}) has no {cd.name} support; "
                f"it supports: {', '.join(have)}"
            )
        return value

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity at which fp16 (or fp32) compute and DRAM bandwidth balance."""
        peak = self.peak("fp16") or self.peak("fp32") or 0.0
        return peak / self.dram_bw_bytes_per_s


# ---------------------------------------------------------------- the JSON record of a spec
# The catalog (data/devices.json) and calibration profiles store a DeviceSpec the same way: one
# key per field, the peaks as an object under ``peak_flops_per_s``, tuples as lists.
_PEAKS_KEY = "peak_flops_per_s"


def spec_to_record(spec: DeviceSpec) -> dict[str, Any]:
    """``spec`` as a JSON record of the catalog's layout (``spec_from_record`` reads it back)."""
    rec: dict[str, Any] = {}
    for f in fields(DeviceSpec):
        value = getattr(spec, f.name)
        if f.name == "peak_flops":
            rec[_PEAKS_KEY] = dict(value)
        else:
            rec[f.name] = list(value) if isinstance(value, tuple) else value
    return rec


# a spec, a catalog id or name, a spec file or a calibration profile (target.resolve_target)
DeviceLike = str | DeviceSpec | os.PathLike[str]


def _check_type(where: str, value: Any, hint: Any) -> Any:
    """``value`` as the field type ``hint`` wants (str, int, float, tuple of str, or any of
    them or None); TypeError naming ``where`` when it is none of them."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in options:
        return None
    for t in options:
        if t is str and isinstance(value, str):
            return value
        if t is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if t is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if typing.get_origin(t) is tuple and isinstance(value, (list, tuple)):
            return tuple(map(str, value))
    names = " or ".join("null" if t is type(None) else getattr(t, "__name__", "list")
                        for t in options)
    raise TypeError(f"'{where}' has type {type(value).__name__}, expected {names}")


def spec_from_record(rec: Any, where: str = "device") -> DeviceSpec:
    """A ``DeviceSpec`` from its JSON record (see ``spec_to_record``), checked field by field.

    A field with a default may be absent (records written before it existed); any other
    missing field raises a ValueError naming ``where`` and the field; a wrong type a TypeError;
    a peak that is not a positive number or null, a non-positive DRAM bandwidth, SM count or
    board power a ValueError.
    """
    if not isinstance(rec, Mapping):
        raise TypeError(f"'{where}' must be an object")
    hints = typing.get_type_hints(DeviceSpec)
    values: dict[str, Any] = {}
    for f in fields(DeviceSpec):
        key = _PEAKS_KEY if f.name == "peak_flops" else f.name
        if key not in rec:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ValueError(f"'{where}' lacks {key!r}")
            continue
        if f.name == "peak_flops":
            values[f.name] = _peaks(rec[key], f"{where}.{key}")
        else:
            values[f.name] = _check_type(f"{where}.{key}", rec[key], hints[f.name])
    if not values["dram_bw_bytes_per_s"] > 0 or values["sm_count"] < 1:
        raise ValueError(f"'{where}.dram_bw_bytes_per_s' and '{where}.sm_count' must be positive")
    board_class = values.get("board_class", "datacenter")
    if board_class not in BOARD_CLASSES:
        raise ValueError(f"'{where}.board_class': {unknown('board class', board_class, BOARD_CLASSES)}")
    tdp_w = values.get("tdp_w")
    if tdp_w is not None and not tdp_w > 0:
        raise ValueError(f"'{where}.tdp_w' must be a positive number or null, got {tdp_w!r}")
    return DeviceSpec(**values)


def _peaks(raw: Any, where: str) -> tuple[tuple[str, float | None], ...]:
    if not isinstance(raw, Mapping):
        raise TypeError(f"'{where}' has type {type(raw).__name__}, expected dict")
    peaks: dict[str, float | None] = {}
    for key, value in raw.items():
        if value is not None and not (isinstance(value, (int, float))
                                      and not isinstance(value, bool) and value > 0):
            raise ValueError(f"'{where}.{key}' must be a positive number or null, got {value!r}")
        peaks[str(key)] = None if value is None else float(value)
    return tuple(sorted(peaks.items()))


@lru_cache(maxsize=1)
def _catalog() -> dict[str, DeviceSpec]:
    text = resources.files("torch_gemm_cost").joinpath("data/devices.json").read_text()
    return {rec["id"]: spec_from_record(rec, f"devices.json {rec.get('id')}")
            for rec in json.loads(text)["devices"]}


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", name.lower())


@lru_cache(maxsize=1)
def _by_name() -> dict[str, str]:
    table: dict[str, str] = {}
    for spec in _catalog().values():
        for key in (spec.id, spec.name, *spec.aliases):
            table.setdefault(_norm(key), spec.id)
    return table


def list_devices() -> list[DeviceSpec]:
    """Every catalog device, in catalog order."""
    return list(_catalog().values())


def get_device(device: str | DeviceSpec) -> DeviceSpec:
    """Look a device up by catalog id (``"h100_sxm5_80gb"``) or driver name (``"Tesla T4"``).

    ``"cuda"`` / ``"cuda:N"`` describe the local GPU. A path to a spec file or a calibrated
    ``profile.json`` is accepted by the prediction entry points (``target.resolve_target``), not
    here.
    """
    if isinstance(device, DeviceSpec):
        return device
    if not isinstance(device, str):
        raise TypeError(f"device must be a catalog id or name, got {type(device).__name__}")
    if device == "cuda" or device.startswith("cuda:"):
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        return local_device(index)
    hit = _by_name().get(_norm(device))
    if hit is not None:
        return _catalog()[hit]
    # a family or architecture name ("a100", "mi300", "hopper") names every board of it first
    query = _norm(device)
    family = [spec.id for spec in _catalog().values()
              if query and any(query in _norm(key) for key in (spec.id, spec.name,
                                                               spec.architecture or ""))]
    names = sorted({*(_catalog()), *(s.name for s in _catalog().values())})
    close = nearest(device, names, n=4, cutoff=0.4)
    if not close:
        close = [_by_name()[c] for c in nearest(query, _by_name(), n=4, cutoff=0.4)]
    close = list(dict.fromkeys([*family, *close]))[:max(4, len(family))]
    raise ValueError(
        f"{unknown('device', device, _catalog(), close=close)} See "
        f"torch_gemm_cost.list_devices() for all {len(_catalog())} devices."
    )


# what a dtype falls back to, in order, when a device lacks it (the nearest good one)
_FALLBACKS: tuple[str, ...] = ("bfloat16", "float16", "tf32", "float32")


def check_dtype_on_device(spec: DeviceSpec, cd: ComputeDtype) -> None:
    """Raise if ``spec`` cannot run ``cd`` at all; warn if it runs it on a slower path.

    bf16 on V100/T4 has no tensor cores: it warns, and the prediction uses the path that would
    run (the fp32 rate, see ``DeviceSpec.peak_flops_per_s``). fp8 without fp8 units raises.
    """
    if spec.supports(cd):
        return
    nearest = next(
        (d for d in _FALLBACKS if spec.supports(d) and DTYPES[d].tensor_core), None
    ) or next((d for d in _FALLBACKS if spec.supports(d)), None)
    try:
        spec.peak_flops_per_s(cd)
    except ValueError:
        able = [d.id for d in list_devices() if d.supports(cd)]
        raise ValueError(
            f"device {spec.id!r} ({spec.name}) cannot run {cd.name} GEMMs; nearest supported "
            f"dtype: {nearest!r}. Devices with {cd.name}: {', '.join(able) or 'none'}"
        ) from None
    warnings.warn(
        f"device {spec.id!r} ({spec.name}) has no {cd.peak_key} "
        f"{'tensor cores' if cd.tensor_core else 'units'}; predicting the path that runs "
        f"instead ({spec.peak_flops_per_s(cd) / 1e12:.4g} TFLOP/s). Nearest native dtype: "
        f"{nearest!r}",
        stacklevel=_stacklevel_of_caller(),
    )


def _stacklevel_of_caller() -> int:
    """The ``stacklevel`` at which a warning raised by this function's caller names the first
    frame outside the package: the user's call, however deep the package's own calls run."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package root
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame = frame.f_back
        level += 1
    return level


def local_device(index: int = 0) -> DeviceSpec:
    """Describe the local CUDA GPU, matched to the catalog by its driver name.

    A GPU the catalog lacks gets a spec from ``torch.cuda.get_device_properties``; its peaks are
    unknown until ``torch-gemm-cost calibrate`` measures them.
    """
    if not torch.cuda.is_available():
        raise ValueError("device 'cuda' was requested but torch.cuda.is_available() is False")
    props = torch.cuda.get_device_properties(index)
    hit = _by_name().get(_norm(props.name))
    if hit is not None:
        spec = _catalog()[hit]
        return replace(spec, sm_count=int(props.multi_processor_count))
    l2 = float(getattr(props, "L2_cache_size", 0) or 0)
    return DeviceSpec(
        id=_norm(props.name) or f"cuda{index}",
        name=props.name,
        vendor="AMD" if torch.version.hip else "NVIDIA",
        architecture="unknown",
        compute_capability=f"{props.major}.{props.minor}",
        sm_count=int(props.multi_processor_count),
        boost_clock_mhz=None,
        tensor_cores_per_sm=0,
        mem_bytes=float(props.total_memory),
        dram_bw_bytes_per_s=float("nan"),
        l2_bytes=l2,
        l3_bytes=None,
        l1_bytes_per_sm=None,
        smem_bytes_per_sm=float(getattr(props, "shared_memory_per_multiprocessor", 0) or 0),
        regfile_bytes_per_sm=None,
        peak_flops=(),
        aliases=(props.name,),
        board_class=board_class_from_name(props.name),
        uncertain=("peak_flops", "dram_bw_bytes_per_s"),
        origin="detected",
    )


def is_cpu(spec: DeviceSpec) -> bool:
    """Whether ``spec`` describes a CPU (``host_cpu``: cores in place of SMs) or a GPU."""
    return spec.architecture == "cpu"
