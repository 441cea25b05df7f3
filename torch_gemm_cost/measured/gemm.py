"""Measured GEMMs: the one reader of the ``data/gemm/*.csv[.gz]`` schema (see ``../shared/data``),
and the one path that prices such rows as they were measured.

Operand alignment follows from ``op``/``layout``: the widest vector load (≤ 16 bytes) that each
operand's leading dimension allows. What a row's time holds beyond the GEMM is decided here, as
the row is read, and nowhere else:

- ``timing``: the launch overhead a predictor adds (``PREDICTOR_TIMING``; a row without one
  takes the predictor's default);
- the fp8 kernel a row ran (``fp8_kernel_of``): vLLM's CUTLASS scaled-mm where the ``kernel``
  column names vLLM's CUTLASS fp8 Linear (aiconfigurator's fp8 rows), whose time also holds the
  kernel that casts its bf16 input to fp8 first (``GemmBatch.quantized_elements``); the vendor
  library behind ``torch._scaled_mm`` otherwise;
- DeepBench padded misaligned fp16 shapes to multiples of 8 before timing them, so their
  kernels saw 16-byte-aligned operands whatever dims the row records.

``gemm_times_ms`` prices rows read here; ``torch-gemm-cost predict-csv`` goes through it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import DeviceSpec, get_device
from ..hardware.dtypes import DTYPES, FP8_KERNELS, resolve_dtype
from ..records.types import DTYPE_NAMES, LAYOUT_LEADS, OP_LAYOUT, GemmBatch, alignment_bytes
from .table import (
    DEFAULT_DATA_DIR,
    DEFAULT_OWN_DIRS,
    OnDevices,
    RowError,
    Table,
    read_table,
)

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_OWN_DIRS",
    "PREDICTOR_TIMING",
    "REQUIRED",
    "TIMINGS",
    "MeasuredGemms",
    "gemm_batch_from_columns",
    "gemm_times_ms",
    "load_all_gemms",
    "load_gemms",
    "read_gemm_file",
    "read_gemms",
]

# the columns a row to price needs; a measured file needs ``latency_ms`` too
REQUIRED: tuple[str, ...] = ("gpu", "op", "dtype", "batch", "m", "n", "k")
# DATA.md's methods, plus calibrate's "wall" (perf_counter around the call); "" = unknown,
# priced with the predictor's default
TIMINGS: tuple[str, ...] = ("", "event", "kernel", "table", "wall")
# the launch overhead a predictor adds for rows timed by each timer: perf_counter around the call
# ("wall") includes the host's dispatch, as CUDA events around a torch op do ("event")
PREDICTOR_TIMING: dict[str, str] = {"wall": "event", "event": "event"}


@dataclass(frozen=True)
class MeasuredGemms(OnDevices):
    """Measured GEMMs with their device, source, timing method and latency, one entry per row.

    ``devices`` holds the specs of ``gpu`` ids the catalog lacks or describes otherwise (a
    calibrated device); every other id is looked up in the catalog (``device``).
    """

    gemms: GemmBatch
    gpu: tuple[str, ...]
    source: tuple[str, ...]
    timing: tuple[str, ...]  # as written: one of TIMINGS ("" where the file gives none)
    latency_ms: torch.Tensor  # (N,) float64; NaN where not read
    kernel: tuple[str, ...] = ()  # cuBLAS kernel name where the source recorded it, else ""
    devices: Mapping[str, DeviceSpec] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.gpu)

    @property
    def quantized_elements(self) -> torch.Tensor | None:
        """Elements of A that the measured time also casts before the GEMM (N,), or None for
        none (``gemms.quantized_elements``)."""
        cast = self.gemms.quantized_elements
        return cast if bool((cast > 0).any()) else None

    def device(self, gpu: str) -> DeviceSpec:
        """The spec of a ``gpu`` id of these rows."""
        return self.devices[gpu] if gpu in self.devices else get_device(gpu)

    def on_device(self, spec: DeviceSpec) -> MeasuredGemms:
        """These rows as measured on ``spec``, which the catalog need not hold (a calibrated
        device)."""
        return replace(self, gpu=(spec.id,) * len(self), devices={spec.id: spec})

    def select(self, index: torch.Tensor | Sequence[int]) -> MeasuredGemms:
        """The rows at ``index`` (a bool mask or integer positions), in that order."""
        idx = torch.as_tensor(index)
        if idx.dtype == torch.bool:
            idx = torch.nonzero(idx).flatten()
        idx = idx.long()
        pos = idx.tolist()
        pick = lambda t: tuple(t[i] for i in pos)
        return MeasuredGemms(
            gemms=self.gemms.select(idx),
            gpu=pick(self.gpu),
            source=pick(self.source),
            timing=pick(self.timing),
            latency_ms=self.latency_ms[idx],
            kernel=pick(self.kernel) if self.kernel else (),
            devices=self.devices,
        )

    @classmethod
    def concat(cls, parts: Sequence[MeasuredGemms]) -> MeasuredGemms:
        """The rows of ``parts``, in order (their ``devices`` merged)."""
        if not parts:
            raise ValueError("no measured rows to join")
        kernels = [p.kernel or ("",) * len(p) for p in parts]
        return cls(
            gemms=GemmBatch.concat(p.gemms for p in parts),
            gpu=sum((p.gpu for p in parts), ()),
            source=sum((p.source for p in parts), ()),
            timing=sum((p.timing for p in parts), ()),
            latency_ms=torch.cat([p.latency_ms for p in parts]),
            kernel=sum(kernels, ()),
            devices={k: v for p in parts for k, v in p.devices.items()},
        )

    def mask(self, **equal: str | Iterable[str]) -> torch.Tensor:
        """Bool mask of rows whose columns (gpu, source, timing) equal, or are in, the values."""
        keep = torch.ones(len(self), dtype=torch.bool)
        for col, want in equal.items():
            if col not in ("gpu", "source", "timing"):
                raise ValueError(f"cannot filter on {col!r}; use gpu, source or timing")
            wanted = {want} if isinstance(want, str) else set(want)
            keep &= torch.tensor([v in wanted for v in getattr(self, col)], dtype=torch.bool)
        return keep


_Bad = Callable[[int, str, str], RowError]  # (position, column, message) -> its error


def _int_dim(value: object, bad: Callable[[str], RowError]) -> int:
    try:
        if isinstance(value, str):
            text = value.strip()
            number = float(text) if any(c in text for c in ".eE") else int(text)
        else:
            number = value  # type: ignore[assignment]
        if float(number) != int(number):
            raise ValueError
        out = int(number)
    except (TypeError, ValueError, OverflowError):
        raise bad(f"expected a non-negative integer, got {value!r}") from None
    if out < 0:
        raise bad(f"expected a non-negative integer, got {value!r}")
    return out


def _bias_flag(value: object, bad: Callable[[str], RowError]) -> float:
    text = str(value).strip().lower()
    if text in ("", "0", "0.0", "false", "none"):
        return 0.0
    if text in ("1", "1.0", "true"):
        return 1.0
    raise bad(f"expected 0 or 1, got {value!r}")


def _bad_rows(row_names: Sequence[str] | None, rows: Sequence[int] | None) -> _Bad:
    """The error of a bad value at a position: labelled by ``row_names`` (else ``row i``),
    carrying the table row of ``rows`` (else -1)."""

    def bad(i: int, col: str, msg: str) -> RowError:
        label = row_names[i] if row_names is not None else f"row {i}"
        detail = f"column {col!r}: {msg}"
        return RowError(f"{label}, {detail}", rows[i] if rows is not None else -1, detail)

    return bad


def _dtype_column(dtype: Sequence[str], bad: _Bad) -> torch.Tensor:
    """(N,) index into ``DTYPE_NAMES`` of each row's dtype, each spelling resolved once."""
    resolved: dict[str, int] = {}
    rows: list[int] = []
    for i, d in enumerate(dtype):
        hit = resolved.get(d)
        if hit is None:
            try:
                hit = DTYPE_NAMES.index(resolve_dtype(d).name)
            except (ValueError, TypeError) as e:
                raise bad(i, "dtype", str(e)) from None
            resolved[d] = hit
        rows.append(hit)
    return torch.tensor(rows, dtype=torch.long)


def _lead_rows(op: Sequence[str], layout: Sequence[str] | None, bad: _Bad) -> torch.Tensor:
    """(3, N): per row, the dim (1 m, 2 n, 3 k) holding the leading dim of A, B and C, from the
    row's layout, or the one its op implies."""
    resolved: dict[tuple[str, str | None], tuple[int, int, int]] = {}
    rows: list[tuple[int, int, int]] = []
    for i, o in enumerate(op):
        lay = layout[i] if layout is not None else None
        sel = resolved.get((o, lay))
        if sel is None:
            given = "" if lay is None else str(lay).strip()
            if given and given not in LAYOUT_LEADS:
                raise bad(i, "layout", f"unknown layout {lay!r}; known: "
                          + ", ".join(LAYOUT_LEADS))
            if o not in OP_LAYOUT:
                raise bad(i, "op", f"unknown op {o!r}; known: {', '.join(OP_LAYOUT)}")
            a, b, c = LAYOUT_LEADS[given or OP_LAYOUT[o]]
            sel = resolved[(o, lay)] = (" mnk".index(a), " mnk".index(b), " mnk".index(c))
        rows.append(sel)
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), 3).T


def gemm_batch_from_columns(
    *,
    op: Sequence[str],
    layout: Sequence[str] | None = None,
    dtype: Sequence[str],
    batch: Sequence[object],
    m: Sequence[object],
    n: Sequence[object],
    k: Sequence[object],
    bias: Sequence[object] | None = None,
    row_names: Sequence[str] | None = None,
    rows: Sequence[int] | None = None,
) -> GemmBatch:
    """A ``GemmBatch`` from columns of the DATA.md schema (strings or numbers).

    ``layout`` defaults to the layout ``op`` implies (``linear`` -> ``x@W^T``). ``row_names``
    (e.g. ``"file.csv line 7"``) label errors; by default rows are named by position. Raises a
    ``RowError`` (a ValueError) naming the row and column of a bad value; its ``row`` is the
    entry of ``rows`` (a table's row index) at that position.
    """
    size = len(op)
    for name, col in (("dtype", dtype), ("batch", batch), ("m", m), ("n", n), ("k", k),
                      ("layout", layout), ("bias", bias)):
        if col is not None and len(col) != size:
            raise ValueError(f"column {name!r} has {len(col)} values, column 'op' has {size}")
    bad = _bad_rows(row_names, rows)

    def at(i: int, col: str) -> Callable[[str], RowError]:
        return lambda msg: bad(i, col, msg)

    dims = torch.stack([  # (4, N): batch, m, n, k
        torch.tensor([_int_dim(v, at(i, name)) for i, v in enumerate(col)], dtype=torch.float64)
        for name, col in (("batch", batch), ("m", m), ("n", n), ("k", k))
    ])
    dtype_index = _dtype_column(dtype, bad)
    lead = _lead_rows(op, layout, bad)  # (3, N)
    in_bytes = torch.tensor([float(DTYPES[d].in_bytes) for d in DTYPE_NAMES])[dtype_index]
    out_bytes = torch.tensor([float(DTYPES[d].out_bytes) for d in DTYPE_NAMES])[dtype_index]
    cols = torch.arange(size)
    lead_a, lead_b, lead_c = (dims[lead[j], cols] for j in range(3))
    bias_t = (
        torch.zeros(size, dtype=torch.float64)
        if bias is None
        else torch.tensor([_bias_flag(v, at(i, "bias")) for i, v in enumerate(bias)],
                          dtype=torch.float64)
    )
    return GemmBatch(
        batch=dims[0].clone(),
        m=dims[1].clone(),
        n=dims[2].clone(),
        k=dims[3].clone(),
        dtype_index=dtype_index,
        in_bytes=in_bytes.double(),
        out_bytes=out_bytes.double(),
        a_align_bytes=alignment_bytes(lead_a, in_bytes),
        b_align_bytes=alignment_bytes(lead_b, in_bytes),
        c_align_bytes=alignment_bytes(lead_c, out_bytes),
        bias=bias_t,
        b_transposed=(lead[1] == 3).double(),  # B stored (n, k)
    )


def _source_files(data_dir: Path) -> dict[str, Path]:
    gemm_dir = data_dir / "gemm"
    if not gemm_dir.is_dir():
        raise FileNotFoundError(f"no measured GEMMs at {gemm_dir} (expected data/gemm/*.csv.gz)")
    files: dict[str, Path] = {}
    for path in sorted(gemm_dir.iterdir()):
        for suffix in (".csv.gz", ".csv"):
            if path.name.endswith(suffix):
                files.setdefault(path.name[: -len(suffix)], path)
    return files


def fp8_kernel_of(kernel: str, source: str) -> int:
    """The index in FP8_KERNELS of the kernel an fp8 row of ``kernel`` (the data's column: a
    kernel name, a vLLM kernel class, or an FP8_KERNELS name) ran: vLLM's CUTLASS scaled-mm
    for vLLM's CUTLASS fp8 Linear (``CutlassFP8ScaledMMLinearKernel``), and for aiconfigurator's
    rows, which time vLLM's fp8 Linear whatever their column says; the vendor library behind
    ``torch._scaled_mm`` otherwise."""
    if kernel in FP8_KERNELS:
        return FP8_KERNELS.index(kernel)
    vllm = source == "aiconfigurator" or ("cutlass" in kernel.lower() and "fp8" in kernel.lower())
    return FP8_KERNELS.index("vllm_cutlass" if vllm else "torch_scaled_mm")


def read_gemms(table: Table, idx: Sequence[int] | None = None, *, source: str = "",
               device: DeviceSpec | None = None, timed: bool = True) -> MeasuredGemms:
    """The GEMM rows ``idx`` of ``table`` (every row by default), in that order, as measured
    (see the module docstring).

    Rows without a ``source`` take ``source``. With ``device``, every row is on it whatever its
    ``gpu`` says (a device resolved by the caller); else ``gpu`` is a catalog id. ``timed``:
    read ``latency_ms``; without it the latencies are NaN (rows to price, not to score).
    Raises a ``RowError`` naming the line and column of a bad value.
    """
    pick = list(range(len(table))) if idx is None else list(idx)
    names = [table.where(i) for i in pick]
    cols = {c: table.column(c, pick) for c in ("gpu", "source", "timing", "op", "layout",
                                                "dtype", "batch", "m", "n", "k", "bias",
                                                "latency_ms", "kernel")}
    bad = _bad_rows(names, pick)
    for i, gpu in enumerate(cols["gpu"]):
        if not gpu:
            raise bad(i, "gpu", "empty device id")
    for i, t in enumerate(cols["timing"]):
        if t not in TIMINGS:
            raise bad(i, "timing", f"unknown {t!r}; known: {', '.join(TIMINGS[1:])}")
    cols["source"] = [v or source for v in cols["source"]]
    gemms = gemm_batch_from_columns(
        op=cols["op"], layout=cols["layout"], dtype=cols["dtype"], batch=cols["batch"],
        m=cols["m"], n=cols["n"], k=cols["k"], bias=cols["bias"], row_names=names, rows=pick,
    )
    for dim in ("m", "n", "k"):
        empty = torch.nonzero(getattr(gemms, dim) < 1).flatten()
        if len(empty):
            j = int(empty[0])
            raise bad(j, dim, f"expected a positive integer, got {cols[dim][j]!r}")
    # DeepBench padded misaligned fp16 shapes to multiples of 8 before timing them (DATA.md):
    # the kernels that ran saw 16-byte-aligned operands whatever dims the row records
    padded = torch.tensor([s == "deepbench" and d.startswith("float16")
                           for s, d in zip(cols["source"], cols["dtype"])], dtype=torch.bool)
    if padded.any():
        sixteen = torch.full_like(gemms.a_align_bytes, 16.0)
        gemms = replace(gemms, **{f: torch.where(padded, sixteen, getattr(gemms, f))
                                  for f in ("a_align_bytes", "b_align_bytes", "c_align_bytes")})
    # the fp8 kernel a row ran, from its ``kernel`` column (``fp8_kernels``); vLLM's fp8 Linear
    # casts its 16-bit input to fp8 with a static per-tensor scale before its scaled GEMM, and
    # the row times both
    fp8 = [DTYPE_NAMES[d].startswith("float8") for d in gemms.dtype_index.tolist()]
    kernel_index = torch.tensor([fp8_kernel_of(kernel, source) if is_fp8 else 0
                                 for kernel, source, is_fp8 in zip(cols["kernel"],
                                                                   cols["source"], fp8)],
                                dtype=torch.long)
    cast = kernel_index == FP8_KERNELS.index("vllm_cutlass")
    if cast.any():
        a_elements = gemms.batch * gemms.m * gemms.k
        gemms = replace(gemms, fp8_kernel=kernel_index, quantized_elements=torch.where(
            cast, a_elements, gemms.quantized_elements))
    latency = (_latencies(cols["latency_ms"], bad) if timed
               else torch.full((len(pick),), math.nan, dtype=torch.float64))
    rows = MeasuredGemms(
        gemms=gemms,
        gpu=tuple(cols["gpu"]),
        source=tuple(cols["source"]),
        timing=tuple(cols["timing"]),
        latency_ms=latency,
        kernel=tuple(cols["kernel"]),
    )
    return rows if device is None else rows.on_device(device)


def read_gemm_file(path: Path | str, source: str = "",
                   required: Sequence[str] = (*REQUIRED, "latency_ms")) -> MeasuredGemms:
    """The rows of one CSV (or ``.csv.gz``) file of the data's GEMM schema, in file order.

    Rows without a ``source`` take ``source``; a row without a ``timing`` is priced with the
    predictor's default. Raises ValueError naming the file, line and column of a bad value or
    the ``required`` columns it lacks.
    """
    table = read_table(path)
    table.check_columns(required, "gemm")
    return read_gemms(table, source=source)


def _latencies(texts: Sequence[str], bad: _Bad) -> torch.Tensor:
    latency = torch.empty(len(texts), dtype=torch.float64)
    for i, text in enumerate(texts):
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (value > 0.0 and value < float("inf")):
            raise bad(i, "latency_ms", f"expected a positive finite number, got {text!r}")
        latency[i] = value
    return latency


def load_gemms(
    data_dir: Path | str = DEFAULT_DATA_DIR, sources: Iterable[str] | None = None
) -> MeasuredGemms:
    """Every measured GEMM under ``data_dir/gemm`` (or only ``sources``, by file stem).

    Rows keep file order, files are read in name order; a row without a source takes its
    file's stem. Raises ValueError naming the file, line and column of a bad value, and
    FileNotFoundError when the directory or a source is missing.
    """
    files = _source_files(Path(data_dir))
    if sources is not None:
        wanted = list(dict.fromkeys(sources))
        missing = [s for s in wanted if s not in files]
        if missing:
            raise FileNotFoundError(
                f"no data file for source(s) {', '.join(map(repr, missing))} in "
                f"{Path(data_dir) / 'gemm'}; available: {', '.join(files)}"
            )
        files = {s: files[s] for s in wanted}
    return MeasuredGemms.concat([read_gemm_file(path, stem) for stem, path in files.items()])


def load_all_gemms(
    data_dir: Path | str = DEFAULT_DATA_DIR, own_dirs: Iterable[Path | str] = DEFAULT_OWN_DIRS
) -> MeasuredGemms:
    """Every measured GEMM of ``data_dir`` and of each of ``own_dirs`` (folders in the same
    layout, such as a measuring run on one's own GPU writes), in that order."""
    return MeasuredGemms.concat([load_gemms(d) for d in (data_dir, *own_dirs)])


def _context(predictor: Any, timing: str, source: str) -> dict[str, str]:
    """The ``timing``/``source`` keywords the predictor's ``predict`` takes, where given."""
    params = inspect.signature(predictor.predict).parameters
    given = {"timing": timing, "source": source}
    return {k: v for k, v in given.items() if v and k in params}


def gemm_times_ms(rows: MeasuredGemms, predictor: Any) -> torch.Tensor:
    """Predicted ms (N,) float64 of every row as it was measured: on its own device, with the
    launch overhead of its ``timing`` (``PREDICTOR_TIMING``; none given: the predictor's
    default) and its ``source``, and what the reading decided the row's time holds (an fp8
    input cast, padded operands). Rows of ``batch`` 0 cost 0 ms.

    A predictor with ``predict_measured`` (the hybrid) prices every row in one batched call;
    any other is called once per (gpu, timing, source) with the keywords its ``predict``
    takes.
    """
    default = getattr(predictor, "default_timing", "")
    timing = tuple(PREDICTOR_TIMING.get(t, t) or default for t in rows.timing)
    rows = replace(rows, timing=timing)
    time_ms = torch.zeros(len(rows), dtype=torch.float64)
    live = rows.gemms.batch > 0  # (N,) zero-size batches cost nothing
    if not bool(live.any()):
        return time_ms
    if hasattr(predictor, "predict_measured"):
        sub = rows if bool(live.all()) else rows.select(live)
        time_ms[live] = predictor.predict_measured(sub).to(torch.float64)
        return time_ms
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i in torch.nonzero(live).flatten().tolist():
        groups.setdefault((rows.gpu[i], timing[i], rows.source[i]), []).append(i)
    for (gpu, t, source), idx in groups.items():
        context = _context(predictor, t, source)
        pick = torch.tensor(idx, dtype=torch.long)
        time_ms[pick] = predictor.predict(rows.gemms.select(pick), rows.device(gpu),
                                          **context).time_ms.to(torch.float64)
    return time_ms
