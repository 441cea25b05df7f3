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
from .attention import PHASES, AttentionBatch, _closest

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
    ints = ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim", "window")
    cols: dict[str, list[float]] = {c: [] for c in ints}
    decode: list[float] = []
    latency: list[float] = []
    gpus: list[str] = []
    kernels: list[str] = []
    kv_names: list[str] = []
    dtypes: list[str] = []
    in_bytes: list[float] = []
    kv_bytes: list[float] = []
    kernel_names: list[str] = []
    known_gpu: dict[str, str] = {}
    dtype_cache: dict[str, tuple[str, int]] = {}

    with _open_text(path) as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in _REQUIRED if c not in header]
        if missing:
            raise ValueError(f"{path}: line 1: missing columns {missing}; the attention schema "
                             f"is {', '.join(ATTENTION_COLUMNS)}")
        for line, rec in enumerate(reader, start=2):
            def bad(col: str, msg: str, line: int = line) -> ValueError:
                return ValueError(f"{path}: line {line}: column {col!r}: {msg}")

            gpu = rec["gpu"] or ""
            if gpu not in known_gpu:
                try:
                    known_gpu[gpu] = get_device(gpu).id
                except ValueError as e:
                    raise bad("gpu", str(e)) from None
            phase = rec["phase"] or ""
            if phase not in PHASES:
                raise bad("phase", f"{phase!r} is not one of {PHASES}; did you mean "
                                   f"{_closest(phase, PHASES)!r}?")
            kernel = rec["kernel"] or ""
            if kernel not in KERNEL_OF:
                raise bad("kernel", f"unknown kernel {kernel!r}; did you mean "
                                    f"{_closest(kernel, sorted(KERNEL_OF))!r}?")
            values: dict[str, int] = {}
            for c in ints:
                text = (rec[c] or "").strip()
                try:
                    v = int(text)
                except ValueError:
                    raise bad(c, f"expected an integer, got {text!r}") from None
                if v < (0 if c == "window" else 1):
                    lowest = 0 if c == "window" else 1
                    raise bad(c, f"expected an integer ≥ {lowest}, got {v}")
                values[c] = v
            if values["q_len"] > values["kv_len"]:
                raise bad("q_len", f"{values['q_len']} exceeds kv_len {values['kv_len']}")
            if phase == "decode" and values["q_len"] != 1:
                raise bad("q_len", f"decode rows carry one new token, got {values['q_len']}")
            if values["heads"] % values["kv_heads"]:
                raise bad("kv_heads", f"{values['kv_heads']} does not divide heads "
                                      f"{values['heads']}")
            for c in ("dtype", "kv_dtype"):
                name = rec[c] or ""
                if name not in dtype_cache:
                    try:
                        cd = resolve_dtype(name)
                    except ValueError as e:
                        raise bad(c, str(e)) from None
                    dtype_cache[name] = (cd.name, cd.in_bytes)
            text = (rec["latency_ms"] or "").strip()
            try:
                ms = float(text)
            except ValueError:
                raise bad("latency_ms", f"expected a number, got {text!r}") from None
            if not (math.isfinite(ms) and ms > 0):
                raise bad("latency_ms", f"expected a positive time, got {text!r}")

            for c in ints:
                cols[c].append(float(values[c]))
            decode.append(float(phase == "decode"))
            latency.append(ms)
            gpus.append(known_gpu[gpu])
            kernels.append(kernel)
            kv_names.append(rec["kv_dtype"])
            dname, dbytes = dtype_cache[rec["dtype"]]
            dtypes.append(dname)
            in_bytes.append(float(dbytes))
            kv_bytes.append(float(dtype_cache[rec["kv_dtype"]][1]))
            kernel_names.append(KERNEL_OF[kernel])
    if not latency:
        raise ValueError(f"{path}: no data rows")

    def t(xs: list[float]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.float64)

    calls = AttentionBatch(
        decode=t(decode), batch=t(cols["batch"]), q_len=t(cols["q_len"]),
        kv_len=t(cols["kv_len"]), heads=t(cols["heads"]), kv_heads=t(cols["kv_heads"]),
        head_dim=t(cols["head_dim"]), window=t(cols["window"]),
        causal=torch.ones(len(latency), dtype=torch.float64),  # prefill is causal; decode: q = 1
        in_bytes=t(in_bytes), kv_bytes=t(kv_bytes),
        dtype=tuple(dtypes), kernel=tuple(kernel_names),
    )
    return MeasuredAttention(calls=calls, gpu=tuple(gpus), kernel=tuple(kernels),
                             kv_dtype=tuple(kv_names), latency_ms=t(latency))
