"""Calibrated intervals: how far the measured time may fall from the predicted one.

An interval at level 0.8 should hold the measured time 80% of the time on a GPU the predictor
never saw. It is built from held-out residuals, r = log(measured / predicted), never in-sample
ones: each GPU's GEMMs predicted by hybrids fitted without any board of its chip (or, for the
"chip seen" class, without that board only), and each whole model likewise
(``train/intervals.py`` fits, ``benchmarks/intervals.py`` scores).

Method: weighted split-conformal quantiles of r (Tibshirani et al. 2019), per bucket of cases.
Chosen over quantile regression because the residuals are held-out already (no model needs to be
refitted per level), any level is read off one stored grid of quantiles, the finite-sample
correction is exact for a hand-worked case, and a bucket's quantiles are numbers one can read.
Each GPU weighs the same in a bucket (a GPU with 70k rows does not set everyone's interval), and
the quantiles are asymmetric: the interval is [t·e^Q(a/2), t·e^Q(1 − a/2)] with a = 1 − level,
so a case the predictor tends to price too fast gets a longer upper side.

A GEMM's bucket is (novelty, engine, precision, regime, size), each known before anything runs:

- novelty: ``chip_seen`` (a board of its chip in the fit), ``family_seen`` (another chip of its
  kernel-library family in the fit), ``family_unseen`` (neither, or a device from a spec file),
  or ``calibrated`` (a profile's own residuals, ``calibrate``);
- engine: CUDA cores, tensor cores, AMD matrix units, other (CPUs);
- precision: fp32, tf32, half (fp16/bf16), fp8, int8, fp64;
- regime, from physics alone: ``launch`` (the physical floor under 5 µs, so the launch and the
  kernel's fixed costs dominate), ``misaligned`` (a tensor-core GEMM with an operand off 16
  bytes), else ``memory`` or ``compute`` by intensity against the ridge;
- size: the physical floor max(FLOPs / peak, bytes / bandwidth) in decades of ms.

Where a bucket holds fewer chips than the calibration asks for (``train/intervals.MIN_CHIPS``),
the next coarser one serves: size, then regime, then precision, then engine are dropped in turn
(``FALLBACK``: a chip seen borrows the family-seen buckets rather than pool every engine). A
family never seen takes at each bucket the wider of its own quantiles and the family-seen ones,
so it always gets the widest interval.

Pooled quantiles of other GPUs cover a new GPU less often than their nominal level (its level
is not among theirs). So the stored quantile at p is the raw one at the probability whose tail
was crossed a share 1 − p of the time on chips left out of it (the tail map,
``train/intervals.mapped_probs``): a split-conformal correction at the level of GPUs.

A layer or a whole model sums many GEMMs whose errors are correlated: a wrong level moves
every GEMM of one GPU the same way. Its log residual is modelled as a shared level term L (sd
``level_sigma`` per novelty) plus independent per-GEMM terms ε_i (sd s_i, from the GEMM's own
quantiles), weighted by each GEMM's share of the time:

    log(measured / predicted) ≈ μ + L + Σ_i w_i ε_i,   σ² = level_sigma² + Σ_i w_i² s_i²

where μ shifts the total by each GEMM's median residual. The interval is T·e^(μ + Z(p)·σ), with
Z the conformal quantiles of (r − μ) / σ over held-out whole-model runs. Without the level term
the interval of N equal GEMMs would shrink as 1/√N; with it, it never falls below the level's.

Fused-attention kernels (SDPA on a GPU) have quantiles of their own (``AttentionIntervals``:
the attention model's leave-one-GPU-out residuals per phase and size, fitted by
``train.attention``). The kernels of one model enter its total as a single term beside the
GEMMs, their quantiles those of fully correlated calls (``comonotonic_sum``): one kernel on one
GPU errs the same way in every layer. Its independence from the GEMMs' level term is an
assumption no measured run checks (the whole-model labels run eager attention).

Everything here is a pure batched tensor function, or a frozen record of fitted numbers.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import DeviceSpec, get_device
from ..hardware.dtypes import DTYPES
from ..records.types import DTYPE_NAMES, GemmBatch
from .base import read_fitted
from .gemm.features import DeviceTable, library_family
from .gemm.roofline import peak_flops_per_s
from .gemm.tiles import ENGINES
from .registry import SHIPPED, check_format, load_shipped, shipped_path

__all__ = [
    "ATTENTION_PHASES",
    "DEFAULT_LEVEL",
    "ENGINE_CLASSES",
    "FORMAT",
    "NOVELTY",
    "PRECISIONS",
    "PROBS",
    "REGIMES",
    "AttentionIntervals",
    "GemmCases",
    "IntervalCalibration",
    "ReportUncertainty",
    "bounds",
    "center_and_sigma",
    "check_level",
    "comonotonic_sum",
    "conformal_grid",
    "conformal_quantiles",
    "default_calibration",
    "gemm_cases",
    "gemm_interval",
    "novelty_of",
    "own_calibration",
    "propagate",
    "quantile_at",
    "resolve_bucket",
    "size_class",
    "spread_of",
    "uncertainty_of",
]

FORMAT = SHIPPED["gemm_intervals"].format
VERSION = 1  # of the calibration files this module reads and writes
DEFAULT_LEVEL = 0.8

NOVELTY: tuple[str, ...] = ("calibrated", "chip_seen", "family_seen", "family_unseen")
ENGINE_CLASSES: tuple[str, ...] = ("cuda_cores", "tensor_cores", "amd_matrix", "other")
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "half", "fp8", "int8", "fp64")
REGIMES: tuple[str, ...] = ("launch", "memory", "compute", "misaligned")
# physical floor (ms) below which a GEMM is in the launch regime, and the size decades' edges
LAUNCH_FLOOR_MS = 0.005
SIZE_EDGES_MS: tuple[float, ...] = (0.01, 0.1, 1.0)
SIZES: tuple[str, ...] = ("<0.01ms", "0.01-0.1ms", "0.1-1ms", ">=1ms")

# the probabilities whose residual quantiles are stored: levels 0.1 to 0.99 read off them
PROBS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
    0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.975, 0.99, 0.995,
)
MIN_LEVEL, MAX_LEVEL = 0.1, 0.99
ATTENTION_PHASES: tuple[str, ...] = ("prefill", "decode")  # ``AttentionCall.phase``

# the key fields of a bucket, finest first; each fallback drops the last one still there
KEY_FIELDS: tuple[str, ...] = ("novelty", "engine", "precision", "regime", "size")
# How a novelty's cases fall back: the fewest key fields its own buckets may keep, then the
# class whose buckets serve where its own are all too thin. A chip seen borrows from the family
# seen rather than pool every engine of its own two chips.
FALLBACK: dict[str, tuple[int, str | None]] = {
    "calibrated": (1, None),
    "chip_seen": (2, "family_seen"),
    "family_seen": (1, None),
    "family_unseen": (1, None),
}
_PRECISION_OF_KEY = {"fp32": "fp32", "tf32": "tf32", "fp16": "half", "bf16": "half",
                     "fp8": "fp8", "int8": "int8", "fp64": "fp64"}
_Z80 = 1.2815515655446004  # the standard normal's 0.9 quantile: Q(0.9) − Q(0.1) = 2·z·sd


def check_level(level: Any, name: str = "interval") -> float:
    """``level`` as a coverage in [0.1, 0.99], or a ValueError naming it and the nearest good
    value (``interval=80`` -> did you mean 0.8?)."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or math.isnan(level):
        raise ValueError(f"{name} must be a coverage in (0, 1) such as 0.8, got {level!r}")
    level = float(level)
    if not 0.0 < level < 1.0:
        hint = f"; did you mean {level / 100:g}?" if 1.0 < level < 100.0 else "; try 0.8"
        raise ValueError(f"{name} must be a coverage in (0, 1), got {level:g}{hint}")
    if not MIN_LEVEL <= level <= MAX_LEVEL:
        nearest = min(max(level, MIN_LEVEL), MAX_LEVEL)
        raise ValueError(
            f"{name} = {level:g} is outside the levels the calibration supports "
            f"[{MIN_LEVEL:g}, {MAX_LEVEL:g}]; nearest: {nearest:g}")
    return level


# ------------------------------------------------------------------------------ cases


@dataclass(frozen=True)
class GemmCases:
    """Each GEMM's bucket fields as indices, (N,) long each: into ENGINE_CLASSES, PRECISIONS,
    REGIMES and SIZES."""

    engine: torch.Tensor
    precision: torch.Tensor
    regime: torch.Tensor
    size: torch.Tensor
    floor_ms: torch.Tensor  # (N,) float64: max(FLOPs / peak, bytes / bandwidth)

    def __len__(self) -> int:
        return int(self.engine.shape[0])

    @classmethod
    def concat(cls, parts: Sequence[GemmCases]) -> GemmCases:
        return cls(*(torch.cat([getattr(p, f) for p in parts])
                     for f in ("engine", "precision", "regime", "size", "floor_ms")))


def gemm_cases(gemms: GemmBatch, device: DeviceSpec) -> GemmCases:
    """The bucket fields of every GEMM on ``device``, from the GEMMs and the device alone (no
    predictor): engine and precision from the catalog, regime and size from the roofline."""
    table = DeviceTable.build([device])
    amd = library_family(device) == "cdna"
    raw = table.engine[0, gemms.dtype_index]  # (N,) indexes ENGINES
    if device.vendor.upper() not in ("NVIDIA", "AMD") or library_family(device) == "other":
        engine = torch.full_like(raw, ENGINE_CLASSES.index("other"))
    elif amd:
        engine = torch.where(raw == ENGINES.index("simt"), ENGINE_CLASSES.index("cuda_cores"),
                             ENGINE_CLASSES.index("amd_matrix"))
    else:
        engine = torch.where(raw == ENGINES.index("simt"), ENGINE_CLASSES.index("cuda_cores"),
                             ENGINE_CLASSES.index("tensor_cores"))
    prec_of_dtype = torch.tensor([PRECISIONS.index(_PRECISION_OF_KEY[DTYPES[n].peak_key])
                                  for n in DTYPE_NAMES])
    precision = prec_of_dtype[gemms.dtype_index]
    peak = peak_flops_per_s(gemms, device)  # (N,)
    compute_ms = gemms.flops / peak * 1e3
    memory_ms = gemms.compulsory_bytes / device.dram_bw_bytes_per_s * 1e3
    floor_ms = torch.maximum(compute_ms, memory_ms)
    narrow = torch.minimum(torch.minimum(gemms.a_align_bytes, gemms.b_align_bytes),
                           gemms.c_align_bytes)
    misaligned = ((engine == ENGINE_CLASSES.index("tensor_cores")) & (narrow < 16)
                  & (gemms.m > 1) & (gemms.n > 1))
    regime = torch.where(
        floor_ms < LAUNCH_FLOOR_MS, REGIMES.index("launch"),
        torch.where(misaligned, REGIMES.index("misaligned"),
                    torch.where(compute_ms >= memory_ms, REGIMES.index("compute"),
                                REGIMES.index("memory"))))
    edges = torch.tensor(SIZE_EDGES_MS, dtype=torch.float64)
    size = torch.bucketize(floor_ms, edges, right=True)
    return GemmCases(engine=engine.long(), precision=precision.long(), regime=regime.long(),
                     size=size.long(), floor_ms=floor_ms)


# ------------------------------------------------------------------------------ conformal


def size_class(time_ms: torch.Tensor) -> torch.Tensor:
    """Index into ``SIZES`` of each time (N,): its decade of ms, edges ``SIZE_EDGES_MS``.

    >>> size_class(torch.tensor([0.004, 0.01, 0.5, 3.0])).tolist()
    [0, 1, 2, 3]
    """
    t = (time_ms if time_ms.is_floating_point() else time_ms.to(torch.float64)).contiguous()
    edges = torch.tensor(SIZE_EDGES_MS, dtype=t.dtype)  # an edge in the times' own precision
    return torch.bucketize(t, edges, right=True)


@dataclass(frozen=True)
class AttentionIntervals:
    """Held-out residual quantiles of the fused-attention model (``predict/attention.py``),
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


def conformal_quantiles(scores: torch.Tensor, weights: torch.Tensor | None = None,
                        probs: Sequence[float] = PROBS) -> torch.Tensor:
    """Weighted split-conformal quantiles of ``scores`` (n,) at ``probs``, (P,).

    The quantile at p ≥ 0.5 is that of the weighted scores plus one more point at +∞ carrying
    the mean weight (the test case's), so with equal weights it is the ⌈p·(n + 1)⌉-th smallest
    score; below 0.5 the mirror image, with the point at −∞: the ⌊p·(n + 1)⌋-th smallest. A
    level the scores cannot support gives ±∞. ``weights`` default to equal.
    """
    s = scores.to(torch.float64).reshape(-1)
    n = s.shape[0]
    if n == 0:
        return torch.tensor([(-math.inf if p < 0.5 else math.inf) for p in probs],
                            dtype=torch.float64)
    w = torch.ones_like(s) if weights is None else weights.to(torch.float64).reshape(-1)
    order = torch.argsort(s)
    s, w = s[order], w[order]
    total = float(w.sum()) * (n + 1) / n  # the test point's mass is the mean weight
    below = torch.cumsum(w, 0)  # W(score ≤ s_j)
    above = torch.flip(torch.cumsum(torch.flip(w, [0]), 0), [0])  # W(score ≥ s_j)
    out = []
    for p in probs:
        if p >= 0.5:
            # smallest s_j with W(≤ s_j) ≥ p·total (a small slack for float sums)
            j = int(torch.searchsorted(below, torch.tensor(p * total * (1 - 1e-12),
                                                           dtype=torch.float64)))
            out.append(float(s[j]) if j < n else math.inf)
        else:
            # largest s_j with W(≥ s_j) ≥ (1 − p)·total
            ok = torch.nonzero(above >= (1 - p) * total * (1 - 1e-12)).flatten()
            out.append(float(s[int(ok[-1])]) if len(ok) else -math.inf)
    return torch.tensor(out, dtype=torch.float64)


def conformal_grid(scores: torch.Tensor, weights: torch.Tensor | None = None,
                   probs: Sequence[float] = PROBS) -> torch.Tensor:
    """``conformal_quantiles`` at ``probs`` (P,), with every probability the scores are too few
    for (an infinite quantile) continued as a normal tail from the outermost finite one on its
    side: Q(p) = Q(p0)·Φ⁻¹(p)/Φ⁻¹(p0). NB: that tail is an assumption, not a measurement."""
    q = conformal_quantiles(scores, weights, probs)
    p = torch.tensor(probs, dtype=torch.float64)
    normal = torch.special.ndtri(p)
    finite = torch.isfinite(q)
    for side in (p < 0.5, p > 0.5):
        ok = torch.nonzero(side & finite).flatten()
        if not len(ok):
            raise ValueError(f"{len(scores)} scores are too few for any quantile on one side "
                             f"of the median")
        outer = int(ok[0]) if bool(side[0]) else int(ok[-1])
        scale = float(q[outer] / normal[outer]) if float(normal[outer]) else 0.0
        q = torch.where(side & ~finite, normal * max(scale, 0.0), q)
    return q


def quantile_at(log_q: torch.Tensor, p: float, probs: Sequence[float] = PROBS) -> torch.Tensor:
    """Column p of a (..., P) grid of quantiles at ``probs``, linear between grid points."""
    j = bisect.bisect_left(list(probs), p)
    if j < len(probs) and abs(probs[j] - p) < 1e-12:
        return log_q[..., j]
    if j == 0 or j == len(probs):
        raise ValueError(f"probability {p} lies outside the stored grid "
                         f"[{probs[0]}, {probs[-1]}]")
    t = (p - probs[j - 1]) / (probs[j] - probs[j - 1])
    return log_q[..., j - 1] * (1 - t) + log_q[..., j] * t


def bounds(time_ms: torch.Tensor, log_q: torch.Tensor, level: float,
           floor_ms: torch.Tensor | None = None,
           probs: Sequence[float] = PROBS) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) of each predicted time (N,) at ``level`` from its residual quantiles (N, P).

    lo ≤ time ≤ hi always (a bucket whose quantiles both sit above zero still keeps the
    prediction inside), and lo never falls below the physical floor where one is given.
    """
    a = 1.0 - check_level(level)
    q_lo = quantile_at(log_q, a / 2, probs).clamp(max=0.0)  # (N,)
    q_hi = quantile_at(log_q, 1.0 - a / 2, probs).clamp(min=0.0)
    lo = time_ms * torch.exp(q_lo)
    if floor_ms is not None:
        lo = torch.minimum(torch.maximum(lo, floor_ms), time_ms)
    return lo, time_ms * torch.exp(q_hi)


def spread_of(log_q: torch.Tensor, probs: Sequence[float] = PROBS
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each GEMM's (median, normal-equivalent sd) of its log residual, (N,) each: the median
    and (Q(0.9) − Q(0.1)) / (2·1.2816)."""
    med = quantile_at(log_q, 0.5, probs)
    sd = (quantile_at(log_q, 0.9, probs) - quantile_at(log_q, 0.1, probs)) / (2 * _Z80)
    return med, sd


def comonotonic_sum(time_ms: torch.Tensor, log_q: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """One term for a sum of fully correlated times (M,) with residual quantiles (M, P): its
    time (1,) and quantiles (1, P). Quantiles of comonotonic variables add, so the sum's
    quantile at p is Σ t_i·e^Q_i(p), and its log residual quantile log(Σ t_i·e^Q_i(p) / Σ t_i).

    >>> t = torch.tensor([1.0, 3.0]); q = torch.log(torch.tensor([[0.5, 2.0], [1.0, 1.0]]))
    >>> [round(float(v), 4) for v in torch.exp(comonotonic_sum(t, q)[1][0])]
    [0.875, 1.25]
    """
    total = time_ms.to(torch.float64).sum()
    summed = (time_ms.to(torch.float64).unsqueeze(1) * torch.exp(log_q)).sum(0)  # (P,)
    return total.reshape(1), torch.log(summed / total).unsqueeze(0)


def center_and_sigma(time_ms: torch.Tensor, log_q: torch.Tensor, other_ms: float | torch.Tensor,
                     level_sigma: float, probs: Sequence[float] = PROBS) -> tuple[float, float]:
    """(μ, σ) of the log residual of a sum of GEMMs (N,) plus ``other_ms``: μ the shift their
    median residuals give the total, σ² = level_sigma² + Σ_i w_i² s_i² with w_i each GEMM's
    share of the total and s_i its residual's sd (``spread_of``)."""
    total = float(time_ms.sum()) + float(other_ms)
    if not len(time_ms):
        return 0.0, float(level_sigma)
    med, sd = spread_of(log_q, probs)
    w = time_ms / total  # (N,) each GEMM's share of the time
    mu = math.log((float((time_ms * torch.exp(med)).sum()) + float(other_ms)) / total)
    return mu, math.sqrt(level_sigma ** 2 + float((w * w * sd * sd).sum()))


def propagate(time_ms: torch.Tensor, log_q: torch.Tensor, other_ms: float | torch.Tensor,
              level_sigma: float, total_z: torch.Tensor, level: float,
              probs: Sequence[float] = PROBS) -> tuple[float, float]:
    """(lo, hi) of a sum of GEMMs (N,) with residual quantiles (N, P), plus ``other_ms`` of
    non-GEMM ops, at ``level``: a shared level term of sd ``level_sigma`` and independent
    per-GEMM terms (module docstring), scaled by the whole-model quantiles ``total_z`` (P,)."""
    a = 1.0 - check_level(level)
    total = float(time_ms.sum()) + float(other_ms)
    if total <= 0.0:
        return 0.0, 0.0
    mu, sigma = center_and_sigma(time_ms, log_q, other_ms, level_sigma, probs)
    z = total_z.to(torch.float64)
    z_lo = min(float(quantile_at(z, a / 2, probs)), 0.0)
    z_hi = max(float(quantile_at(z, 1.0 - a / 2, probs)), 0.0)
    lo = total * math.exp(min(mu + z_lo * sigma, 0.0))
    hi = total * math.exp(max(mu + z_hi * sigma, 0.0))
    return lo, hi


# ------------------------------------------------------------------------------ calibration


def resolve_bucket(index: Mapping[tuple[Any, ...], int], key: Sequence[Any]) -> int | None:
    """The bucket serving ``key`` (novelty first, then the other KEY_FIELDS; None where a field
    is unknown): its finest bucket in ``index``, dropping fields from the end no further than
    FALLBACK allows, then the parent class's; None where nothing serves."""
    novelty = key[0]
    fields_known = list(key[1:])
    while fields_known and fields_known[-1] is None:
        fields_known.pop()
    min_keep, parent = FALLBACK[novelty]
    for keep in range(len(fields_known) + 1, min_keep - 1, -1):
        probe = (novelty, *fields_known[: keep - 1]) + (None,) * (len(KEY_FIELDS) - keep)
        if probe in index:
            return index[probe]
    return None if parent is None else resolve_bucket(index, (parent, *key[1:]))



@dataclass(frozen=True)
class IntervalCalibration:
    """Fitted interval quantiles: a (B, P) grid of log-residual quantiles, one row per bucket,
    the bucket each case falls into (after fallback), the shared level term per novelty and the
    whole-model quantiles ``total_z`` (P,). Written by ``train/intervals.py``."""

    probs: tuple[float, ...]
    buckets: tuple[Mapping[str, Any], ...]  # the key fields (None where dropped) and counts
    log_q: torch.Tensor = field(compare=False)  # (B, P)
    level_sigma: Mapping[str, float]
    total_z: torch.Tensor = field(compare=False)  # (P,)
    predictor: Mapping[str, str] = field(default_factory=dict)  # {"name", "version"}
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        index: dict[tuple[Any, ...], int] = {}
        for i, b in enumerate(self.buckets):
            index[tuple(b.get(f) for f in KEY_FIELDS)] = i
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_dense", {})

    def _lookup(self, novelty: str) -> torch.Tensor:
        """A dense (E, Pr, R, S) tensor of bucket rows for one novelty, fallback resolved."""
        dense = self._dense.get(novelty)  # type: ignore[attr-defined]
        if dense is not None:
            return dense
        index: dict[tuple[Any, ...], int] = self._index  # type: ignore[attr-defined]
        shape = (len(ENGINE_CLASSES), len(PRECISIONS), len(REGIMES), len(SIZES))
        out = torch.full(shape, -1, dtype=torch.long)
        for e, eng in enumerate(ENGINE_CLASSES):
            for p, prec in enumerate(PRECISIONS):
                for r, reg in enumerate(REGIMES):
                    for s, size in enumerate(SIZES):
                        found = resolve_bucket(index, (novelty, eng, prec, reg, size))
                        out[e, p, r, s] = -1 if found is None else found
        if bool((out < 0).any()):
            raise ValueError(f"interval calibration has no bucket for novelty {novelty!r}; "
                             f"it has: {sorted({b['novelty'] for b in self.buckets})}")
        self._dense[novelty] = out  # type: ignore[attr-defined]
        return out

    def gemm_log_quantiles(self, cases: GemmCases, novelty: str) -> torch.Tensor:
        """Each GEMM's log-residual quantiles at ``probs``, (N, P)."""
        if novelty not in NOVELTY:
            raise ValueError(f"novelty must be one of {', '.join(NOVELTY)}, got {novelty!r}")
        rows = self._lookup(novelty)[cases.engine, cases.precision, cases.regime, cases.size]
        return self.log_q[rows]  # (N, P)

    def has(self, novelty: str) -> bool:
        return any(b["novelty"] == novelty for b in self.buckets)

    # ---------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "method": ("weighted split-conformal quantiles of log(measured / predicted) per "
                       "bucket, each GPU weighing the same; whole models: a shared level term "
                       "plus independent per-GEMM terms, normalized scores conformal"),
            "predictor": dict(self.predictor),
            "probs": list(self.probs),
            "key_fields": list(KEY_FIELDS),
            "buckets": [{**dict(b), "log_q": [round(float(v), 5) for v in row]}
                        for b, row in zip(self.buckets, self.log_q)],
            "level_sigma": {k: round(float(v), 5) for k, v in self.level_sigma.items()},
            "total_z": [round(float(v), 5) for v in self.total_z],
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> IntervalCalibration:
        check_format(doc, "gemm_intervals", VERSION)
        probs = tuple(float(p) for p in doc["probs"])
        buckets = tuple({f: b.get(f) for f in (*KEY_FIELDS, "rows", "gpus", "chips")}
                        for b in doc["buckets"])
        log_q = torch.tensor([b["log_q"] for b in doc["buckets"]], dtype=torch.float64)
        total_z = torch.tensor(doc["total_z"], dtype=torch.float64)
        if log_q.shape != (len(buckets), len(probs)) or total_z.shape != (len(probs),):
            raise ValueError(f"quantile grids do not match the {len(probs)} probabilities")
        if not (torch.isfinite(log_q).all() and torch.isfinite(total_z).all()):
            raise ValueError("quantile grids hold non-finite values")
        for b in buckets:
            for f, names in zip(KEY_FIELDS, (NOVELTY, ENGINE_CLASSES, PRECISIONS, REGIMES,
                                             SIZES)):
                if b[f] is not None and b[f] not in names:
                    raise ValueError(f"bucket field {f} = {b[f]!r}; known: {', '.join(names)}")
        return cls(probs=probs, buckets=buckets, log_q=log_q,
                   level_sigma={k: float(v) for k, v in doc["level_sigma"].items()},
                   total_z=total_z, predictor=dict(doc.get("predictor", {})),
                   metadata=dict(doc.get("metadata", {})))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> IntervalCalibration:
        """Read a calibration written by ``save``; a bad file raises a ValueError naming it."""
        return read_fitted(path, "interval calibration", FORMAT, cls.from_dict)


def default_calibration() -> IntervalCalibration | None:
    """The shipped calibration of the hybrid predictor's intervals (None where absent)."""
    if not shipped_path("gemm_intervals").is_file():
        return None
    return load_shipped("gemm_intervals", IntervalCalibration.from_dict)


# ------------------------------------------------------------------------------ novelty


def novelty_of(device: DeviceSpec, trained_gpus: Sequence[str] | None) -> str:
    """How new ``device`` is to a predictor fitted on ``trained_gpus`` (catalog ids):
    ``chip_seen`` where a board of its chip was in the fit, ``family_seen`` where another
    chip of its kernel-library family was, else ``family_unseen``. A device the catalog does
    not hold as given (a spec built by hand or read from a file) is ``family_unseen``: only
    its datasheet is known."""
    try:
        listed = get_device(device.id) == device
    except ValueError:
        listed = False
    if not listed or not trained_gpus:
        return "family_unseen"
    trained = [get_device(g) for g in trained_gpus]
    chip = device.chip or device.id
    if any((t.chip or t.id) == chip for t in trained):
        return "chip_seen"
    family = library_family(device)
    if family != "other" and any(library_family(t) == family for t in trained):
        return "family_seen"
    return "family_unseen"


@dataclass(frozen=True)
class ReportUncertainty:
    """What a report needs to give an interval at any level: each GEMM's log-residual
    quantiles (N, P), their physical floors (N,), the shared level term and the whole-model
    quantiles, and which novelty class they come from."""

    novelty: str
    gemm_log_q: torch.Tensor = field(compare=False)  # (N, P)
    floor_ms: torch.Tensor = field(compare=False)  # (N,)
    level_sigma: float
    total_z: torch.Tensor = field(compare=False)  # (P,)
    probs: tuple[float, ...] = PROBS
    # the fused-attention kernels' own calibration, where the device runs them (None: their
    # time enters a total as exact)
    attention: AttentionIntervals | None = field(default=None, compare=False)

    def gemm_bounds(self, time_ms: torch.Tensor, level: float,
                    index: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(lo, hi) of the GEMMs at ``index`` (all by default) with times ``time_ms``."""
        q = self.gemm_log_q if index is None else self.gemm_log_q[index]
        floor = self.floor_ms if index is None else self.floor_ms[index]
        return bounds(time_ms, q, level, floor, self.probs)

    def total_bounds(self, time_ms: torch.Tensor, other_ms: float, level: float,
                     index: torch.Tensor | None = None,
                     attention_ms: torch.Tensor | None = None,
                     attention_decode: torch.Tensor | None = None) -> tuple[float, float]:
        """(lo, hi) of the GEMMs at ``index`` (times ``time_ms``) plus ``other_ms`` of other
        ops, and fused-attention kernels of times ``attention_ms`` (M,) and phases
        ``attention_decode`` (M,), which ``other_ms`` leaves out: with ``attention``, one term
        of their summed time, its quantiles those of comonotonic calls (``comonotonic_sum``:
        one kernel on one GPU errs the same way in every layer), beside the GEMMs'; without
        it, their time counts as exact."""
        q = self.gemm_log_q if index is None else self.gemm_log_q[index]
        t = time_ms.to(torch.float64)
        if attention_ms is not None and len(attention_ms) and float(attention_ms.sum()) > 0:
            att = attention_ms.to(torch.float64)
            if self.attention is None:
                other_ms = other_ms + float(att.sum())
            elif tuple(self.attention.probs) != tuple(self.probs):
                raise ValueError("the attention intervals' probabilities differ from the GEMM "
                                 "calibration's; refit one of them on PROBS")
            else:
                decode = (torch.zeros_like(att) if attention_decode is None
                          else attention_decode)
                a_t, a_q = comonotonic_sum(att, self.attention.log_quantiles(att, decode))
                t, q = torch.cat([t, a_t]), torch.cat([q.to(torch.float64), a_q])
        return propagate(t, q, other_ms, self.level_sigma, self.total_z, level, self.probs)


def own_calibration(log_ratio: torch.Tensor, total_z: torch.Tensor | None = None,
                    probs: Sequence[float] = PROBS,
                    metadata: Mapping[str, Any] | None = None) -> IntervalCalibration:
    """A device's own interval calibration from its cross-validated residuals
    log(measured / predicted) (n,): one ``calibrated`` bucket, quantiles from ``conformal_grid``
    (a normal tail where the rows are too few), a level term of sqrt(median² + sd²/n) (how far
    the held-out rows' level sits off, with its uncertainty), and the whole-model quantiles
    ``total_z`` of the shipped calibration (standard normal ones where none ships)."""
    r = log_ratio.to(torch.float64).reshape(-1)
    r = r[torch.isfinite(r)]
    if len(r) < 2:
        raise ValueError(f"{len(r)} held-out residuals: an interval needs at least 2")
    q = conformal_grid(r, None, probs)
    sigma = math.sqrt(float(r.median()) ** 2 + float(r.var()) / len(r))
    z = torch.special.ndtri(torch.tensor(probs, dtype=torch.float64)) if total_z is None \
        else total_z
    bucket = {**{f: None for f in KEY_FIELDS}, "novelty": "calibrated", "rows": len(r),
              "gpus": 1, "chips": 1}
    return IntervalCalibration(
        probs=tuple(probs), buckets=(bucket,), log_q=q.unsqueeze(0),
        level_sigma={"calibrated": sigma}, total_z=z,
        metadata={**dict(metadata or {}), "whole_model_quantiles":
                  "standard normal (no shipped calibration)" if total_z is None else "shipped"})


def _source(device: DeviceSpec, predictor: Any, novelty: str | None
            ) -> tuple[IntervalCalibration, str] | None:
    """The calibration and novelty class for ``predictor`` on ``device``: a calibration
    profile's own residuals where the predictor carries them, else the shipped calibration when
    it was made for this predictor (its name and version), else None."""
    own = getattr(predictor, "own_intervals_", None)
    if isinstance(own, IntervalCalibration) and novelty in (None, "calibrated"):
        return own, "calibrated"
    cal = default_calibration()
    if cal is None:
        return None
    made_for = (cal.predictor.get("name"), cal.predictor.get("version"))
    if made_for != (getattr(predictor, "name", None), str(getattr(predictor, "version", ""))):
        return None  # calibrated on another predictor's residuals: no honest interval
    if novelty is None:
        trained = (getattr(predictor, "metadata_", None) or {}).get("trained_gpus")
        novelty = novelty_of(device, trained)
    if not cal.has(novelty):
        raise ValueError(f"the interval calibration has no {novelty!r} class; it has: "
                         f"{', '.join(sorted({b['novelty'] for b in cal.buckets}))}")
    return cal, novelty


def uncertainty_of(gemms: GemmBatch, device: DeviceSpec, predictor: Any,
                   novelty: str | None = None) -> ReportUncertainty | None:
    """The intervals' inputs for GEMMs priced by ``predictor`` on ``device``; None where no
    calibration covers that predictor (the roofline, an ablation, other weights' versions).
    ``novelty`` overrides the class ``novelty_of`` finds (a device from a spec file is
    ``family_unseen`` whatever its id)."""
    found = _source(device, predictor, novelty)
    if found is None:
        return None
    cal, cls = found
    cases = gemm_cases(gemms, device)
    return ReportUncertainty(novelty=cls, gemm_log_q=cal.gemm_log_quantiles(cases, cls),
                             floor_ms=cases.floor_ms,
                             level_sigma=float(cal.level_sigma[cls]), total_z=cal.total_z,
                             probs=cal.probs)


def gemm_interval(gemms: GemmBatch, device: DeviceSpec, predictor: Any, time_ms: torch.Tensor
                  ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(lo, hi) at ``DEFAULT_LEVEL`` of GEMMs that ``predictor`` priced at ``time_ms`` (N,) on
    ``device``, (N,) each; (None, None) where no calibration covers that predictor
    (``uncertainty_of``)."""
    unc = uncertainty_of(gemms, device, predictor)
    if unc is None:
        return None, None
    return unc.gemm_bounds(time_ms.to(torch.float64), DEFAULT_LEVEL)
