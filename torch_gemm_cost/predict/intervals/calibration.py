"""The GEMM interval calibration: its buckets' quantiles and how a case finds its bucket, read
from and written to its file, the shipped one, and a device's own from its residuals."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...suggest import check_choice
from ..base import read_fitted
from ..registry import SHIPPED, check_format, load_shipped, shipped_path
from .cases import ENGINE_CLASSES, NOVELTY, PRECISIONS, REGIMES, SIZES, UNLIKE, GemmCases
from .conformal import conformal_grid
from .levels import PROBS

FORMAT = SHIPPED["gemm_intervals"].format
VERSION = 1  # of the calibration files this module reads and writes

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
    **{u: (1, "family_unseen") for u in UNLIKE},
}


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
    whole-model quantiles ``total_z`` (P,). Written by ``train/intervals.py``.

    ``stretch`` holds, per class unlike any GPU in the fit (``UNLIKE``), the factor its
    (family-unseen) quantiles are stretched by about their median: the stretch the worst-covered
    held-out GPU needed (``train.interval_stretch``). A class absent from it is not stretched."""

    probs: tuple[float, ...]
    buckets: tuple[Mapping[str, Any], ...]  # the key fields (None where dropped) and counts
    log_q: torch.Tensor = field(compare=False)  # (B, P)
    level_sigma: Mapping[str, float]
    total_z: torch.Tensor = field(compare=False)  # (P,)
    predictor: Mapping[str, str] = field(default_factory=dict)  # {"name", "version"}
    stretch: Mapping[str, float] = field(default_factory=dict)
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
        check_choice("novelty", novelty, NOVELTY)
        rows = self._lookup(novelty)[cases.engine, cases.precision, cases.regime, cases.size]
        q = self.log_q[rows]  # (N, P)
        s = float(self.stretch.get(novelty, 1.0))
        if s == 1.0:
            return q
        median = q[:, self.probs.index(0.5)].unsqueeze(1)  # (N, 1)
        return median + s * (q - median)

    def level_sigma_of(self, novelty: str) -> float:
        """The shared level term of ``novelty``: its own, else (a class unlike any in the fit)
        its parent class's times its stretch."""
        if novelty in self.level_sigma:
            return float(self.level_sigma[novelty])
        parent = FALLBACK[check_choice("novelty", novelty, NOVELTY)][1]
        if parent is None:
            raise ValueError(f"the calibration has no level term for {novelty!r}; it has: "
                             f"{', '.join(sorted(self.level_sigma))}")
        return float(self.stretch.get(novelty, 1.0)) * self.level_sigma_of(parent)

    def has(self, novelty: str) -> bool:
        """Whether the calibration serves ``novelty``: buckets of its own, or (a class unlike
        any in the fit) its parent class's buckets, stretched where ``stretch`` says."""
        if any(b["novelty"] == novelty for b in self.buckets):
            return True
        parent = FALLBACK[novelty][1]
        return novelty in UNLIKE and parent is not None and self.has(parent)

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
            "stretch": {k: round(float(v), 5) for k, v in self.stretch.items()},
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
        stretch = {k: float(v) for k, v in doc.get("stretch", {}).items()}
        for k, v in stretch.items():
            check_choice("stretched novelty", k, UNLIKE)
            if not (math.isfinite(v) and v >= 1.0):
                raise ValueError(f"stretch of {k} = {v}: it must be a finite factor >= 1")
        return cls(probs=probs, buckets=buckets, log_q=log_q,
                   level_sigma={k: float(v) for k, v in doc["level_sigma"].items()},
                   total_z=total_z, predictor=dict(doc.get("predictor", {})), stretch=stretch,
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
