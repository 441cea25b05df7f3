"""Measured attention calls: the one reader of DATA.md's attention schema, rows as an
``AttentionBatch`` priced as they were measured.

    gpu, gpu_name, source, phase, kernel, batch, q_len, kv_len, heads, kv_heads, head_dim,
    window, dtype, kv_dtype, latency_ms

``data/attention/aiconfigurator.csv.gz`` holds vLLM's attention kernels timed per call with CUDA
events (aiconfigurator, ai-dynamo/aiconfigurator, Copyright NVIDIA, Apache-2.0). Every row is
checked as it is read; a bad one raises a ``ValueError`` naming the file, the line and the
column. What a row's time holds is decided here: vLLM's attention forward, prefill causal, the
write of its new tokens' K and V into the paged cache included, each call planning its own
schedule, no dropout; the predictors' ``predict_measured`` re-run it on warm buffers, as timed.
A row without a ``kernel`` runs what vLLM runs on its GPU.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..hardware.catalog import DeviceSpec, get_device
from ..hardware.dtypes import resolve_dtype
from ..predict.attention.calls import PHASES, AttentionBatch
from ..suggest import unknown
from .table import OnDevices, RowError, Table, read_table

__all__ = [
    "ATTENTION_COLUMNS",
    "KERNEL_OF",
    "REQUIRED",
    "MeasuredAttention",
    "load_attention",
    "read_attention",
]

ATTENTION_COLUMNS: tuple[str, ...] = (
    "gpu", "gpu_name", "source", "phase", "kernel", "batch", "q_len", "kv_len", "heads",
    "kv_heads", "head_dim", "window", "dtype", "kv_dtype", "latency_ms",
)
# the columns a call to price needs; a measured file needs source, kernel and latency_ms too
REQUIRED: tuple[str, ...] = ("gpu", "phase", "batch", "q_len", "kv_len", "heads", "kv_heads",
                             "head_dim", "window", "dtype", "kv_dtype")
_MEASURED = tuple(c for c in ATTENTION_COLUMNS if c != "gpu_name")

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
class MeasuredAttention(OnDevices):
    """Measured attention calls with their device, kernel and latency, one entry per row.

    ``devices`` holds the specs of ``gpu`` ids the catalog lacks (a spec file's device); every
    other id is looked up in the catalog (``device``).
    """

    calls: AttentionBatch
    gpu: tuple[str, ...]
    kernel: tuple[str, ...]  # the vLLM kernel that ran (the data's ``kernel`` column)
    kv_dtype: tuple[str, ...]  # as written in the data ("bfloat16", "fp8")
    latency_ms: torch.Tensor  # (N,) float64; NaN where not read
    devices: Mapping[str, DeviceSpec] = field(default_factory=dict)

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
            devices=self.devices,
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


_SIZES = ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim", "window")


class _RowChecker:
    """Checks the rows of one attention table, naming the line, the column and the nearest good
    value of anything bad; keeps the devices and dtypes it has resolved."""

    def __init__(self, table: Table, device: DeviceSpec | None) -> None:
        self.table = table
        self.device = device
        self.gpus: dict[str, str] = {}
        self.dtypes: dict[str, tuple[str, int]] = {}

    def bad(self, i: int, col: str, msg: str) -> RowError:
        detail = f"column {col!r}: {msg}"
        return RowError(f"{self.table.path}: line {self.table.lines[i]}: {detail}", i, detail)

    def gpu(self, i: int, name: str) -> str:
        if self.device is not None:
            return self.device.id
        if name not in self.gpus:
            try:
                self.gpus[name] = get_device(name).id
            except ValueError as e:
                raise self.bad(i, "gpu", str(e)) from None
        return self.gpus[name]

    def phase(self, i: int, phase: str) -> bool:
        """Whether the row decodes."""
        if phase not in PHASES:
            raise self.bad(i, "phase", unknown("phase", phase, PHASES))
        return phase == "decode"

    def kernel(self, i: int, kernel: str) -> str:
        """The predictor's kernel of a vLLM kernel name ("auto" for none)."""
        if not kernel:
            return "auto"
        if kernel not in KERNEL_OF:
            raise self.bad(i, "kernel", unknown("kernel", kernel, sorted(KERNEL_OF)))
        return KERNEL_OF[kernel]

    def sizes(self, i: int, texts: Sequence[str], decode: bool) -> tuple[int, ...]:
        values: dict[str, int] = {}
        for c, text in zip(_SIZES, texts):
            try:
                v = int(text)
            except ValueError:
                raise self.bad(i, c, f"expected an integer, got {text!r}") from None
            lowest = 0 if c == "window" else 1
            if v < lowest:
                raise self.bad(i, c, f"expected an integer ≥ {lowest}, got {v}")
            values[c] = v
        if values["q_len"] > values["kv_len"]:
            raise self.bad(i, "q_len", f"{values['q_len']} exceeds kv_len {values['kv_len']}")
        if decode and values["q_len"] != 1:
            raise self.bad(i, "q_len", f"decode rows carry one new token, got {values['q_len']}")
        if values["heads"] % values["kv_heads"]:
            raise self.bad(i, "kv_heads", f"{values['kv_heads']} does not divide heads "
                                          f"{values['heads']}")
        return tuple(values[c] for c in _SIZES)

    def dtype(self, i: int, col: str, name: str) -> tuple[str, int]:
        if name not in self.dtypes:
            try:
                cd = resolve_dtype(name)
            except ValueError as e:
                raise self.bad(i, col, str(e)) from None
            self.dtypes[name] = (cd.name, cd.in_bytes)
        return self.dtypes[name]

    def latency(self, i: int, text: str) -> float:
        try:
            ms = float(text)
        except ValueError:
            raise self.bad(i, "latency_ms", f"expected a number, got {text!r}") from None
        if not (math.isfinite(ms) and ms > 0):
            raise self.bad(i, "latency_ms", f"expected a positive time, got {text!r}")
        return ms


def read_attention(table: Table, idx: Sequence[int] | None = None, *,
                   device: DeviceSpec | None = None, timed: bool = True) -> MeasuredAttention:
    """The attention rows ``idx`` of ``table`` (every row by default), in that order, as
    measured (see the module docstring).

    Every row must name a catalog GPU (unless ``device`` is given: every row is on it), a
    phase of ``PHASES``, a known vLLM kernel or none, positive integer sizes with
    ``q_len ≤ kv_len`` and ``kv_heads`` dividing ``heads``, a window ≥ 0, known dtypes and,
    where ``timed``, a positive latency (else the latencies are NaN). Raises a ``RowError``
    naming the file, the line, the column and the nearest good value.
    """
    pick = list(range(len(table))) if idx is None else list(idx)
    check = _RowChecker(table, device)
    cols = {c: table.column(c, pick) for c in (*REQUIRED, "kernel", "latency_ms")}
    gpu, kernel, decode, sizes, dtype, in_bytes, kv_bytes, latency = ([] for _ in range(8))
    for j, i in enumerate(pick):
        gpu.append(check.gpu(i, cols["gpu"][j]))
        decode.append(check.phase(i, cols["phase"][j]))
        kernel.append(check.kernel(i, cols["kernel"][j]))
        sizes.append(check.sizes(i, [cols[c][j] for c in _SIZES], decode[-1]))
        name, nbytes = check.dtype(i, "dtype", cols["dtype"][j])
        dtype.append(name)
        in_bytes.append(nbytes)
        kv_bytes.append(check.dtype(i, "kv_dtype", cols["kv_dtype"][j])[1])
        latency.append(check.latency(i, cols["latency_ms"][j]) if timed else math.nan)

    def t(xs: Iterable[float]) -> torch.Tensor:
        return torch.tensor(list(xs), dtype=torch.float64)

    size = torch.tensor(sizes, dtype=torch.float64).reshape(len(pick), len(_SIZES))
    ones, zeros = torch.ones(len(pick), dtype=torch.float64), torch.zeros(len(pick),
                                                                          dtype=torch.float64)
    calls = AttentionBatch(
        decode=t(decode), **{c: size[:, j].clone() for j, c in enumerate(_SIZES)},
        causal=ones.clone(),  # prefill is causal; decode: q = 1
        in_bytes=t(in_bytes), kv_bytes=t(kv_bytes),
        # vLLM's attention forward, as timed, writes the new tokens' K and V into the cache
        cache_write=ones.clone(),
        dropout=zeros.clone(),  # inference: no dropout
        # each timed forward planned its own varlen schedule (FlashAttention 3)
        scheduled=zeros.clone(),
        dtype=tuple(dtype), kernel=tuple(kernel),
    )
    return MeasuredAttention(calls=calls, gpu=tuple(gpu), kernel=tuple(cols["kernel"]),
                             kv_dtype=tuple(cols["kv_dtype"]), latency_ms=t(latency),
                             devices={} if device is None else {device.id: device})


def load_attention(path: str | Path) -> MeasuredAttention:
    """Read and check an attention CSV (``.csv`` or ``.csv.gz``) in DATA.md's schema
    (``read_attention``).

    ``path`` is the file, or a data directory holding ``attention/aiconfigurator.csv.gz``.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "attention" / "aiconfigurator.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"attention data not found at {path} (expected "
                                "../shared/data/attention/aiconfigurator.csv.gz)")
    table = read_table(path)
    table.check_columns(_MEASURED, "attention")
    if not len(table):
        raise ValueError(f"{path}: no data rows")
    return read_attention(table)
