"""Measured GEMMs: rows of the ``data/gemm/*.csv[.gz]`` schema (see ``../shared/data``) as a batch.

Reads with the ``csv`` module only, so loading needs neither pandas nor numpy. Operand alignment
follows from ``op``/``layout``: the widest vector load (≤ 16 bytes) that each operand's leading
dimension allows.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..devices import DeviceSpec, get_device
from ..dtypes import DTYPES, resolve_dtype
from .records import DTYPE_NAMES, LAYOUT_LEADS, OP_LAYOUT, GemmBatch, alignment_bytes

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_OWN_DIRS",
    "MeasuredGemms",
    "gemm_batch_from_columns",
    "impossible_rows",
    "load_all_gemms",
    "load_gemms",
    "read_gemm_file",
]

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
# what this project measured itself, in the same layout (benchmarks/data/README.md): one H200
DEFAULT_OWN_DIRS: tuple[Path, ...] = (
    Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "h200",
)

_REQUIRED = ("gpu", "op", "dtype", "batch", "m", "n", "k", "latency_ms")


@dataclass(frozen=True)
class MeasuredGemms:
    """Measured GEMMs with their device, source, timing method and latency, one entry per row.

    ``devices`` holds the specs of ``gpu`` ids the catalog lacks or describes otherwise (a
    calibrated device); every other id is looked up in the catalog (``device``).
    """

    gemms: GemmBatch
    gpu: tuple[str, ...]
    source: tuple[str, ...]
    timing: tuple[str, ...]  # event, kernel or table (see DATA.md)
    latency_ms: torch.Tensor  # (N,) float64
    kernel: tuple[str, ...] = ()  # cuBLAS kernel name where the source recorded it, else ""
    devices: Mapping[str, DeviceSpec] = field(default_factory=dict)
    # elements of A that the measured time also quantizes before the GEMM (N,), or None for
    # none: vLLM's fp8 Linear casts its bf16 input to fp8 first, one kernel that reads 2 and
    # writes 1 byte an element (aiconfigurator's fp8 rows, a static activation scale)
    quantized_elements: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.gpu)

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
            quantized_elements=(None if self.quantized_elements is None
                                else self.quantized_elements[idx]),
        )

    @classmethod
    def concat(cls, parts: Sequence[MeasuredGemms]) -> MeasuredGemms:
        """The rows of ``parts``, in order (their ``devices`` merged)."""
        if not parts:
            raise ValueError("no measured rows to join")
        kernels = [p.kernel or ("",) * len(p) for p in parts]
        quantized = None
        if any(p.quantized_elements is not None for p in parts):
            quantized = torch.cat([torch.zeros(len(p), dtype=torch.float64)
                                   if p.quantized_elements is None else p.quantized_elements
                                   for p in parts])
        return cls(
            gemms=GemmBatch.concat(p.gemms for p in parts),
            gpu=sum((p.gpu for p in parts), ()),
            source=sum((p.source for p in parts), ()),
            timing=sum((p.timing for p in parts), ()),
            latency_ms=torch.cat([p.latency_ms for p in parts]),
            kernel=sum(kernels, ()),
            devices={k: v for p in parts for k, v in p.devices.items()},
            quantized_elements=quantized,
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


def _int_dim(value: object, where: Callable[[], str]) -> int:
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
        raise ValueError(f"{where()}: expected a non-negative integer, got {value!r}") from None
    if out < 0:
        raise ValueError(f"{where()}: expected a non-negative integer, got {value!r}")
    return out


def _bias_flag(value: object, where: Callable[[], str]) -> float:
    text = str(value).strip().lower()
    if text in ("", "0", "0.0", "false", "none"):
        return 0.0
    if text in ("1", "1.0", "true"):
        return 1.0
    raise ValueError(f"{where()}: expected 0 or 1, got {value!r}")


_Where = Callable[[int, str], Callable[[], str]]


def _where_row(row_names: Sequence[str] | None) -> _Where:
    def make(i: int, col: str) -> Callable[[], str]:
        label = row_names[i] if row_names is not None else f"row {i}"
        return lambda: f"{label}, column {col!r}"

    return make


def _dtype_column(dtype: Sequence[str], where: _Where) -> torch.Tensor:
    """(N,) index into ``DTYPE_NAMES`` of each row's dtype, each spelling resolved once."""
    resolved: dict[str, int] = {}
    rows: list[int] = []
    for i, d in enumerate(dtype):
        hit = resolved.get(d)
        if hit is None:
            try:
                hit = DTYPE_NAMES.index(resolve_dtype(d).name)
            except (ValueError, TypeError) as e:
                raise ValueError(f"{where(i, 'dtype')()}: {e}") from None
            resolved[d] = hit
        rows.append(hit)
    return torch.tensor(rows, dtype=torch.long)


def _lead_rows(op: Sequence[str], layout: Sequence[str] | None, where: _Where) -> torch.Tensor:
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
                raise ValueError(f"{where(i, 'layout')()}: unknown layout {lay!r}; known: "
                                 + ", ".join(LAYOUT_LEADS))
            if o not in OP_LAYOUT:
                raise ValueError(
                    f"{where(i, 'op')()}: unknown op {o!r}; known: {', '.join(OP_LAYOUT)}")
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
) -> GemmBatch:
    """A ``GemmBatch`` from columns of the DATA.md schema (strings or numbers).

    ``layout`` defaults to the layout ``op`` implies (``linear`` -> ``x@W^T``). ``row_names``
    (e.g. ``"file.csv line 7"``) label errors; by default rows are named by position.
    Raises ValueError naming the row and column of the first bad value.
    """
    size = len(op)
    for name, col in (("dtype", dtype), ("batch", batch), ("m", m), ("n", n), ("k", k),
                      ("layout", layout), ("bias", bias)):
        if col is not None and len(col) != size:
            raise ValueError(f"column {name!r} has {len(col)} values, column 'op' has {size}")
    where = _where_row(row_names)
    dims = torch.stack([  # (4, N): batch, m, n, k
        torch.tensor([_int_dim(v, where(i, name)) for i, v in enumerate(col)], dtype=torch.float64)
        for name, col in (("batch", batch), ("m", m), ("n", n), ("k", k))
    ])
    dtype_index = _dtype_column(dtype, where)
    lead = _lead_rows(op, layout, where)  # (3, N)
    in_bytes = torch.tensor([float(DTYPES[d].in_bytes) for d in DTYPE_NAMES])[dtype_index]
    out_bytes = torch.tensor([float(DTYPES[d].out_bytes) for d in DTYPE_NAMES])[dtype_index]
    cols = torch.arange(size)
    lead_a, lead_b, lead_c = (dims[lead[j], cols] for j in range(3))
    bias_t = (
        torch.zeros(size, dtype=torch.float64)
        if bias is None
        else torch.tensor([_bias_flag(v, where(i, "bias")) for i, v in enumerate(bias)],
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


def _open_text(path: Path) -> io.TextIOBase:
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


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


_COLUMNS = ("gpu", "source", "timing", "op", "layout", "dtype", "batch", "m", "n", "k", "bias",
            "latency_ms", "kernel")


def read_gemm_file(path: Path | str, source: str = "",
                   required: Sequence[str] = _REQUIRED) -> MeasuredGemms:
    """The rows of one CSV (or ``.csv.gz``) file of the data's GEMM schema, in file order.

    Rows without a ``source`` take ``source``; without a ``timing``, ``event``. Raises
    ValueError naming the file, line and column of a bad value or the ``required`` columns it
    lacks.
    """
    path = Path(path)
    cols: dict[str, list[str]] = {c: [] for c in _COLUMNS}
    names: list[str] = []
    with _open_text(path) as fh:
        reader = csv.DictReader(fh)
        absent = [c for c in required if c not in (reader.fieldnames or [])]
        if absent:
            raise ValueError(f"{path}: missing column(s) {', '.join(absent)}")
        for line, row in enumerate(reader, start=2):
            for c, values in cols.items():
                values.append(row.get(c) or "")
            names.append(f"{path.name} line {line}")
    cols["source"] = [v or source for v in cols["source"]]
    gemms = gemm_batch_from_columns(
        op=cols["op"], layout=cols["layout"], dtype=cols["dtype"], batch=cols["batch"],
        m=cols["m"], n=cols["n"], k=cols["k"], bias=cols["bias"], row_names=names,
    )
    # DeepBench padded misaligned fp16 shapes to multiples of 8 before timing them (DATA.md):
    # the kernels that ran saw 16-byte-aligned operands whatever dims the row records
    padded = torch.tensor([s == "deepbench" and d.startswith("float16")
                           for s, d in zip(cols["source"], cols["dtype"])], dtype=torch.bool)
    if padded.any():
        sixteen = torch.full_like(gemms.a_align_bytes, 16.0)
        gemms = replace(gemms, **{f: torch.where(padded, sixteen, getattr(gemms, f))
                                  for f in ("a_align_bytes", "b_align_bytes", "c_align_bytes")})
    for i, gpu in enumerate(cols["gpu"]):
        if not gpu:
            raise ValueError(f"{names[i]}, column 'gpu': empty device id")
    # vLLM's fp8 Linear (aiconfigurator) runs a static-scale quantization of its bf16 input
    # before the scaled GEMM, and the row times both
    quantized = torch.tensor([s == "aiconfigurator" and d.startswith("float8")
                              for s, d in zip(cols["source"], cols["dtype"])], dtype=torch.bool)
    a_elements = gemms.batch * gemms.m * gemms.k
    return MeasuredGemms(
        gemms=gemms,
        gpu=tuple(cols["gpu"]),
        source=tuple(cols["source"]),
        timing=tuple(t or "event" for t in cols["timing"]),
        latency_ms=_latencies(cols["latency_ms"], names),
        kernel=tuple(cols["kernel"]),
        quantized_elements=(torch.where(quantized, a_elements, torch.zeros_like(a_elements))
                            if quantized.any() else None),
    )


def _latencies(texts: Sequence[str], names: Sequence[str]) -> torch.Tensor:
    latency = torch.empty(len(texts), dtype=torch.float64)
    for i, text in enumerate(texts):
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (value > 0.0 and value < float("inf")):
            raise ValueError(
                f"{names[i]}, column 'latency_ms': expected a positive finite number, got {text!r}"
            )
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
    layout, such as the ones ``benchmarks/measure_gpu.py`` writes), in that order."""
    return MeasuredGemms.concat([load_gemms(d) for d in (data_dir, *own_dirs)])


def impossible_rows(measured: MeasuredGemms) -> torch.Tensor:
    """Rows faster than physics allows: below FLOPs / dense peak or compulsory bytes / DRAM
    bandwidth of their device. These are data errors; training leaves them out. (N,) bool.

    Rows on devices or dtypes the catalog lacks are flagged too, since nothing can check them.
    """
    g = measured.gemms
    floor_s = torch.full((len(measured),), float("nan"), dtype=torch.float64)
    gpus = sorted(set(measured.gpu))
    gpu_index = {name: i for i, name in enumerate(gpus)}
    rows_gpu = torch.tensor([gpu_index[x] for x in measured.gpu], dtype=torch.long)
    for name, i in gpu_index.items():
        try:
            device = measured.device(name)
        except ValueError:
            continue
        sel = rows_gpu == i
        peaks = []
        for dt in DTYPE_NAMES:
            try:
                peaks.append(device.peak_flops_per_s(dt))
            except ValueError:
                peaks.append(float("nan"))
        peak = torch.tensor(peaks, dtype=torch.float64)[g.dtype_index[sel]]
        compute_s = g.flops[sel] / peak
        memory_s = g.compulsory_bytes[sel] / device.dram_bw_bytes_per_s
        floor_s[sel] = torch.maximum(compute_s, memory_s)
    return ~(measured.latency_ms * 1e-3 >= floor_s)  # NaN floor -> flagged
