"""Measured GEMMs: rows of the ``data/gemm/*.csv[.gz]`` schema (see ``../shared/data``) as a batch.

Reads with the ``csv`` module only, so loading needs neither pandas nor numpy. Operand alignment
follows from ``op``/``layout``: the widest vector load (≤ 16 bytes) that each operand's leading
dimension allows.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .dtypes import DTYPES, resolve_dtype
from .predict.base import DTYPE_NAMES, GemmBatch

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_OWN_DIRS",
    "LAYOUTS",
    "MeasuredGemms",
    "gemm_batch_from_columns",
    "load_all_gemms",
    "load_gemms",
]

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
# what this project measured itself, in the same layout (benchmarks/data/README.md): one H200
DEFAULT_OWN_DIRS: tuple[Path, ...] = (
    Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "h200",
)

# op -> the layout it implies when the ``layout`` column is absent
_OP_LAYOUT: dict[str, str] = {
    "matmul": "A@B",
    "mm": "A@B",
    "bmm": "A@B",
    "linear": "x@W^T",
    "addmm": "x@W^T",
    "gemm_NN": "colmajor_NN",
    "gemm_NT": "colmajor_NT",
    "gemm_TN": "colmajor_TN",
}

# layout -> which dim is the leading (contiguous-stride) dim of A, B and C
LAYOUTS: dict[str, tuple[str, str, str]] = {
    "A@B": ("k", "n", "n"),  # A (m, k) row-major, B (k, n) row-major, C (m, n)
    "x@W^T": ("k", "k", "n"),  # W stored (n, k): its rows have k elements
    "colmajor_NN": ("m", "k", "m"),  # BLAS column-major: lda = m, ldb = k, ldc = m
    "colmajor_NT": ("m", "n", "m"),  # B^T stored n x k column-major: ldb = n
    "colmajor_TN": ("k", "k", "m"),  # A^T stored k x m column-major: lda = k
}

_REQUIRED = ("gpu", "op", "dtype", "batch", "m", "n", "k", "latency_ms")


@dataclass(frozen=True)
class MeasuredGemms:
    """Measured GEMMs with their device, source, timing method and latency, one entry per row."""

    gemms: GemmBatch
    gpu: tuple[str, ...]
    source: tuple[str, ...]
    timing: tuple[str, ...]  # event, kernel or table (see DATA.md)
    latency_ms: torch.Tensor  # (N,) float64
    kernel: tuple[str, ...] = ()  # cuBLAS kernel name where the source recorded it, else ""
    # bytes of a memory-bound kernel the measured time includes before the GEMM (N,), or None
    # for none: vLLM's fp8 Linear quantizes its bf16 input first (reads 2, writes 1 byte per
    # element of A; aiconfigurator's fp8 rows, a static activation scale)
    prologue_bytes: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.gpu)

    def select(self, index: torch.Tensor | Sequence[int]) -> MeasuredGemms:
        """The rows at ``index`` (a bool mask or integer positions), in that order."""
        idx = torch.as_tensor(index)
        if idx.dtype == torch.bool:
            idx = torch.nonzero(idx).flatten()
        idx = idx.long()
        pos = idx.tolist()
        g = self.gemms
        sub = GemmBatch(**{f: getattr(g, f)[idx] for f in g.__dataclass_fields__})
        pick = lambda t: tuple(t[i] for i in pos)
        return MeasuredGemms(
            gemms=sub,
            gpu=pick(self.gpu),
            source=pick(self.source),
            timing=pick(self.timing),
            latency_ms=self.latency_ms[idx],
            kernel=pick(self.kernel) if self.kernel else (),
            prologue_bytes=None if self.prologue_bytes is None else self.prologue_bytes[idx],
        )

    @staticmethod
    def concat(parts: Sequence[MeasuredGemms]) -> MeasuredGemms:
        """The rows of every part, in order."""
        if not parts:
            raise ValueError("nothing to concatenate: no measured rows")
        gemms = GemmBatch(**{f: torch.cat([getattr(p.gemms, f) for p in parts])
                             for f in parts[0].gemms.__dataclass_fields__})

        def join(col: str) -> tuple[str, ...]:
            return tuple(v for p in parts
                         for v in (getattr(p, col) or ("",) * len(p)))

        prologue = None
        if any(p.prologue_bytes is not None for p in parts):
            prologue = torch.cat([torch.zeros(len(p), dtype=torch.float64)
                                  if p.prologue_bytes is None else p.prologue_bytes
                                  for p in parts])
        return MeasuredGemms(gemms=gemms, gpu=join("gpu"), source=join("source"),
                             timing=join("timing"),
                             latency_ms=torch.cat([p.latency_ms for p in parts]),
                             kernel=join("kernel"), prologue_bytes=prologue)

    def mask(self, **equal: str | Iterable[str]) -> torch.Tensor:
        """Bool mask of rows whose columns (gpu, source, timing) equal, or are in, the values."""
        keep = torch.ones(len(self), dtype=torch.bool)
        for col, want in equal.items():
            if col not in ("gpu", "source", "timing"):
                raise ValueError(f"cannot filter on {col!r}; use gpu, source or timing")
            wanted = {want} if isinstance(want, str) else set(want)
            keep &= torch.tensor([v in wanted for v in getattr(self, col)], dtype=torch.bool)
        return keep


def _alignment(leading: torch.Tensor, elem_bytes: torch.Tensor, cap: int = 16) -> torch.Tensor:
    """Largest power of two ≤ ``cap`` dividing leading·elem_bytes; ``cap`` for empty dims."""
    row = (leading.long() * elem_bytes.long()).clamp(min=0)
    low_bit = row & (-row)  # lowest set bit; 0 where row == 0
    return torch.where(row > 0, low_bit.clamp(max=cap), torch.full_like(row, cap)).double()


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


def _where_row(row_names: Sequence[str] | None) -> Callable[[int, str], Callable[[], str]]:
    def make(i: int, col: str) -> Callable[[], str]:
        label = row_names[i] if row_names is not None else f"row {i}"
        return lambda: f"{label}, column {col!r}"

    return make


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
    for name, col in (("dtype", dtype), ("batch", batch), ("m", m), ("n", n), ("k", k)):
        if len(col) != size:
            raise ValueError(f"column {name!r} has {len(col)} values, column 'op' has {size}")
    if layout is not None and len(layout) != size:
        raise ValueError(f"column 'layout' has {len(layout)} values, column 'op' has {size}")
    if bias is not None and len(bias) != size:
        raise ValueError(f"column 'bias' has {len(bias)} values, column 'op' has {size}")
    where = _where_row(row_names)

    dims = torch.empty((4, size), dtype=torch.float64)
    for j, (name, col) in enumerate((("batch", batch), ("m", m), ("n", n), ("k", k))):
        dims[j] = torch.tensor(
            [_int_dim(v, where(i, name)) for i, v in enumerate(col)], dtype=torch.float64
        )

    dtype_cache: dict[str, int] = {}
    dtype_rows: list[int] = []
    for i, d in enumerate(dtype):
        hit = dtype_cache.get(d)
        if hit is None:
            try:
                hit = DTYPE_NAMES.index(resolve_dtype(d).name)
            except (ValueError, TypeError) as e:
                raise ValueError(f"{where(i, 'dtype')()}: {e}") from None
            dtype_cache[d] = hit
        dtype_rows.append(hit)
    dtype_index = torch.tensor(dtype_rows, dtype=torch.long)

    # per row, the row of `dims` (1 m, 2 n, 3 k) holding the leading dim of A, B and C
    lead_rows: list[tuple[int, int, int]] = []
    dim_pos = {"m": 1, "n": 2, "k": 3}
    layout_cache: dict[tuple[str, str | None], tuple[int, int, int]] = {}
    for i, o in enumerate(op):
        lay = layout[i] if layout is not None else None
        key = (o, lay)
        sel = layout_cache.get(key)
        if sel is None:
            if lay is None or str(lay).strip() == "":
                if o not in _OP_LAYOUT:
                    raise ValueError(
                        f"{where(i, 'op')()}: unknown op {o!r}; known: {', '.join(_OP_LAYOUT)}"
                    )
                lay_name = _OP_LAYOUT[o]
            else:
                lay_name = str(lay).strip()
                if lay_name not in LAYOUTS:
                    raise ValueError(
                        f"{where(i, 'layout')()}: unknown layout {lay!r}; known: "
                        + ", ".join(LAYOUTS)
                    )
                if o not in _OP_LAYOUT:
                    raise ValueError(
                        f"{where(i, 'op')()}: unknown op {o!r}; known: {', '.join(_OP_LAYOUT)}"
                    )
            a_dim, b_dim, c_dim = LAYOUTS[lay_name]
            sel = (dim_pos[a_dim], dim_pos[b_dim], dim_pos[c_dim])
            layout_cache[key] = sel
        lead_rows.append(sel)
    lead = torch.tensor(lead_rows, dtype=torch.long).reshape(size, 3).T  # (3, N)

    in_table = torch.tensor([float(DTYPES[name].in_bytes) for name in DTYPE_NAMES])
    out_table = torch.tensor([float(DTYPES[name].out_bytes) for name in DTYPE_NAMES])
    in_bytes = in_table.double()[dtype_index]
    out_bytes = out_table.double()[dtype_index]
    cols = torch.arange(size)
    lead_a = dims[lead[0], cols]
    lead_b = dims[lead[1], cols]
    lead_c = dims[lead[2], cols]
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
        in_bytes=in_bytes,
        out_bytes=out_bytes,
        a_align_bytes=_alignment(lead_a, in_bytes),
        b_align_bytes=_alignment(lead_b, in_bytes),
        c_align_bytes=_alignment(lead_c, out_bytes),
        bias=bias_t,
        b_transposed=(lead[1] == dim_pos["k"]).double(),  # B stored (n, k)
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


def load_gemms(
    data_dir: Path | str = DEFAULT_DATA_DIR, sources: Iterable[str] | None = None
) -> MeasuredGemms:
    """Every measured GEMM under ``data_dir/gemm`` (or only ``sources``, by file stem).

    Rows keep file order, files are read in name order. Raises ValueError naming the file, line
    and column of a bad value, and FileNotFoundError when the directory or a source is missing.
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

    cols: dict[str, list[str]] = {
        c: [] for c in ("gpu", "source", "timing", "op", "layout", "dtype", "batch", "m", "n",
                        "k", "bias", "latency_ms", "kernel")
    }
    names: list[str] = []
    for stem, path in files.items():
        with _open_text(path) as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            absent = [c for c in _REQUIRED if c not in header]
            if absent:
                raise ValueError(f"{path}: missing column(s) {', '.join(absent)}")
            for line, row in enumerate(reader, start=2):
                for c, values in cols.items():
                    values.append(row.get(c) or "")
                if not cols["source"][-1]:
                    cols["source"][-1] = stem
                names.append(f"{path.name} line {line}")

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
    latency = torch.empty(len(names), dtype=torch.float64)
    for i, text in enumerate(cols["latency_ms"]):
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (value > 0.0 and value < float("inf")):
            raise ValueError(
                f"{names[i]}, column 'latency_ms': expected a positive finite number, got {text!r}"
            )
        latency[i] = value
    for i, gpu in enumerate(cols["gpu"]):
        if not gpu:
            raise ValueError(f"{names[i]}, column 'gpu': empty device id")
    # vLLM's fp8 Linear (aiconfigurator) runs a static-scale quantization of its bf16 input
    # before the scaled GEMM, and the row times both
    quantized = torch.tensor([s == "aiconfigurator" and d.startswith("float8")
                              for s, d in zip(cols["source"], cols["dtype"])], dtype=torch.bool)
    prologue = None
    if quantized.any():
        a_elems = gemms.batch * gemms.m * gemms.k
        prologue = torch.where(quantized, 3.0 * a_elems, torch.zeros_like(a_elems))
    return MeasuredGemms(
        gemms=gemms,
        gpu=tuple(cols["gpu"]),
        source=tuple(cols["source"]),
        timing=tuple(t or "event" for t in cols["timing"]),
        latency_ms=latency,
        kernel=tuple(cols["kernel"]),
        prologue_bytes=prologue,
    )


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
    from .devices import get_device

    g = measured.gemms
    floor_s = torch.full((len(measured),), float("nan"), dtype=torch.float64)
    gpus = sorted(set(measured.gpu))
    gpu_index = {name: i for i, name in enumerate(gpus)}
    rows_gpu = torch.tensor([gpu_index[x] for x in measured.gpu], dtype=torch.long)
    for name, i in gpu_index.items():
        try:
            device = get_device(name)
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
