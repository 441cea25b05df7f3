"""Per-row inputs of the hybrid predictor: device columns, engines, and the MLP's feature schema.

Training predicts many devices in one batch, so every device figure becomes a per-row tensor.
The utilization MLP sees only normalized, device-relative features (no device identity), listed
once in ``MLP_FEATURES``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...hardware.catalog import DeviceSpec
from ...hardware.dtypes import DTYPES
from ..base import DTYPE_NAMES, GemmBatch
from .power import top_clock_over_boost
from .tiles import ENGINES

__all__ = [
    "FAMILIES",
    "MLP_FEATURES",
    "PEAK_KEYS",
    "DeviceTable",
    "RowInputs",
    "base_clock_share",
    "gemm_clock_share",
    "library_family",
    "mlp_features",
    "simt_issue_per_lane",
]

# Which sustained-efficiency parameter (the share of its datasheet peak) a (device, dtype) pair
# uses. NVIDIA tensor cores run tf32, fp16, bf16 and fp8 on one MMA pipeline whose rate the
# datasheet scales by precision, and cuBLAS keeps about the same share of each: an H200's large
# aligned Linear GEMMs ran at 0.79 (bf16), 0.75 (fp16), 0.79 (tf32) and 0.72 (fp8) of peak.
# So they share "tensor_float", fitted on every NVIDIA tensor-core row, and a precision measured
# on few GPUs (bf16, fp8, tf32 on a B200 alone) borrows the level the fp16 rows of four others
# set. AMD's matrix cores do not keep one share: an MI300X's large GEMMs
# ran at 0.43 (bf16), 0.66 (fp8) and 0.36 (tf32) of peak, so each AMD precision keeps its own,
# fp16 and bf16 sharing "amd_half" (same rate on CDNA 2 and 3).
PEAK_KEYS: tuple[str, ...] = ("fp64", "fp32", "fp32_matrix", "tensor_float", "amd_half",
                              "amd_tf32", "amd_fp8", "int8", "fp16_simt")
_AMD_MATRIX_KEYS = {"fp16": "amd_half", "bf16": "amd_half", "tf32": "amd_tf32",
                    "fp8": "amd_fp8"}


# Kernel-library generations: GPUs of one family run the same cuBLAS/rocBLAS kernel set
# (Turing runs volta_sgemm, Ada runs ampere_*), so which tile the library picks transfers within
# a family. "other" is every device outside these (CPUs, unknown vendors).
FAMILIES: tuple[str, ...] = ("other", "pascal", "volta", "ampere", "hopper", "blackwell", "cdna")


def library_family(device: DeviceSpec) -> str:
    """The kernel-library family of a device (see ``FAMILIES``).

    >>> from torch_gemm_cost.hardware.catalog import get_device
    >>> library_family(get_device("tesla_t4")), library_family(get_device("mi210"))
    ('volta', 'cdna')
    """
    if device.vendor.upper() == "AMD":
        return "cdna" if device.compute_capability.startswith("gfx9") else "other"
    major = device.compute_capability.split(".")[0]
    if not major.isdigit():
        return "other"
    by_major = {6: "pascal", 7: "volta", 8: "ampere", 9: "hopper", 10: "blackwell",
                12: "blackwell"}
    return by_major.get(int(major), "other")


# L1 data cache per SM where the catalog has none (Pascal: a separate 24 KB L1/texture cache)
PASCAL_L1_BYTES = 24 * 1024


def base_clock_share(device: DeviceSpec) -> float:
    """Base over boost clock, NaN where either is unknown (then no clock drop applies)."""
    if not device.base_clock_mhz or not device.boost_clock_mhz:
        return math.nan
    return float(device.base_clock_mhz) / float(device.boost_clock_mhz)


def gemm_clock_share(device: DeviceSpec) -> float:
    """The clock a board holds on a flat-out dense GEMM over its boost clock, NaN where
    unpublished (then no such drop applies)."""
    if not device.gemm_clock_mhz or not device.boost_clock_mhz:
        return math.nan
    return float(device.gemm_clock_mhz) / float(device.boost_clock_mhz)


def simt_issue_per_lane(device: DeviceSpec) -> float:
    """Instruction lanes the SM issues a clock per FP32 lane: 2 on Pascal, Volta, Turing and
    GA100, 1 on GA102, Ada, Hopper and Blackwell. Where unknown (AMD, CPUs), 2: issue never
    binds."""
    if not device.issue_lanes_per_sm or not device.fp32_lanes_per_sm:
        return 2.0
    return float(device.issue_lanes_per_sm) / float(device.fp32_lanes_per_sm)


def _engine_and_key(device: DeviceSpec, dtype: str) -> tuple[str, str, float]:
    """(engine, efficiency key, datasheet peak) for a dtype on a device; peak NaN if unsupported."""
    cd = DTYPES[dtype]
    try:
        peak = device.peak_flops_per_s(cd)
    except ValueError:
        return "simt", "fp32", math.nan
    key = cd.peak_key
    amd = library_family(device) == "cdna"  # an AMD Instinct GPU, not an AMD CPU
    if key == "fp32" and amd and device.peak("fp32_matrix"):
        return "mma", "fp32_matrix", peak
    native = device.peak(key) is not None
    if not native or key in ("fp32", "fp64"):
        return "simt", "fp32" if key != "fp64" else "fp64", peak
    has_matrix = device.tensor_cores_per_sm > 0 or amd
    if not cd.tensor_core or not has_matrix:
        # vector units (a CPU's bf16 dot products, a P100's packed fp16); any other precision
        # there is priced at the fp32 share of its own peak
        simt_key = {"fp16": "fp16_simt", "bf16": "fp16_simt", "int8": "int8"}.get(key, "fp32")
        return "simt", simt_key, peak
    if amd:
        return "mma", _AMD_MATRIX_KEYS.get(key, key), peak
    # the large-tile engine is Hopper's and datacenter Blackwell's (wgmma, tcgen05); GeForce and
    # workstation Blackwell (compute capability 12) keep Ampere's warp-level MMA
    major = device.compute_capability.split(".")[0]
    large = major.isdigit() and 9 <= int(major) < 12
    return ("mma_large" if large else "mma"), ("int8" if key == "int8" else "tensor_float"), peak


@dataclass(frozen=True)
class DeviceTable:
    """D devices as (D,) columns, and per (device, dtype) engine, efficiency key and peak."""

    ids: tuple[str, ...]
    sm_count: torch.Tensor
    clock_hz: torch.Tensor  # the rated boost clock
    top_clock: torch.Tensor  # a matrix GEMM's top clock over it (power.top_clock_over_boost)
    dram_bw_bytes_per_s: torch.Tensor
    l2_bytes: torch.Tensor
    regfile_bytes: torch.Tensor
    l1_bytes: torch.Tensor
    base_clock_share: torch.Tensor  # base / boost clock, NaN where unknown
    gemm_clock_share: torch.Tensor  # a flat-out GEMM's clock / boost clock, NaN where unknown
    issue_per_lane: torch.Tensor  # SIMT instruction lanes issued a clock per FP32 lane
    family: torch.Tensor  # long, indexes FAMILIES
    # bool: tensor-core floats with fp32 accumulation run at half rate (GeForce boards)
    half_rate_float: torch.Tensor
    peak_flops_per_s: torch.Tensor  # (D, n_dtypes), NaN where unsupported
    engine: torch.Tensor  # (D, n_dtypes) long, indexes ENGINES
    peak_key: torch.Tensor  # (D, n_dtypes) long, indexes PEAK_KEYS

    @classmethod
    def build(cls, devices: Sequence[DeviceSpec]) -> DeviceTable:
        def col(values: Sequence[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float64)

        triples = [[_engine_and_key(d, name) for name in DTYPE_NAMES] for d in devices]
        return cls(
            ids=tuple(d.id for d in devices),
            sm_count=col([float(d.sm_count) for d in devices]),
            clock_hz=col([float(d.boost_clock_mhz or 1500.0) * 1e6 for d in devices]),
            top_clock=col([top_clock_over_boost(d.board_class) for d in devices]),
            dram_bw_bytes_per_s=col([d.dram_bw_bytes_per_s for d in devices]),
            l2_bytes=col([max(d.l2_bytes, 1.0) for d in devices]),
            regfile_bytes=col([float(d.regfile_bytes_per_sm or 262144.0) for d in devices]),
            base_clock_share=col([base_clock_share(d) for d in devices]),
            gemm_clock_share=col([gemm_clock_share(d) for d in devices]),
            issue_per_lane=col([simt_issue_per_lane(d) for d in devices]),
            family=torch.tensor([FAMILIES.index(library_family(d)) for d in devices]),
            # a GeForce board's tensor-core floats with fp32 accumulation (what PyTorch's
            # cuBLAS calls ask for: compute type CUDA_R_32F, pytorch/pytorch#123157) run at
            # half the rate of the same SM on a datacenter board (GA102 and Ada whitepapers).
            # The catalog's peaks per SM per clock: RTX 3090 511 fp16 and 256 tf32 FLOP against
            # the A40's 1024 and 512 (both GA102); RTX 4090 1024 fp8 and 256 tf32 against the
            # L40S's 2048 and 511 (both AD102); int8 keeps the full rate
            half_rate_float=torch.tensor([d.board_class == "geforce" for d in devices]),
            # the L1 that serves global loads: unified with shared memory since Volta (96-256
            # KB); Pascal's separate L1 is not in the catalog, so its 24 KB is assumed
            l1_bytes=col([float(d.l1_bytes_per_sm or PASCAL_L1_BYTES) for d in devices]),
            peak_flops_per_s=torch.tensor([[t[2] for t in row] for row in triples],
                                          dtype=torch.float64),
            engine=torch.tensor([[ENGINES.index(t[0]) for t in row] for row in triples]),
            peak_key=torch.tensor([[PEAK_KEYS.index(t[1]) for t in row] for row in triples]),
        )


@dataclass(frozen=True)
class RowInputs:
    """Everything the hybrid model needs per GEMM row, (N,) each."""

    gemms: GemmBatch
    sm_count: torch.Tensor
    clock_hz: torch.Tensor
    dram_bw_bytes_per_s: torch.Tensor
    l2_bytes: torch.Tensor
    regfile_bytes: torch.Tensor
    l1_bytes: torch.Tensor
    base_clock_share: torch.Tensor
    gemm_clock_share: torch.Tensor
    issue_per_lane: torch.Tensor
    family: torch.Tensor  # long
    peak_flops_per_s: torch.Tensor
    engine: torch.Tensor  # long
    peak_key: torch.Tensor  # long
    launch: torch.Tensor  # long, index into the predictor's launch-overhead table
    # bool: tensor-core float math at half rate, so a tile taller than m runs only the 16-row
    # MMA steps that hold rows (hybrid._geometry, tiles.mma_row_share)
    mma_row_steps: torch.Tensor

    def to(self, dtype: torch.dtype) -> RowInputs:
        """The same rows with every floating tensor (GEMM columns included) in ``dtype``."""

        def conv(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype) if t.is_floating_point() else t

        g = self.gemms
        gemms = GemmBatch(**{f: conv(getattr(g, f)) for f in g.__dataclass_fields__})
        fields = {f: conv(getattr(self, f)) for f in self.__dataclass_fields__ if f != "gemms"}
        return RowInputs(gemms=gemms, **fields)

    @classmethod
    def gather(cls, gemms: GemmBatch, table: DeviceTable, device_index: torch.Tensor,
               launch_index: torch.Tensor) -> RowInputs:
        """Each row's device columns. A matrix-unit GEMM on a GeForce board runs above the rated
        boost clock, and every clocked rate with it (the peak, the caches, the kernel floor),
        its base and GEMM clocks a smaller share of it; a SIMT GEMM keeps the rated boost
        (power.top_clock_over_boost). Every other board's top clock is 1: the same bits.
        Its tensor-core floats also run at half rate (``mma_row_steps``)."""
        d, t = device_index, gemms.dtype_index
        engine = table.engine[d, t]
        top = torch.where(engine == ENGINES.index("simt"), torch.ones_like(table.top_clock[d]),
                          table.top_clock[d])  # (N,)
        return cls(
            gemms=gemms,
            sm_count=table.sm_count[d],
            clock_hz=table.clock_hz[d] * top,
            dram_bw_bytes_per_s=table.dram_bw_bytes_per_s[d],
            l2_bytes=table.l2_bytes[d],
            regfile_bytes=table.regfile_bytes[d],
            base_clock_share=table.base_clock_share[d] / top,
            gemm_clock_share=table.gemm_clock_share[d] / top,
            issue_per_lane=table.issue_per_lane[d],
            family=table.family[d],
            l1_bytes=table.l1_bytes[d],
            peak_flops_per_s=table.peak_flops_per_s[d, t] * top,
            engine=engine,
            peak_key=table.peak_key[d, t],
            launch=launch_index,
            mma_row_steps=table.half_rate_float[d]
            & (table.peak_key[d, t] == PEAK_KEYS.index("tensor_float")),
        )


MLP_FEATURES: tuple[str, ...] = (
    "log2_m", "log2_n", "log2_k", "log2_batch",
    "log2_tiles", "log2_waves", "last_wave_fill", "log2_split_k",
    "a_align", "b_align", "c_align", "in_bits",
    "h1", "h2", "log2_inst_per_tile", "log_intensity_over_ridge",
    "log2_sms", "log2_l2_over_working_set", "engine_simt", "engine_mma_large", "log2_l1_per_sm",
    "b_transposed",
)


def mlp_features(columns: dict[str, torch.Tensor]) -> torch.Tensor:
    """Stack raw per-row quantities into the normalized (N, F) input, in ``MLP_FEATURES`` order.

    ``columns`` holds: m, n, k, batch, tiles, waves, last_wave_fill, split_k, a_align, b_align,
    c_align, in_bytes, h1, h2, inst_per_tile, intensity_over_ridge, sm_count, l2_over_working_set,
    engine (long), l1_per_sm, b_transposed.

    The L1 size separates the GPUs whose large-k GEMMs fall to a third of peak (P100, P4, MI210:
    separate L1 of 16-48 KB) from those that hold it (Volta on: unified L1 of 96 KB or more).

    ``b_transposed`` (B stored (n, k), as a Linear weight is) tells a Linear from a matmul,
    for which libraries run other kernels. On NeuSight's fp32 rows over 1 ms, Pascal's kernels for a Linear (B read along k,
    ``maxwell_sgemm_*_tn``) reach 0.5-0.75 of the rate of its batched ``nn`` kernel (P4:
    64x64_tn 1.1 TFLOP/s, 128x64_nn 2.0), where on Volta and Turing the Linear kernels are the
    faster ones.
    """
    c = columns
    lg = torch.log2
    feats = [
        lg(c["m"]) / 16.0, lg(c["n"]) / 16.0, lg(c["k"]) / 16.0, lg(c["batch"]) / 12.0,
        lg(c["tiles"]) / 20.0, lg(c["waves"]) / 12.0, c["last_wave_fill"], lg(c["split_k"]) / 3.0,
        c["a_align"] / 16.0, c["b_align"] / 16.0, c["c_align"] / 16.0, c["in_bytes"] / 4.0,
        c["h1"], c["h2"], lg(c["inst_per_tile"]) / 20.0,
        torch.clamp(torch.log(c["intensity_over_ridge"]), -8.0, 8.0) / 4.0,
        lg(c["sm_count"]) / 8.0, torch.clamp(lg(c["l2_over_working_set"]), -20.0, 20.0) / 10.0,
        (c["engine"] == ENGINES.index("simt")).to(c["m"].dtype),
        (c["engine"] == ENGINES.index("mma_large")).to(c["m"].dtype),
        (lg(c["l1_per_sm"]) - 16.0) / 2.0,
        c["b_transposed"],
    ]
    return torch.stack(feats, dim=1)
