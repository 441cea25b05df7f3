"""The fused-attention kernels' own intervals: held-out residual quantiles per phase and size."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .bounds import bounds
from .cases import SIZES, size_class

ATTENTION_PHASES: tuple[str, ...] = ("prefill", "decode")  # ``AttentionCall.phase``


@dataclass(frozen=True)
class AttentionIntervals:
    """Held-out residual quantiles of the fused-attention model (``predict.attention``),
    per (phase, size) bucket: ``log_q`` (B, P) at ``probs`` for ``buckets`` ((phase, size)
    pairs, ``ATTENTION_PHASES`` × ``SIZES`` by the predicted time), fitted by
    ``train.attention.fit_attention_intervals`` on leave-one-GPU-out residuals with a tail map
    across GPUs, as the GEMM calibration. A bucket too thin in GPUs borrows its phase's pooled
    quantiles (size ``None``)."""

    probs: tuple[float, ...]
    buckets: tuple[tuple[str, str | None], ...]
    log_q: torch.Tensor = field(compare=False)  # (B, P)
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def log_quantiles(self, time_ms: torch.Tensor, decode: torch.Tensor) -> torch.Tensor:
        """Each call's residual quantiles (N, P) from its predicted time (N,) and phase
        (``decode`` (N,), 1 for a decode)."""
        index = {b: i for i, b in enumerate(self.buckets)}
        # (phase, size) -> bucket row, a thin size borrowing its phase's pooled row; -1: none
        table = torch.tensor([[index.get((p, z), index.get((p, None), -1)) for z in SIZES]
                              for p in ATTENTION_PHASES], dtype=torch.long)
        rows = table[decode.to(torch.long), size_class(time_ms)]  # (N,)
        if bool((rows < 0).any()):
            phase = ATTENTION_PHASES[int(decode[rows < 0][0])]
            raise ValueError(f"the attention intervals have no bucket for {phase}; "
                             f"they have: {sorted({b[0] for b in self.buckets})}")
        return self.log_q[rows].reshape(len(rows), -1)

    def bounds(self, time_ms: torch.Tensor, decode: torch.Tensor, level: float
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(lo, hi) of each predicted time (N,) at ``level``; lo ≤ time ≤ hi."""
        t = time_ms.to(torch.float64)
        return bounds(t, self.log_quantiles(t, decode), level, probs=self.probs)

    def to_dict(self) -> dict[str, Any]:
        return {"probs": list(self.probs),
                "buckets": [{"phase": p, "size": z, "log_q": [round(float(v), 6) for v in q]}
                            for (p, z), q in zip(self.buckets, self.log_q)],
                "metadata": dict(self.metadata)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> AttentionIntervals:
        probs = tuple(float(p) for p in doc["probs"])
        buckets, rows = [], []
        for b in doc["buckets"]:
            if b["phase"] not in ATTENTION_PHASES or b["size"] not in (*SIZES, None):
                raise ValueError(f"attention interval bucket {b['phase']!r}/{b['size']!r}: "
                                 f"phase one of {ATTENTION_PHASES}, size one of {SIZES}")
            if len(b["log_q"]) != len(probs):
                raise ValueError(f"attention interval bucket {b['phase']}/{b['size']}: "
                                 f"{len(b['log_q'])} quantiles for {len(probs)} probabilities")
            buckets.append((b["phase"], b["size"]))
            rows.append([float(v) for v in b["log_q"]])
        return cls(probs, tuple(buckets), torch.tensor(rows, dtype=torch.float64),
                   dict(doc.get("metadata", {})))
