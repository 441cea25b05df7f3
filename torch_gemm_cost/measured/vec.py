"""Measured non-GEMM ops: the one reader of DATA.md's vec schema (``data/vec/*.csv.gz``), and the
one path that prices such rows as they were measured.

    gpu, gpu_name, source, op, dtype, rows, cols, latency_ms, kernel[, model, tp, region]

What a row's time holds is decided here, as the row is read: NeuSight's ops (``VEC_OPS``) are
CUDA-event timed kernels of their class, the event's floor included; vidur's ops (``FUSED_OPS``
and ``FUSED_ALIASES``: ``add3`` is two adds) are kernel-timed fused kernels re-run on warm
buffers. ``add`` and ``gelu`` were measured both ways: a row follows its ``source`` (vidur's are
fused), or, without one, its dtype (16-bit: vidur's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..hardware.catalog import DeviceSpec, get_device
from ..hardware.dtypes import resolve_dtype
from ..predict.ops import FUSED_ALIASES, FUSED_OPS, VEC_OPS, measured_op_times_ms
from ..suggest import unknown
from .table import OnDevices, RowError, Table, read_table

__all__ = ["REQUIRED", "MeasuredOps", "read_vec", "read_vec_file", "vec_times_ms"]

# the columns a row to price needs; a measured file needs ``latency_ms`` too
REQUIRED: tuple[str, ...] = ("gpu", "op", "dtype", "rows", "cols")
_FUSED_NAMES = frozenset(FUSED_OPS) | frozenset(FUSED_ALIASES)
_KNOWN = sorted(set(VEC_OPS) | _FUSED_NAMES)


@dataclass(frozen=True)
class MeasuredOps(OnDevices):
    """Measured non-GEMM ops, one entry per row, with how each was timed (``fused``).

    ``devices`` holds the specs of ``gpu`` ids the catalog lacks (a spec file's device); every
    other id is looked up in the catalog (``device``).
    """

    gpu: tuple[str, ...]
    source: tuple[str, ...]
    op: tuple[str, ...]  # as written: a ``VEC_OPS`` or ``FUSED_OPS`` name, or an alias
    dtype: tuple[str, ...]  # resolved name
    elem_bytes: tuple[int, ...]
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    fused: tuple[bool, ...]  # a fused kernel, kernel-timed (vidur), else an event-timed op
    latency_ms: torch.Tensor  # (N,) float64; NaN where not read
    devices: Mapping[str, DeviceSpec] = field(default_factory=dict)


def read_vec(table: Table, idx: Sequence[int] | None = None, *, device: DeviceSpec | None = None,
             timed: bool = True) -> MeasuredOps:
    """The vec rows ``idx`` of ``table`` (every row by default), in that order, as measured
    (see the module docstring).

    With ``device``, every row is on it whatever its ``gpu`` says; else ``gpu`` is a catalog
    id. ``timed``: read ``latency_ms`` (else NaN). Raises a ``RowError`` naming the line, the
    column and, for an unknown op, the nearest known one.
    """
    pick = list(range(len(table))) if idx is None else list(idx)
    cols = {c: table.column(c, pick) for c in (*REQUIRED, "source", "latency_ms")}
    gpus: dict[str, str] = {}
    dtypes: dict[str, tuple[str, int]] = {}
    out: dict[str, list] = {k: [] for k in ("gpu", "dtype", "elem", "rows", "cols", "fused",
                                            "latency")}
    for j, i in enumerate(pick):
        def bad(col: str, msg: str, i: int = i) -> RowError:
            detail = f"column {col!r}: {msg}"
            return RowError(f"{table.where(i)}: {detail}", i, detail)

        gpu = cols["gpu"][j]
        if device is not None:
            gpu = device.id
        elif gpu not in gpus:
            try:
                gpus[gpu] = get_device(gpu).id
            except ValueError as e:
                raise bad("gpu", str(e)) from None
        op = cols["op"][j]
        if op not in _KNOWN:
            raise bad("op", unknown("op", op, _KNOWN))
        text = cols["dtype"][j]
        if text not in dtypes:
            try:
                cd = resolve_dtype(text)
            except ValueError as e:
                raise bad("dtype", str(e)) from None
            dtypes[text] = (cd.name, cd.in_bytes)
        name, elem = dtypes[text]
        size = []
        for c in ("rows", "cols"):
            try:
                size.append(int(cols[c][j]))
            except ValueError:
                raise bad(c, f"expected an integer, got {cols[c][j]!r}") from None
            if size[-1] < 0:
                raise bad(c, f"expected an integer ≥ 0, got {size[-1]}")
        latency = math.nan
        if timed:
            try:
                latency = float(cols["latency_ms"][j])
            except ValueError:
                latency = math.nan
            if not (math.isfinite(latency) and latency > 0):
                raise bad("latency_ms", f"expected a positive time, got "
                                        f"{cols['latency_ms'][j]!r}")
        source = cols["source"][j]
        out["gpu"].append(gpus.get(gpu, gpu))
        out["dtype"].append(name)
        out["elem"].append(elem)
        out["rows"].append(size[0])
        out["cols"].append(size[1])
        out["fused"].append(op not in VEC_OPS or (op in _FUSED_NAMES and (
            source == "vidur" if source else elem == 2)))
        out["latency"].append(latency)
    return MeasuredOps(gpu=tuple(out["gpu"]), source=tuple(cols["source"]),
                       op=tuple(cols["op"]), dtype=tuple(out["dtype"]),
                       elem_bytes=tuple(out["elem"]), rows=tuple(out["rows"]),
                       cols=tuple(out["cols"]), fused=tuple(out["fused"]),
                       latency_ms=torch.tensor(out["latency"], dtype=torch.float64),
                       devices={} if device is None else {device.id: device})


def read_vec_file(path: Path | str) -> MeasuredOps:
    """Every row of one vec CSV (``.csv`` or ``.csv.gz``), in file order (``read_vec``)."""
    table = read_table(path)
    table.check_columns((*REQUIRED, "source", "latency_ms"), "vec")
    return read_vec(table)


def vec_times_ms(ops: MeasuredOps) -> torch.Tensor:
    """Predicted ms (N,) float64 of every row as it was measured, on its own device, by the
    shipped op costs (``predict.ops.measured_op_times_ms``)."""
    time_ms = torch.zeros(len(ops), dtype=torch.float64)
    by_gpu: dict[str, list[int]] = {}
    for i, gpu in enumerate(ops.gpu):
        by_gpu.setdefault(gpu, []).append(i)
    for gpu, idx in by_gpu.items():
        times = measured_op_times_ms([ops.op[i] for i in idx], [ops.elem_bytes[i] for i in idx],
                                     [ops.rows[i] for i in idx], [ops.cols[i] for i in idx],
                                     [ops.fused[i] for i in idx], ops.device(gpu))
        time_ms[torch.tensor(idx, dtype=torch.long)] = torch.tensor(times, dtype=torch.float64)
    return time_ms
