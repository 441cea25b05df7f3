"""A GEMM's bucket, each of its fields known before anything runs: how new its device is to the
fit (novelty), its engine, its precision, its regime and its size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...hardware.catalog import DeviceSpec, get_device
from ...hardware.dtypes import DTYPES
from ...records.types import DTYPE_NAMES, GemmBatch
from ..gemm.features import DeviceTable, library_family
from ..gemm.roofline import peak_flops_per_s
from ..gemm.tiles import ENGINES

NOVELTY: tuple[str, ...] = ("calibrated", "chip_seen", "family_seen", "family_unseen",
                             "generation_unseen", "board_unseen", "spec_file")
# the classes unlike any GPU in the fit: no buckets of their own, the family-unseen ones
# stretched by the calibration's stretch (``IntervalCalibration.stretch``)
UNLIKE: tuple[str, ...] = ("generation_unseen", "board_unseen", "spec_file")
ENGINE_CLASSES: tuple[str, ...] = ("cuda_cores", "tensor_cores", "amd_matrix", "other")
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "half", "fp8", "int8", "fp64")
REGIMES: tuple[str, ...] = ("launch", "memory", "compute", "misaligned")
# physical floor (ms) below which a GEMM is in the launch regime, and the size decades' edges
LAUNCH_FLOOR_MS = 0.005
SIZE_EDGES_MS: tuple[float, ...] = (0.01, 0.1, 1.0)
SIZES: tuple[str, ...] = ("<0.01ms", "0.01-0.1ms", "0.1-1ms", ">=1ms")
_PRECISION_OF_KEY = {"fp32": "fp32", "tf32": "tf32", "fp16": "half", "bf16": "half",
                     "fp8": "fp8", "int8": "int8", "fp64": "fp64"}


@dataclass(frozen=True)
class GemmCases:
    """Each GEMM's bucket fields as indices, (N,) long each: into ENGINE_CLASSES, PRECISIONS,
    REGIMES and SIZES."""

    engine: torch.Tensor
    precision: torch.Tensor
    regime: torch.Tensor
    size: torch.Tensor
    floor_ms: torch.Tensor  # (N,) float64: max(FLOPs / peak, bytes / bandwidth)

    def __len__(self) -> int:
        return int(self.engine.shape[0])

    @classmethod
    def concat(cls, parts: Sequence[GemmCases]) -> GemmCases:
        return cls(*(torch.cat([getattr(p, f) for p in parts])
                     for f in ("engine", "precision", "regime", "size", "floor_ms")))


def gemm_cases(gemms: GemmBatch, device: DeviceSpec) -> GemmCases:
    """The bucket fields of every GEMM on ``device``, from the GEMMs and the device alone (no
    predictor): engine and precision from the catalog, regime and size from the roofline."""
    table = DeviceTable.build([device])
    amd = library_family(device) == "cdna"
    raw = table.engine[0, gemms.dtype_index]  # (N,) indexes ENGINES
    if device.vendor.upper() not in ("NVIDIA", "AMD") or library_family(device) == "other":
        engine = torch.full_like(raw, ENGINE_CLASSES.index("other"))
    elif amd:
        engine = torch.where(raw == ENGINES.index("simt"), ENGINE_CLASSES.index("cuda_cores"),
                             ENGINE_CLASSES.index("amd_matrix"))
    else:
        engine = torch.where(raw == ENGINES.index("simt"), ENGINE_CLASSES.index("cuda_cores"),
                             ENGINE_CLASSES.index("tensor_cores"))
    prec_of_dtype = torch.tensor([PRECISIONS.index(_PRECISION_OF_KEY[DTYPES[n].peak_key])
                                  for n in DTYPE_NAMES])
    precision = prec_of_dtype[gemms.dtype_index]
    peak = peak_flops_per_s(gemms, device)  # (N,)
    compute_ms = gemms.flops / peak * 1e3
    memory_ms = gemms.compulsory_bytes / device.dram_bw_bytes_per_s * 1e3
    floor_ms = torch.maximum(compute_ms, memory_ms)
    narrow = torch.minimum(torch.minimum(gemms.a_align_bytes, gemms.b_align_bytes),
                           gemms.c_align_bytes)
    misaligned = ((engine == ENGINE_CLASSES.index("tensor_cores")) & (narrow < 16)
                  & (gemms.m > 1) & (gemms.n > 1))
    regime = torch.where(
        floor_ms < LAUNCH_FLOOR_MS, REGIMES.index("launch"),
        torch.where(misaligned, REGIMES.index("misaligned"),
                    torch.where(compute_ms >= memory_ms, REGIMES.index("compute"),
                                REGIMES.index("memory"))))
    edges = torch.tensor(SIZE_EDGES_MS, dtype=torch.float64)
    size = torch.bucketize(floor_ms, edges, right=True)
    return GemmCases(engine=engine.long(), precision=precision.long(), regime=regime.long(),
                     size=size.long(), floor_ms=floor_ms)


def size_class(time_ms: torch.Tensor) -> torch.Tensor:
    """Index into ``SIZES`` of each time (N,): its decade of ms, edges ``SIZE_EDGES_MS``.

    >>> size_class(torch.tensor([0.004, 0.01, 0.5, 3.0])).tolist()
    [0, 1, 2, 3]
    """
    t = (time_ms if time_ms.is_floating_point() else time_ms.to(torch.float64)).contiguous()
    edges = torch.tensor(SIZE_EDGES_MS, dtype=t.dtype)  # an edge in the times' own precision
    return torch.bucketize(t, edges, right=True)


def generation_of(device: DeviceSpec) -> str:
    """A device's vendor generation: its kernel-library family on NVIDIA (one compute-capability
    major each), the gfx target without its stepping on AMD, whose one ``cdna`` family spans
    CDNA2 (gfx90a) and CDNA3 (gfx942).

    >>> from torch_gemm_cost.hardware.catalog import get_device
    >>> generation_of(get_device("mi210")), generation_of(get_device("mi300x"))
    ('gfx90', 'gfx94')
    """
    if device.vendor.upper() == "AMD" and device.compute_capability.startswith("gfx"):
        return device.compute_capability[:5]
    return library_family(device)


def novelty_of(device: DeviceSpec, trained_gpus: Sequence[str] | None) -> str:
    """How new ``device`` is to a predictor fitted on ``trained_gpus`` (catalog ids), the first
    that holds: ``spec_file`` where the catalog does not hold the device as given (a spec built
    by hand or read from a file: only its datasheet is known); ``family_unseen`` where nothing
    is known of the fit; ``board_unseen`` where no board of its board class was in the fit (a
    GeForce or workstation board beside datacenter ones, even of a chip seen: its clocks and
    power limit are its own); ``chip_seen`` where a board of its chip was;
    ``family_unseen`` where no chip of its kernel-library family was;
    ``generation_unseen`` where one was, but none of its vendor generation
    (``generation_of``); else ``family_seen``."""
    try:
        listed = get_device(device.id) == device
    except ValueError:
        listed = False
    if not listed:
        return "spec_file"
    if not trained_gpus:
        return "family_unseen"
    trained = [get_device(g) for g in trained_gpus]
    chip = device.chip or device.id
    if all(t.board_class != device.board_class for t in trained):
        return "board_unseen"
    if any((t.chip or t.id) == chip for t in trained):
        return "chip_seen"
    family = library_family(device)
    if family == "other" or not any(library_family(t) == family for t in trained):
        return "family_unseen"
    if not any(generation_of(t) == generation_of(device) for t in trained):
        return "generation_unseen"
    return "family_seen"
