"""The attention calls to price: one call (``AttentionCall``) and a batch of them as (N,)
tensors (``AttentionBatch``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from ...hardware.catalog import DeviceSpec
from ...hardware.dtypes import resolve_dtype
from ...suggest import check_choice
from .kernels import KERNEL_CHOICES, vllm_kernel

PHASES: tuple[str, ...] = ("prefill", "decode")


@dataclass(frozen=True)
class AttentionCall:
    """One fused attention call: ``batch`` sequences, each with ``q_len`` new query tokens
    attending to ``kv_len`` keys (the new ones included, so ``q_len ≤ kv_len`` when causal;
    without ``causal`` every query sees every key, as cross-attention does).

    ``heads`` query heads share ``kv_heads`` KV heads (GQA; MQA when 1). ``window`` > 0 limits
    each query to the last ``window`` keys up to and including its own position; 0 means none.
    ``kv_dtype`` is the KV cache's storage (fp8 halves its bytes); the products run in ``dtype``.
    ``kernel`` is one of ``KERNELS`` or "auto": what vLLM runs on the device (``vllm_kernel``).
    ``cache_write``: the call first writes its ``q_len`` new tokens' K and V into a paged KV
    cache, as a serving engine's attention layer does (False: PyTorch's SDPA, which writes none).
    ``dropout``: the call drops attention probabilities (a training step's attention dropout);
    FlashAttention 2 then never splits the keys ("SplitKV is not implemented for dropout").
    ``scheduled``: the call's varlen schedule was computed before it, so FlashAttention 3 runs
    no schedule kernel of its own (``varlen_schedule_kernels``): vLLM's metadata builder does
    so once a step (``aot_schedule``: ``get_scheduler_metadata``) and hands the result to every
    layer; the measured calls ran the kernel themselves.
    """

    phase: str
    batch: int
    q_len: int
    kv_len: int
    heads: int
    kv_heads: int
    head_dim: int
    window: int = 0
    causal: bool = True
    dtype: str = "bfloat16"
    kv_dtype: str = "bfloat16"
    kernel: str = "auto"
    cache_write: bool = True
    dropout: bool = False
    scheduled: bool = False

    def __post_init__(self) -> None:
        check_choice("phase", self.phase, PHASES)
        check_choice("kernel", self.kernel, KERNEL_CHOICES)
        for name in ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 0:
            raise ValueError(f"window must be a non-negative integer (0: none), got "
                             f"{self.window!r}")
        for flag in ("cache_write", "dropout", "scheduled"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.causal and self.q_len > self.kv_len:
            raise ValueError(f"q_len {self.q_len} exceeds kv_len {self.kv_len}: the keys include "
                             f"the new tokens, so kv_len must be at least {self.q_len}")
        if self.heads % self.kv_heads:
            lower = max(k for k in range(1, self.kv_heads + 1) if self.heads % k == 0)
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads "
                             f"{self.kv_heads}; the nearest kv_heads that divides it is {lower}")
        for name in ("dtype", "kv_dtype"):
            object.__setattr__(self, name, resolve_dtype(getattr(self, name)).name)


def _col(values: Sequence[float] | torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(values, dtype=torch.float64).reshape(-1).clone()


@dataclass(frozen=True)
class AttentionBatch:
    """N attention calls as float64 tensors of shape (N,), ready for batched physics.

    ``decode``, ``causal``, ``cache_write``, ``dropout`` and ``scheduled`` are 0/1; ``in_bytes``
    is the element size of Q and O, ``kv_bytes`` that of K and V. ``dtype`` (compute dtype) and
    ``kernel`` (a ``KERNELS`` name or "auto") are per call. ``warm_l2`` is 1 where a call is
    re-run on the same buffers, as in the measurements, so a working set that fits stays in the
    L2, 0-dim for every call alike; inside a model each layer reads other K/V, so a batch is cold
    by default.
    """

    decode: torch.Tensor
    batch: torch.Tensor
    q_len: torch.Tensor
    kv_len: torch.Tensor
    heads: torch.Tensor
    kv_heads: torch.Tensor
    head_dim: torch.Tensor
    window: torch.Tensor
    causal: torch.Tensor
    in_bytes: torch.Tensor
    kv_bytes: torch.Tensor
    cache_write: torch.Tensor
    dropout: torch.Tensor
    scheduled: torch.Tensor
    dtype: tuple[str, ...]
    kernel: tuple[str, ...]
    warm_l2: torch.Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.float64))

    def __len__(self) -> int:
        return int(self.batch.shape[0])

    @classmethod
    def from_calls(cls, calls: Sequence[AttentionCall], *, warm_l2: bool = False
                   ) -> AttentionBatch:
        if not calls:
            raise ValueError("no attention calls given")
        return cls(
            decode=_col([float(c.phase == "decode") for c in calls]),
            batch=_col([c.batch for c in calls]),
            q_len=_col([c.q_len for c in calls]),
            kv_len=_col([c.kv_len for c in calls]),
            heads=_col([c.heads for c in calls]),
            kv_heads=_col([c.kv_heads for c in calls]),
            head_dim=_col([c.head_dim for c in calls]),
            window=_col([c.window for c in calls]),
            causal=_col([float(c.causal) for c in calls]),
            in_bytes=_col([resolve_dtype(c.dtype).in_bytes for c in calls]),
            kv_bytes=_col([resolve_dtype(c.kv_dtype).in_bytes for c in calls]),
            cache_write=_col([float(c.cache_write) for c in calls]),
            dropout=_col([float(c.dropout) for c in calls]),
            scheduled=_col([float(c.scheduled) for c in calls]),
            dtype=tuple(c.dtype for c in calls),
            kernel=tuple(c.kernel for c in calls),
        ).with_warm_l2(warm_l2)

    def select(self, index: torch.Tensor | Sequence[int]) -> AttentionBatch:
        """The calls at ``index`` (a bool mask or integer positions), in that order."""
        idx = torch.as_tensor(index)
        if idx.dtype == torch.bool:
            idx = torch.nonzero(idx).flatten()
        idx = idx.long()
        pos = idx.tolist()
        tensors = {f: getattr(self, f)[idx] for f in self.__dataclass_fields__
                   if f not in ("dtype", "kernel", "warm_l2")}
        return AttentionBatch(**tensors, dtype=tuple(self.dtype[i] for i in pos),
                              kernel=tuple(self.kernel[i] for i in pos),
                              warm_l2=self.warm_l2 if self.warm_l2.dim() == 0
                              else self.warm_l2[idx])

    def with_warm_l2(self, warm: bool = True) -> AttentionBatch:
        """These calls re-run on the same buffers (``warm``, as measured) or cold, all alike."""
        return replace(self, warm_l2=torch.tensor(float(warm), dtype=torch.float64))

    def resolve_kernels(self, devices: Sequence[DeviceSpec]) -> tuple[str, ...]:
        """Each call's kernel, "auto" replaced by what vLLM runs on its device."""
        out = []
        for i, (k, dev) in enumerate(zip(self.kernel, devices)):
            if k == "auto":
                kv = "float8_e4m3fn" if self.kv_bytes[i] == 1 else self.dtype[i]
                k = vllm_kernel(dev, int(self.head_dim[i]), kv)
            out.append(k)
        return tuple(out)
