"""Measured collectives: the one reader of DATA.md's comm schema (``data/comm/*.csv.gz``), and the
one path that prices such rows as they were measured.

    gpu, gpu_name, source, collective, num_gpus, gpus_per_node, topology, size_elements,
    size_bytes, dtype, latency_ms

What a row's time holds is decided here, as the row is read:

- the timer: vidur's rows are the NCCL kernel's duration in a profiler trace (``kernel``); every
  other source's are nccl-tests' out-of-place time (``nccl_tests``);
- the bytes: Vidur's buffer is ``size_elements / 2`` fp16 elements, ``size_elements`` bytes: its
  profiler records ``"size": elements * 2  # bytes``
  (vidur/profiling/collectives/collectives_wrapper.py), its sizes start at 1024 elements
  (``get_collectives_sizes_to_profile``), and the smallest recorded size is 2048. The bundle's
  ``size_bytes`` doubles that once more: with it, an A100 pair would send at 600 GB/s over
  NVLink 3, which carries 300 GB/s each way. A vidur row's true bytes are its
  ``size_elements`` (``VIDUR_BYTES_COLUMN``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import DeviceSpec, get_device
from ..predict.collectives import (
    CollectiveCall,
    CollectivePredictor,
    check_call,
    shipped_collective_weights_path,
)
from .table import RowError, Table, read_table

__all__ = [
    "ELEMENT_BYTES",
    "FILES",
    "REQUIRED",
    "TIMING_OF_SOURCE",
    "VIDUR_BYTES_COLUMN",
    "CommRow",
    "comm_call",
    "comm_times_ms",
    "load_comm",
    "read_comm",
    "read_comm_file",
    "to_calls",
]

FILES = ("vidur.csv.gz", "aiconfigurator.csv.gz")
# the columns a row to price needs; a measured file needs ``latency_ms`` too
REQUIRED: tuple[str, ...] = ("gpu", "collective", "num_gpus", "size_bytes", "dtype")
TIMING_OF_SOURCE = {"vidur": "kernel", "aiconfigurator": "nccl_tests"}
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "int8": 1}
VIDUR_BYTES_COLUMN = "size_elements"  # see the module docstring


@dataclass(frozen=True)
class CommRow:
    """One measured collective, with its true bytes. ``gpus_per_node`` 0 and ``topology`` ""
    take the device's usual node (``predict.collectives.check_call``)."""

    gpu: str
    source: str
    collective: str
    num_gpus: int
    gpus_per_node: int
    topology: str
    size_bytes: float  # nccl-tests convention, true bytes
    dtype: str
    latency_ms: float  # NaN where not read

    @property
    def group(self) -> tuple[str, str, str, str, int, int]:
        return (self.gpu, self.source, self.collective, self.topology, self.num_gpus,
                self.gpus_per_node)

    @property
    def timing(self) -> str:
        """How the time was taken (``TIMING_OF_SOURCE``; nccl-tests for any other source)."""
        return TIMING_OF_SOURCE.get(self.source, "nccl_tests")


def read_comm(table: Table, idx: Sequence[int] | None = None, *,
              device: DeviceSpec | None = None, timed: bool = True) -> list[CommRow]:
    """The comm rows ``idx`` of ``table`` (every row by default), in that order, as measured
    (see the module docstring). With ``device``, every row is on it whatever its ``gpu``
    says. ``timed``: read ``latency_ms`` (else NaN). Raises a
    ``RowError`` naming the line and the column of a bad value; whether the model can price a
    row is ``comm_call``'s to say."""
    pick = list(range(len(table))) if idx is None else list(idx)
    names = ("gpu", "source", "collective", "num_gpus", "gpus_per_node", "topology",
             VIDUR_BYTES_COLUMN, "size_bytes", "dtype", "latency_ms")
    cols = {c: table.column(c, pick) for c in names}
    rows: list[CommRow] = []
    for j, i in enumerate(pick):
        def bad(col: str, msg: str, i: int = i) -> RowError:
            detail = f"column {col!r}: {msg}"
            return RowError(f"{table.where(i)}: {detail}", i, detail)

        def number(col: str, lowest: float, whole: bool, j: int = j) -> float:
            text = cols[col][j]
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value >= lowest) or (whole and value % 1):
                kind = "an integer" if whole else "a number"
                raise bad(col, f"expected {kind} ≥ {lowest:g}, got {text!r}")
            return value

        source = cols["source"][j]
        dtype = cols["dtype"][j]
        if dtype not in ELEMENT_BYTES:
            raise bad("dtype", f"unknown {dtype!r}; known: {', '.join(ELEMENT_BYTES)}")
        size_col = VIDUR_BYTES_COLUMN if source == "vidur" else "size_bytes"
        rows.append(CommRow(
            gpu=cols["gpu"][j] if device is None else device.id, source=source, collective=cols["collective"][j],
            num_gpus=int(number("num_gpus", 1, True)),
            gpus_per_node=int(number("gpus_per_node", 1, True)) if cols["gpus_per_node"][j]
            else 0,
            topology=cols["topology"][j], size_bytes=number(size_col, 0, False), dtype=dtype,
            latency_ms=number("latency_ms", 0, False) if timed else math.nan))
    return rows


def read_comm_file(path: Path | str) -> list[CommRow]:
    """Every row of one comm CSV (``.csv`` or ``.csv.gz``), in file order (``read_comm``)."""
    table = read_table(path)
    table.check_columns((*REQUIRED, "source", "latency_ms"), "comm")
    return read_comm(table)


def load_comm(data_dir: str | Path) -> list[CommRow]:
    """Every row of ``comm/*.csv.gz`` (``FILES``), Vidur's sizes corrected (module docstring)."""
    rows: list[CommRow] = []
    for name in FILES:
        path = Path(data_dir) / "comm" / name
        if not path.is_file():
            raise FileNotFoundError(f"measured collectives not found at {path} "
                                    "(expected ../shared/data/comm)")
        rows += read_comm_file(path)
    return rows


def comm_call(row: CommRow, device: DeviceSpec | None = None) -> CollectiveCall:
    """The call a row measured on ``device`` (None: the catalog's record of the row's gpu),
    checked (``check_call``: a ValueError naming the bad value and the nearest good one where
    the model cannot price it)."""
    spec = device if device is not None else get_device(row.gpu)
    return check_call(spec, row.collective, size_bytes=row.size_bytes,
                      num_gpus=row.num_gpus, gpus_per_node=row.gpus_per_node or None,
                      topology=row.topology or None, element_bytes=ELEMENT_BYTES[row.dtype],
                      timing=row.timing)


def to_calls(rows: Sequence[CommRow]
             ) -> tuple[list[CollectiveCall], list[DeviceSpec], list[int], list[str]]:
    """Calls for the rows the model can price, each call's device (the catalog's record of the
    row's gpu), their row indices, and why the others cannot (one reason per group of rows)."""
    calls: list[CollectiveCall] = []
    devices: list[DeviceSpec] = []
    kept: list[int] = []
    skipped: dict[tuple[Any, ...], str] = {}
    for i, r in enumerate(rows):
        try:
            spec = get_device(r.gpu)
            calls.append(comm_call(r, spec))
        except ValueError as e:
            skipped.setdefault(r.group, str(e))
            continue
        devices.append(spec)
        kept.append(i)
    reasons = [f"{'/'.join(map(str, g))}: {why}" for g, why in skipped.items()]
    return calls, devices, kept, reasons


def comm_times_ms(calls: Sequence[CollectiveCall], devices: Sequence[DeviceSpec],
                  predictor: CollectivePredictor | None = None) -> torch.Tensor:
    """Predicted ms (N,) float64 of measured calls on their devices (``to_calls``), by
    ``predictor`` or the shipped collective model."""
    if predictor is None:
        with resources.as_file(shipped_collective_weights_path()) as real:
            predictor = CollectivePredictor.load(real)
    return predictor.predict(list(calls), list(devices)).time_ms.to(torch.float64)