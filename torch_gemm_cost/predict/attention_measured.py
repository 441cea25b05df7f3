"""Measured attention calls: rows of DATA.md's attention schema as an ``AttentionBatch``.

    gpu, gpu_name, source, phase, kernel, batch, q_len, kv_len, heads, kv_heads, head_dim,
    window, dtype, kv_dtype, latency_ms

``data/attention/aiconfigurator.csv.gz`` holds vLLM's attention kernels timed per call with CUDA
events (aiconfigurator, ai-dynamo/aiconfigurator, Copyright NVIDIA, Apache-2.0). Every row is
checked as it is read; a bad one raises a ``ValueError`` naming the file, the line and the
column. Reads with the ``csv`` module only.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..devices import get_device
from ..dtypes import resolve_dtype
from .attention.calls import PHASES, AttentionBatch, _closest

__all__ = [
    "ATTENTION_COLUMNS",
    "KERNEL_OF",
    "MeasuredAttention",
    "load_attention",
]

ATTENTION_COLUMNS: tuple[str, ...] = (
    "gpu", "gpu_name", "source", "phase", "kernel", "batch", "q_len", "kv_len", "heads",
    "kv_heads", "head_dim", "window", "dtype", "kv_dtype", "latency_ms",
)
_REQUIRED = tuple(c for c in ATTENTION_COLUMNS if c != "gpu_name")

# the kernel column's vLLM kernel names -> the kernel (``predict.attention.KERNELS``) they are
KERNEL_OF: dict[str, str] = {
    "vllm_flash_attn": "fa2",  # vllm-flash-attn's FlashAttention 2, on the A100
    "vllm_flash_attn_fa2": "fa2",
    "vllm_flash_attn_fa3": "fa3",
    "vllm_flash_attn_fa4": "fa3",  # FlashAttention 4 on Hopper packs GQA as FA3 does
    "vllm_flashinfer_fiprefill": "flashinfer",
    "vllm_flashinfer_fidecode": "flashinfer",
    "vllm_flashinfer_trtllmprefill": "trtllm",
    "vllm_flashinfer_trtllmdecode": "trtllm",
    "vllm_triton_attn": "triton",
}


@dataclass(frozen=True)
class MeasuredAttention:
    """Measured attention calls with their device, kernel and latency, one entry per row."""

    calls: AttentionBatch
    gpu: tuple[str, ...]
    kernel: tuple[str, ...]  # the vLLM kernel that ran (the data's ``kernel`` column)
    kv_dtype: tuple[str, ...]  # as written in the data ("bfloat16", "fp8")
    latency_ms: torch.Tensor  # (N,) float64

    def __len__(self) -> int:
        return len(self.gpu)

    @property
    def phase(self) -> tuple[str, ...]:
        return tuple(PHASES[int(v)] for v in self.calls.decode.tolist())

    def select(self, index: torch.Tensor | Sequence[int]) -> MeasuredAttention:
        """The rows at ``index`` (a bool mask or integer positions), in that order."""
        idx = torch.as_tensor(index)
        if idx.dtype == torch.bool:
            idx = torch.nonzero(idx).flatten()
        idx = idx.long()
        pos = idx.tolist()
        return MeasuredAttention(
            calls=self.calls.select(idx),
            gpu=tuple(self.gpu[i] for i in pos),
            kernel=tuple(self.kernel[i] for i in pos),
            kv_dtype=tuple(self.kv_dtype[i] for i in pos),
            latency_ms=self.latency_ms[idx],
        )

    def mask(self, **equal: str | Iterable[str]) -> torch.Tensor:
        """Bool mask of rows whose gpu, kernel, kv_dtype or phase equal (or are in) the values."""
        keep = torch.ones(len(self), dtype=torch.bool)
        for col, want in equal.items():
            if col not in ("gpu", "kernel", "kv_dtype", "phase"):
                raise ValueError(f"cannot filter on {col!r}; use gpu, kernel, kv_dtype or phase")
            wanted = {want} if isinstance(want, str) else set(want)
            keep &= torch.tensor([v in wanted for v in getattr(self, col)], dtype=torch.bool)
        return keep


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", newline="")  # type: ignore[return-value]
    return open(path, newline="", encoding="utf-8")


_SIZES = ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim", "window")


@dataclass(frozen=True)
class _Row:
    """One checked data row."""

    sizes: tuple[int, ...]  # in ``_SIZES`` order
    decode: bool
    latency_ms: float
    gpu: str  # the catalog id
    kernel: str  # the data's ``kernel`` column
    dtype: str  # resolved
    in_bytes: int
    kv_dtype: str  # as written
    kv_bytes: int


class _RowChecker:
    """Checks the rows of one attention file, naming the line, the column and the nearest good
    value of anything bad; keeps the devices and dtypes it has resolved."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.gpus: dict[str, str] = {}
        self.dtypes: dict[str, tuple[str, int]] = {}

    def bad(self, line: int, col: str, msg: str) -> ValueError:
        return ValueError(f"{self.path}: line {line}: column {col!r}: {msg}")

    def row(self, rec: dict[str, str], line: int) -> _Row:
        gpu = self._gpu(rec["gpu"] or "", line)
        phase = rec["phase"] or ""
        if phase not in PHASES:
            raise self.bad(line, "phase", f"{phase!r} is not one of {PHASES}; did you mean "
                                          f"{_closest(phase, PHASES)!r}?")
        kernel = rec["kernel"] or ""
        if kernel not in KERNEL_OF:
            raise self.bad(line, "kernel", f"unknown kernel {kernel!r}; did you mean "
                                           f"{_closest(kernel, sorted(KERNEL_OF))!r}?")
        sizes = self._sizes(rec, line, phase)
        dtype, in_bytes = self._dtype(rec, "dtype", line)
        _, kv_bytes = self._dtype(rec, "kv_dtype", line)
        return _Row(sizes=tuple(sizes[c] for c in _SIZES), decode=phase == "decode",
                    latency_ms=self._latency(rec, line), gpu=gpu, kernel=kernel, dtype=dtype,
                    in_bytes=in_bytes, kv_dtype=rec["kv_dtype"], kv_bytes=kv_bytes)

    def _gpu(self, name: str, line: int) -> str:
        if name not in self.gpus:
            try:
                self.gpus[name] = get_device(name).id
            except ValueError as e:
                raise self.bad(line, "gpu", str(e)) from None
        return self.gpus[name]

    def _sizes(self, rec: dict[str, str], line: int, phase: str) -> dict[str, int]:
        values: dict[str, int] = {}
        for c in _SIZES:
            text = (rec[c] or "").strip()
            try:
                v = int(text)
            except ValueError:
                raise self.bad(line, c, f"expected an integer, got {text!r}") from None
            lowest = 0 if c == "window" else 1
            if v < lowest:
                raise self.bad(line, c, f"expected an integer ≥ {lowest}, got {v}")
            values[c] = v
        if values["q_len"] > values["kv_len"]:
            raise self.bad(line, "q_len", f"{values['q_len']} exceeds kv_len {values['kv_len']}")
        if phase == "decode" and values["q_len"] != 1:
            raise self.bad(line, "q_len",
                           f"decode rows carry one new token, got {values['q_len']}")
        if values["heads"] % values["kv_heads"]:
            raise self.bad(line, "kv_heads", f"{values['kv_heads']} does not divide heads "
                                             f"{values['heads']}")
        return values

    def _dtype(self, rec: dict[str, str], col: str, line: int) -> tuple[str, int]:
        name = rec[col] or ""
        if name not in self.dtypes:
            try:
                cd = resolve_dtype(name)
            except ValueError as e:
                raise self.bad(line, col, str(e)) from None
            self.dtypes[name] = (cd.name, cd.in_bytes)
        return self.dtypes[name]

    def _latency(self, rec: dict[str, str], line: int) -> float:
        text = (rec["latency_ms"] or "").strip()
        try:
            ms = float(text)
        except ValueError:
            raise self.bad(line, "latency_ms", f"expected a number, got {text!r}") from None
        if not (math.isfinite(ms) and ms > 0):
            raise self.bad(line, "latency_ms", f"expected a positive time, got {text!r}")
        return ms


def load_attention(path: str | Path) -> MeasuredAttention:
    """Read and check an attention CSV (``.csv`` or ``.csv.gz``) in DATA.md's schema.

    ``path`` is the file, or a data directory holding ``attention/aiconfigurator.csv.gz``.
    Every row must name a catalog GPU, a phase of ``PHASES``, a known vLLM kernel, positive
    integer sizes with ``q_len ≤ kv_len`` and ``kv_heads`` dividing ``heads``, a window ≥ 0,
    known dtypes and a positive latency; prefill rows are causal.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "attention" / "aiconfigurator.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"attention data not found at {path} (expected "
                                "../shared/data/attention/aiconfigurator.csv.gz)")
    checker = _RowChecker(path)
    with _open_text(path) as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in _REQUIRED if c not in header]
        if missing:
            raise ValueError(f"{path}: line 1: missing columns {missing}; the attention schema "
                             f"is {', '.join(ATTENTION_COLUMNS)}")
        rows = [checker.row(rec, line) for line, rec in enumerate(reader, start=2)]
    if not rows:
        raise ValueError(f"{path}: no data rows")

    def t(xs: Iterable[float]) -> torch.Tensor:
        return torch.tensor(list(xs), dtype=torch.float64)

    sizes = {c: t(r.sizes[i] for r in rows) for i, c in enumerate(_SIZES)}
    calls = AttentionBatch(
        decode=t(float(r.decode) for r in rows), **sizes,
        causal=torch.ones(len(rows), dtype=torch.float64),  # prefill is causal; decode: q = 1
        in_bytes=t(r.in_bytes for r in rows), kv_bytes=t(r.kv_bytes for r in rows),
        # vLLM's attention forward, as timed, writes the new tokens' K and V into the cache
        cache_write=torch.ones(len(rows), dtype=torch.float64),
        dropout=torch.zeros(len(rows), dtype=torch.float64),  # inference: no dropout
        # each timed forward planned its own varlen schedule (FlashAttention 3)
        scheduled=torch.zeros(len(rows), dtype=torch.float64),
        dtype=tuple(r.dtype for r in rows), kernel=tuple(KERNEL_OF[r.kernel] for r in rows),
    )
    return MeasuredAttention(calls=calls, gpu=tuple(r.gpu for r in rows),
                             kernel=tuple(r.kernel for r in rows),
                             kv_dtype=tuple(r.kv_dtype for r in rows),
                             latency_ms=t(r.latency_ms for r in rows))
