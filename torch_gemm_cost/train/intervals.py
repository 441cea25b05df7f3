"""Fit the interval calibration (``predict/intervals.py``) from held-out residuals.

    python -m torch_gemm_cost.train.intervals --data ../shared/data \\
        --gemm-predictions LOCO.pt --board-predictions LOBO.pt --whole-models E2E.json \\
        --out torch_gemm_cost/data/gemm_intervals.json

Inputs, all held out, never in-sample:

- the hybrid's leave-one-chip-out prediction of every measured GEMM
  (``benchmarks/accuracy.py --save-predictions``, or computed here when no file is given);
  each GPU's residuals are ``family_seen`` where another chip of its kernel-library family
  stayed in that fit, else ``family_unseen``;
- leave-one-board-out predictions of the boards whose chip has other boards measured (three
  A100s, two V100s): a board unseen whose chip was seen, the ``chip_seen`` class (computed here
  when no file is given, one fit per board);
- whole models, each priced with its chip held out of the GEMM and op-cost fits
  (``benchmarks/intervals.py`` writes them): they set the whole-model quantiles.

Each whole model's normalized score is taken with the GEMM calibration fitted without its own
chip, so those scores are held out too.

The classes unlike any GPU in the fit (a vendor generation, a board class, a spec file) take
the family-unseen quantiles stretched by the largest stretch any chip-held-out GPU needed
(``interval_stretch``). ``--update CAL --gemm-predictions LOCO.pt`` refits that stretch alone,
keeping CAL's buckets, level terms and whole-model quantiles: no board predictions or whole
models are needed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import platform
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch

from ..measured.gemm import DEFAULT_OWN_DIRS, MeasuredGemms, load_all_gemms
from ..predict.gemm.hybrid import HybridPredictor
from ..predict.gemm.roofline import impossible_rows
from ..predict.intervals import (
    ENGINE_CLASSES,
    KEY_FIELDS,
    NOVELTY,
    PRECISIONS,
    PROBS,
    REGIMES,
    SIZES,
    UNLIKE,
    GemmCases,
    IntervalCalibration,
    center_and_sigma,
    conformal_grid,
    conformal_quantiles,
    gemm_cases,
    novelty_of,
    quantile_at,
    resolve_bucket,
)
from ..suggest import check_choice
from .gemm import chip_of, leave_one_chip_out
from .interval_stretch import unlike_stretch

__all__ = [
    "MIN_CHIPS",
    "RAW_PROBS",
    "GemmPart",
    "Residuals",
    "WholeModelRow",
    "board_predictions_of",
    "fit_gemm_part",
    "fit_interval_calibration",
    "fit_stretch",
    "fit_total_z",
    "gemm_residuals",
    "group_weights",
    "held_out_residuals",
    "load_predictions",
    "load_whole_models",
    "main",
    "mapped_probs",
    "remap",
    "tail_map",
    "update_stretch",
    "whole_model_scores",
    "with_stretch",
]

log = logging.getLogger(__name__)

# a bucket needs residuals of this many chips to stand on its own (else a coarser one serves)
MIN_CHIPS: dict[str, int] = {"chip_seen": 2, "family_seen": 3, "family_unseen": 3,
                             "calibrated": 1}
_FIELD_NAMES = (NOVELTY, ENGINE_CLASSES, PRECISIONS, REGIMES, SIZES)


@dataclass(frozen=True)
class Residuals:
    """Held-out log residuals r = log(measured / predicted) of GEMMs, (M,), with their cases,
    GPU, chip and novelty class (an index into NOVELTY)."""

    log_ratio: torch.Tensor
    predicted_ms: torch.Tensor  # (M,)
    cases: GemmCases
    gpu: tuple[str, ...]
    chip: tuple[str, ...]
    novelty: torch.Tensor  # (M,) long

    def __len__(self) -> int:
        return int(self.log_ratio.shape[0])

    def select(self, mask: torch.Tensor) -> Residuals:
        idx = torch.nonzero(mask).flatten()
        pos = idx.tolist()
        return Residuals(
            log_ratio=self.log_ratio[idx], predicted_ms=self.predicted_ms[idx],
            cases=GemmCases(*(getattr(self.cases, f.name)[idx] for f in fields(GemmCases))),
            gpu=tuple(self.gpu[i] for i in pos), chip=tuple(self.chip[i] for i in pos),
            novelty=self.novelty[idx])

    @classmethod
    def concat(cls, parts: Sequence[Residuals]) -> Residuals:
        return cls(log_ratio=torch.cat([p.log_ratio for p in parts]),
                   predicted_ms=torch.cat([p.predicted_ms for p in parts]),
                   cases=GemmCases.concat([p.cases for p in parts]),
                   gpu=sum((p.gpu for p in parts), ()), chip=sum((p.chip for p in parts), ()),
                   novelty=torch.cat([p.novelty for p in parts]))

    def without_chips(self, chips: Iterable[str]) -> Residuals:
        out = set(chips)
        return self.select(torch.tensor([c not in out for c in self.chip], dtype=torch.bool))


def gemm_residuals(measured: MeasuredGemms, pred_ms: torch.Tensor, held_out: str = "chip"
                   ) -> Residuals:
    """The residuals of held-out predictions ``pred_ms`` (N,) of ``measured``'s rows (NaN rows
    skipped). ``held_out`` says what each row's fit left out: ``"chip"`` (every board of its
    chip: ``family_seen`` or ``family_unseen``) or ``"board"`` (that board alone: ``chip_seen``
    where another board of its chip was measured, else as for a chip)."""
    check_choice("held_out", held_out, ("chip", "board"))
    if pred_ms.shape != (len(measured),):
        raise ValueError(f"predictions have shape {tuple(pred_ms.shape)}, the measured rows "
                         f"({len(measured)},): they must be the same rows in the same order")
    keep = torch.isfinite(pred_ms) & (pred_ms > 0)
    gpus = sorted(set(measured.gpu))
    chips = {g: chip_of(g) for g in gpus}
    parts = []
    for g in gpus:
        rows = measured.mask(gpu=g) & keep
        if not bool(rows.any()):
            continue
        trained = [h for h in gpus if (h != g if held_out == "board" else chips[h] != chips[g])]
        device = measured.device(g)
        cls = novelty_of(device, trained)
        sub = measured.select(rows)
        n = len(sub)
        parts.append(Residuals(
            log_ratio=torch.log(sub.latency_ms / pred_ms[rows]), predicted_ms=pred_ms[rows],
            cases=gemm_cases(sub.gemms, device), gpu=(g,) * n, chip=(chips[g],) * n,
            novelty=torch.full((n,), NOVELTY.index(cls), dtype=torch.long)))
    if not parts:
        raise ValueError("no finite held-out prediction to take residuals from")
    return Residuals.concat(parts)


def group_weights(gpu_index: torch.Tensor) -> torch.Tensor:
    """Weights (M,) under which each GPU of a group weighs the same: 1 / (its rows · GPUs).

    >>> group_weights(torch.tensor([0, 0, 0, 1])).tolist()  # 3 rows of one GPU, 1 of another
    [0.16666666666666666, 0.16666666666666666, 0.16666666666666666, 0.5]
    """
    counts = torch.bincount(gpu_index).to(torch.float64)
    gpus = int((counts > 0).sum())
    return 1.0 / (counts[gpu_index] * gpus)


@dataclass(frozen=True)
class GemmPart:
    """The GEMM half of a calibration: buckets (key fields, None where dropped, and counts),
    their (B, P) quantiles, and the level term per novelty."""

    buckets: tuple[dict[str, Any], ...]
    log_q: torch.Tensor
    level_sigma: dict[str, float]

    def index(self) -> dict[tuple[Any, ...], int]:
        return {tuple(b[f] for f in KEY_FIELDS): i for i, b in enumerate(self.buckets)}

    def rows_for(self, novelty: str, cases: GemmCases) -> torch.Tensor:
        """The bucket of each case (M,), fallback resolved."""
        index = self.index()
        codes = torch.stack([cases.engine, cases.precision, cases.regime, cases.size], 1)
        uniq, inv = torch.unique(codes, dim=0, return_inverse=True)
        found = []
        for e, p, r, s in uniq.tolist():
            row = resolve_bucket(index, (novelty, ENGINE_CLASSES[e], PRECISIONS[p], REGIMES[r],
                                         SIZES[s]))
            if row is None:
                raise ValueError(f"no {novelty} bucket serves {ENGINE_CLASSES[e]}, "
                                 f"{PRECISIONS[p]}, {REGIMES[r]}, {SIZES[s]}")
            found.append(row)
        return torch.tensor(found, dtype=torch.long)[inv]


def _codes(res: Residuals, novelty: torch.Tensor, keep: int) -> torch.Tensor:
    """One int64 code per row for its first ``keep`` key fields (novelty first)."""
    cols = [novelty, res.cases.engine, res.cases.precision, res.cases.regime, res.cases.size]
    code = torch.zeros(len(res), dtype=torch.long)
    for col, names in zip(cols[:keep], _FIELD_NAMES[:keep]):
        code = code * len(names) + col
    return code


def _decode(code: int, keep: int) -> dict[str, Any]:
    out: list[Any] = []
    for names in reversed(_FIELD_NAMES[:keep]):
        out.append(names[code % len(names)])
        code //= len(names)
    values = list(reversed(out)) + [None] * (len(KEY_FIELDS) - keep)
    return dict(zip(KEY_FIELDS, values))


def _buckets_of(res: Residuals, novelty_label: str, min_chips: int,
                probs: Sequence[float]) -> dict[tuple[Any, ...], tuple[dict[str, Any],
                                                                     torch.Tensor]]:
    """Every bucket of ``res`` (all labelled ``novelty_label``) at every key depth whose
    residuals come from at least ``min_chips`` chips (any number at the novelty-only depth)
    and whose quantiles are all finite."""
    out: dict[tuple[Any, ...], tuple[dict[str, Any], torch.Tensor]] = {}
    if not len(res):
        return out
    label = torch.full((len(res),), NOVELTY.index(novelty_label), dtype=torch.long)
    gpu_names = sorted(set(res.gpu))
    gpu_index = torch.tensor([gpu_names.index(g) for g in res.gpu])
    chip_names = sorted(set(res.chip))
    chip_index = torch.tensor([chip_names.index(c) for c in res.chip])
    for keep in range(len(KEY_FIELDS), 0, -1):
        code = _codes(res, label, keep)
        order = torch.argsort(code, stable=True)
        uniq, counts = torch.unique_consecutive(code[order], return_counts=True)
        start = 0
        for u, c in zip(uniq.tolist(), counts.tolist()):
            rows = order[start:start + c]
            start += c
            chips = len(torch.unique(chip_index[rows]))
            if keep > 1 and chips < min_chips:
                continue
            g = gpu_index[rows]
            _, g_local = torch.unique(g, return_inverse=True)
            q = conformal_quantiles(res.log_ratio[rows], group_weights(g_local), probs)
            if not bool(torch.isfinite(q).all()):
                continue
            key = _decode(u, keep)
            meta = {**key, "rows": c, "gpus": len(torch.unique(g)), "chips": chips}
            out[tuple(key[f] for f in KEY_FIELDS)] = (meta, q)
    return out


def _envelope(q: torch.Tensor, wider: torch.Tensor, probs: Sequence[float]) -> torch.Tensor:
    """At each probability the quantile further from the middle: min below 0.5, max above."""
    low = torch.tensor([p < 0.5 for p in probs])
    return torch.where(low, torch.minimum(q, wider), torch.maximum(q, wider))


def _level_sigma(res: Residuals, part_rows: torch.Tensor, log_q: torch.Tensor,
                 probs: Sequence[float], min_rows: int = 30) -> float:
    """The sd of the shared level term from residuals: each (GPU, engine, precision) group's
    median residual about its buckets' medians is one GPU's level there; σ² is the mean
    square of the levels, each GPU weighing the same."""
    if not len(res):
        return 0.0
    med = log_q[part_rows, list(probs).index(0.5)]
    d = res.log_ratio - med
    groups: dict[tuple[str, int, int], list[int]] = {}
    for i, key in enumerate(zip(res.gpu, res.cases.engine.tolist(),
                                res.cases.precision.tolist())):
        groups.setdefault(key, []).append(i)
    per_gpu: dict[str, list[float]] = {}
    for (gpu, _, _), idx in groups.items():
        if len(idx) >= min_rows:
            per_gpu.setdefault(gpu, []).append(float(torch.median(d[torch.tensor(idx)])) ** 2)
    if not per_gpu:
        return 0.0
    return math.sqrt(sum(sum(v) / len(v) for v in per_gpu.values()) / len(per_gpu))


def fit_gemm_part(chip_out: Residuals, board_out: Residuals | None = None, *,
                  probs: Sequence[float] = PROBS,
                  min_chips: Mapping[str, int] = MIN_CHIPS) -> GemmPart:
    """Buckets and level terms from chip-held-out residuals (``family_seen`` and
    ``family_unseen``) and board-held-out ones (``chip_seen``).

    ``family_seen`` holds the GPUs whose family stayed in the fit, those of a vendor generation
    or board class it lacked among them. ``family_unseen`` pools every chip-held-out residual
    (each chip was unseen to its own fit) and takes at each bucket the wider of that and the
    family-seen quantiles, so a family never seen always gets the widest interval; its level
    term is the larger of the two too.
    """
    # a GPU unlike the fit whose family was in it (a new generation, a new board class) counts
    # in the family-seen buckets: they are fitted on every GPU whose family stayed in
    seen = chip_out.select(torch.isin(chip_out.novelty, torch.tensor(
        [NOVELTY.index(n) for n in ("family_seen", "generation_unseen", "board_unseen")])))
    found: dict[tuple[Any, ...], tuple[dict[str, Any], torch.Tensor]] = {}
    found.update(_buckets_of(seen, "family_seen", min_chips["family_seen"], probs))
    seen_index = {k: i for i, k in enumerate(found)}
    seen_q = [q for _, q in found.values()]
    for key, (meta, q) in _buckets_of(chip_out, "family_unseen", min_chips["family_unseen"],
                                      probs).items():
        serving = resolve_bucket(seen_index, ("family_seen", *key[1:]))
        if serving is not None:
            q = _envelope(q, seen_q[serving], probs)
        found[key] = (meta, q)
    chip_seen = None
    if board_out is not None:
        chip_seen = board_out.select(board_out.novelty == NOVELTY.index("chip_seen"))
        found.update(_buckets_of(chip_seen, "chip_seen", min_chips["chip_seen"], probs))
    buckets = tuple(meta for meta, _ in found.values())
    log_q = torch.stack([q for _, q in found.values()]) if found else torch.zeros(0, len(probs))
    part = GemmPart(buckets, log_q, {})
    sigma: dict[str, float] = {}
    for name, res in (("family_seen", seen), ("family_unseen", chip_out),
                      ("chip_seen", chip_seen)):
        if res is None or not len(res) or not any(b["novelty"] == name for b in buckets):
            continue
        sigma[name] = _level_sigma(res, part.rows_for(name, res.cases), log_q, probs)
    if "family_unseen" in sigma and "family_seen" in sigma:
        sigma["family_unseen"] = max(sigma["family_unseen"], sigma["family_seen"])
    return GemmPart(buckets, log_q, sigma)


# ------------------------------------------------------------------------------ whole models


@dataclass(frozen=True)
class WholeModelRow:
    """One whole-model run priced with its chip held out: the measured and predicted totals,
    the non-GEMM ops' time, and each GEMM's predicted time and cases."""

    gpu: str
    chip: str
    novelty: str
    label: str  # model, mode, batch, seq
    measured_ms: float
    other_ms: float
    gemm_ms: torch.Tensor  # (N,)
    cases: GemmCases

    @property
    def predicted_ms(self) -> float:
        return float(self.gemm_ms.sum()) + self.other_ms

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "chip": self.chip, "novelty": self.novelty,
                "label": self.label, "measured_ms": self.measured_ms,
                "other_ms": self.other_ms, "gemm_ms": self.gemm_ms.tolist(),
                **{f: getattr(self.cases, f).tolist()
                   for f in ("engine", "precision", "regime", "size", "floor_ms")}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WholeModelRow:
        long = {f: torch.tensor(d[f], dtype=torch.long)
                for f in ("engine", "precision", "regime", "size")}
        return cls(gpu=d["gpu"], chip=d["chip"], novelty=d["novelty"], label=d["label"],
                   measured_ms=float(d["measured_ms"]), other_ms=float(d["other_ms"]),
                   gemm_ms=torch.tensor(d["gemm_ms"], dtype=torch.float64),
                   cases=GemmCases(**long, floor_ms=torch.tensor(d["floor_ms"],
                                                                 dtype=torch.float64)))


def load_whole_models(path: str | Path) -> list[WholeModelRow]:
    """Whole-model rows written by ``benchmarks/intervals.py`` (JSON)."""
    doc = json.loads(Path(path).read_text())
    return [WholeModelRow.from_dict(r) for r in doc["rows"]]


def whole_model_scores(rows: Sequence[WholeModelRow], part_of: Mapping[str, GemmPart],
                       probs: Sequence[float] = PROBS, stretch: float = 1.0) -> torch.Tensor:
    """Each row's normalized score (log(measured / predicted) − μ) / σ, (n,), with μ and σ
    from ``part_of[row.chip]``, a GEMM calibration its chip was left out of; a row of a class
    unlike any in the fit takes the family-unseen quantiles and level term, ``stretch``ed."""
    out = []
    mid = list(probs).index(0.5)
    for row in rows:
        part = part_of[row.chip]
        q = part.log_q[part.rows_for(row.novelty, row.cases)]
        if row.novelty in UNLIKE:
            median = q[:, mid].unsqueeze(1)  # (N, 1)
            q = median + stretch * (q - median)
            level = stretch * part.level_sigma["family_unseen"]
        else:
            level = part.level_sigma[row.novelty]
        mu, sigma = center_and_sigma(row.gemm_ms, q, row.other_ms, level, probs)
        out.append((math.log(row.measured_ms / row.predicted_ms) - mu) / sigma)
    return torch.tensor(out, dtype=torch.float64)


def fit_total_z(scores: torch.Tensor, gpus: Sequence[str],
                probs: Sequence[float] = PROBS) -> torch.Tensor:
    """Conformal quantiles (P,) of whole-model scores, each GPU weighing the same; where the
    runs are too few for a probability, a normal tail (``conformal_grid``)."""
    names = sorted(set(gpus))
    return conformal_grid(scores, group_weights(torch.tensor([names.index(x) for x in gpus])),
                          probs)


# the raw quantiles reach further into the tails than the shipped grid, so the tail map can
# ask for a raw tail beyond PROBS'
RAW_PROBS: tuple[float, ...] = (0.001, 0.0025, *PROBS, 0.9975, 0.999)


def tail_map(chip_out: Residuals, part_of: Mapping[str, GemmPart],
             probs: Sequence[float] = RAW_PROBS) -> tuple[torch.Tensor, torch.Tensor]:
    """How often held-out GEMMs fall outside each raw quantile: (below (R,), above (R,)), the
    share of rows under the quantile at each p < 0.5 and over it at each p > 0.5 (zero
    elsewhere), each row scored by ``part_of[its chip]``, a calibration its chip was left out
    of, and each GPU weighing the same."""
    below = torch.zeros(len(probs), dtype=torch.float64)
    above = torch.zeros(len(probs), dtype=torch.float64)
    gpus = sorted(set(chip_out.gpu))
    for g in gpus:
        sub = chip_out.select(torch.tensor([x == g for x in chip_out.gpu]))
        part = part_of[sub.chip[0]]
        q = torch.empty(len(sub), len(probs), dtype=torch.float64)
        for nov in torch.unique(sub.novelty).tolist():
            rows = sub.novelty == nov
            cases = sub.select(rows).cases
            q[rows] = part.log_q[part.rows_for(NOVELTY[nov], cases)]
        r = sub.log_ratio.unsqueeze(1)  # (M, 1)
        below += (r < q).double().mean(0) / len(gpus)
        above += (r > q).double().mean(0) / len(gpus)
    low = torch.tensor([p < 0.5 for p in probs])
    high = torch.tensor([p > 0.5 for p in probs])
    return torch.where(low, below, 0.0), torch.where(high, above, 0.0)


def mapped_probs(below: torch.Tensor, above: torch.Tensor, raw: Sequence[float] = RAW_PROBS,
                 target: Sequence[float] = PROBS) -> list[float]:
    """For each target probability, the raw one whose held-out tail matched it (``tail_map``):
    a target tail t (p or 1 − p) takes the raw tail at which the measured share outside was
    t, linear between raw grid points, clamped to the raw grid's ends. The median stays."""
    raw_t = torch.tensor(raw, dtype=torch.float64)
    out = []
    for p in target:
        if p == 0.5:
            out.append(0.5)
            continue
        side = raw_t < 0.5 if p < 0.5 else raw_t > 0.5
        tails = torch.where(raw_t < 0.5, raw_t, 1.0 - raw_t)[side]  # raw tail per grid point
        seen = (below if p < 0.5 else above)[side]
        order = torch.argsort(tails)
        tails, seen = tails[order], torch.cummax(seen[order], 0).values  # monotone in the tail
        want = min(p, 1.0 - p)
        j = int(torch.searchsorted(seen, torch.tensor(want, dtype=torch.float64)))
        if j == 0:
            t = float(tails[0])
        elif j >= len(seen):
            t = float(tails[-1])
        else:
            s0, s1 = float(seen[j - 1]), float(seen[j])
            f = 0.0 if s1 == s0 else (want - s0) / (s1 - s0)
            t = float(tails[j - 1] + f * (tails[j] - tails[j - 1]))
        out.append(t if p < 0.5 else 1.0 - t)
    return out


def remap(part: GemmPart, probs_raw: Sequence[float], mapped: Sequence[float]) -> GemmPart:
    """``part``'s quantiles read at the ``mapped`` raw probabilities: the shipped grid."""
    cols = [quantile_at(part.log_q, p, probs_raw) for p in mapped]
    log_q = torch.stack(cols, 1) if len(part.buckets) else torch.zeros(0, len(mapped))
    return GemmPart(part.buckets, log_q, part.level_sigma)


def fit_stretch(chip_out: Residuals, part_of: Mapping[str, GemmPart]
                ) -> tuple[float, dict[str, float]]:
    """The unlike classes' stretch (``interval_stretch.unlike_stretch``) and each GPU's need,
    each GPU's family-unseen quantiles from ``part_of[its chip]``, a calibration its chip was
    left out of."""
    res = {g: chip_out.select(torch.tensor([x == g for x in chip_out.gpu]))
           for g in sorted(set(chip_out.gpu))}

    def quantiles(g: str) -> torch.Tensor:
        part = part_of[res[g].chip[0]]
        return part.log_q[part.rows_for("family_unseen", res[g].cases)]

    return unlike_stretch({g: r.log_ratio for g, r in res.items()}, quantiles)


def with_stretch(part: GemmPart, stretch: float) -> dict[str, float]:
    """The level terms of ``part`` with the unlike classes' added: family-unseen's, stretched."""
    sigma = dict(part.level_sigma)
    for u in UNLIKE:
        sigma[u] = stretch * sigma["family_unseen"]
    return sigma


def fit_interval_calibration(
    chip_out: Residuals,
    board_out: Residuals | None,
    whole_models: Sequence[WholeModelRow],
    *,
    exclude_chips: Iterable[str] = (),
    probs: Sequence[float] = PROBS,
    cache: dict[frozenset[str], GemmPart] | None = None,
    predictor: Mapping[str, str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    gemm_only: bool = False,
) -> IntervalCalibration:
    """The calibration from every residual whose chip is not in ``exclude_chips``: the GEMM
    buckets, level terms and unlike classes' stretch, and the whole-model quantiles from the
    runs of the other chips, each run scored by a GEMM calibration that also left its own chip
    out. ``cache`` keeps GEMM parts between calls (keyed by the chips left out). ``gemm_only``
    allows no runs: the whole-model quantiles are then standard normal ones, for checking
    GEMM intervals alone."""
    cache = {} if cache is None else cache
    excluded = frozenset(exclude_chips)

    def raw(out: frozenset[str]) -> GemmPart:
        if out not in cache:
            cache[out] = fit_gemm_part(
                chip_out.without_chips(out),
                None if board_out is None else board_out.without_chips(out), probs=RAW_PROBS)
        return cache[out]

    # the tail map: how often each raw quantile is crossed on chips left out of it
    held = chip_out.without_chips(excluded)
    below, above = tail_map(held, {c: raw(excluded | {c}) for c in set(held.chip)})
    mapped = mapped_probs(below, above, RAW_PROBS, probs)
    gemm = remap(raw(excluded), RAW_PROBS, mapped)
    stretch, need = fit_stretch(held, {c: remap(raw(excluded | {c}), RAW_PROBS, mapped)
                                       for c in set(held.chip)})
    runs = [r for r in whole_models if r.chip not in excluded]
    if runs:
        # NB: each run's own-chip-out GEMM calibration reuses this calibration's tail map
        part_of = {c: remap(raw(excluded | {c}), RAW_PROBS, mapped)
                   for c in {r.chip for r in runs}}
        z = whole_model_scores(runs, part_of, probs, stretch)
        total_z = fit_total_z(z, [r.gpu for r in runs], probs)
    elif gemm_only:
        total_z = torch.special.ndtri(torch.tensor(probs, dtype=torch.float64))
    else:
        raise ValueError("no whole-model run outside the excluded chips to calibrate on")
    return IntervalCalibration(
        probs=tuple(probs), buckets=gemm.buckets, log_q=gemm.log_q,
        level_sigma=with_stretch(gemm, stretch), total_z=total_z,
        predictor=dict(predictor or {"name": "hybrid", "version": HybridPredictor.version}),
        stretch={u: stretch for u in UNLIKE},
        metadata={**dict(metadata or {}), "whole_model_runs": len(runs),
                  "stretch_needed": {g: round(v, 4) for g, v in need.items()},
                  "whole_model_gpus": sorted({r.gpu for r in runs}),
                  "excluded_chips": sorted(excluded),
                  "tail_map": {"target_probs": list(probs),
                               "raw_probs": [round(p, 5) for p in mapped]}})


def update_stretch(base: IntervalCalibration, chip_out: Residuals,
                   metadata: Mapping[str, Any] | None = None) -> IntervalCalibration:
    """``base`` with the unlike classes' stretch (and level terms) fitted on ``chip_out``, the
    chip-held-out residuals its tail map was fitted on; its buckets, other level terms and
    whole-model quantiles kept. Each chip's calibration is refitted without it (family-unseen
    buckets need no board-held-out residuals) and read at ``base``'s tail map."""
    mapped = base.metadata["tail_map"]["raw_probs"]
    part_of = {c: remap(fit_gemm_part(chip_out.without_chips({c}), None, probs=RAW_PROBS),
                        RAW_PROBS, mapped) for c in sorted(set(chip_out.chip))}
    stretch, need = fit_stretch(chip_out, part_of)
    sigma = {k: v for k, v in base.level_sigma.items() if k not in UNLIKE}
    part = GemmPart(tuple(dict(b) for b in base.buckets), base.log_q, sigma)
    return replace(base, level_sigma=with_stretch(part, stretch),
                   stretch={u: stretch for u in UNLIKE},
                   metadata={**dict(base.metadata), **dict(metadata or {}),
                             "stretch_needed": {g: round(v, 4) for g, v in need.items()}})


# ------------------------------------------------------------------------------ the script


def load_predictions(path: str | Path, rows: int) -> torch.Tensor:
    """The hybrid's held-out predictions from a ``torch.save`` file: accuracy.py's
    ``{"predictions": {"hybrid": ...}}`` or a ``{"pred": ...}`` of the same rows."""
    doc = torch.load(path, map_location="cpu", weights_only=True)
    pred = doc["predictions"]["hybrid"] if "predictions" in doc else doc["pred"]
    pred = torch.as_tensor(pred, dtype=torch.float64)
    if pred.shape != (rows,):
        raise ValueError(f"{path}: {tuple(pred.shape)} predictions for {rows} measured rows; "
                         "they must be the rows of load_all_gemms after impossible_rows, "
                         "in order")
    return pred


def held_out_rows(data: str | Path, predictions: str | Path | None = None
                  ) -> tuple[MeasuredGemms, torch.Tensor | None]:
    """The measured rows that held-out prediction files index (``data``'s and this project's
    own, ``impossible_rows`` dropped) and, given a file of ``predictions``, its predictions of
    them (``load_predictions``)."""
    measured = load_all_gemms(data, DEFAULT_OWN_DIRS)
    measured = measured.select(~impossible_rows(measured))
    held = None if predictions is None else load_predictions(predictions, len(measured))
    return measured, held


def board_predictions_of(measured: MeasuredGemms, seeds: Sequence[int] = (0,)) -> torch.Tensor:
    """Leave-one-board-out predictions of the boards whose chip has other boards measured
    (NaN elsewhere): one hybrid fit per board."""
    chips: dict[str, list[str]] = {}
    for g in sorted(set(measured.gpu)):
        chips.setdefault(chip_of(g), []).append(g)
    boards = [g for gs in chips.values() if len(gs) > 1 for g in gs]
    return leave_one_chip_out(measured, lambda seed: HybridPredictor(seed=seed), chips=boards,
                              seeds=seeds, unit=str)


def held_out_residuals(data: str | Path, gemm_predictions: str | Path | None = None,
                       board_predictions: str | Path | None = None,
                       save_board_predictions: str | Path | None = None
                       ) -> tuple[MeasuredGemms, Residuals, Residuals]:
    """The measured rows (``impossible_rows`` dropped) of ``data`` and this project's own, and
    their chip-held-out and board-held-out residuals, from prediction files where given, else
    computed (hours for the chips on two cores; one fit a board)."""
    measured, chip_pred = held_out_rows(data, gemm_predictions or None)
    if chip_pred is None:
        chip_pred = leave_one_chip_out(measured, lambda seed: HybridPredictor(seed=seed))
    if board_predictions:
        board_pred = load_predictions(board_predictions, len(measured))
    else:
        board_pred = board_predictions_of(measured)
        if save_board_predictions:
            torch.save({"pred": board_pred}, save_board_predictions)
    return (measured, gemm_residuals(measured, chip_pred, "chip"),
            gemm_residuals(measured, board_pred, "board"))


def _provenance(path: str | Path | None) -> dict[str, Any]:
    """A file's name, size and SHA-256 (or that the input was computed here)."""
    if not path:
        return {"computed": "here, seed 0"}
    data = Path(path).read_bytes()
    return {"file": Path(path).name, "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--gemm-predictions", default=None,
                    help="leave-one-chip-out predictions (torch.save; default: computed, hours)")
    ap.add_argument("--board-predictions", default=None,
                    help="leave-one-board-out predictions (default: computed, one fit a board)")
    ap.add_argument("--save-board-predictions", default=None,
                    help="where to keep the computed leave-one-board-out predictions")
    ap.add_argument("--whole-models", default=None,
                    help="whole-model rows, each chip held out (benchmarks/intervals.py)")
    ap.add_argument("--update", default=None,
                    help="a calibration whose buckets, level terms and whole-model quantiles "
                         "are kept, only the unlike classes' stretch refitted from "
                         "--gemm-predictions (no board predictions or whole models needed)")
    ap.add_argument("--out", default="torch_gemm_cost/data/gemm_intervals.json")
    ap.add_argument("--note", default="", help="what the input files are, for the metadata")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    command = "python -m torch_gemm_cost.train.intervals " + " ".join(
        sys.argv[1:] if argv is None else argv)
    if args.update:
        if not args.gemm_predictions:
            ap.error("--update needs --gemm-predictions (the ones its tail map was fitted on)")
        measured = load_all_gemms(args.data, DEFAULT_OWN_DIRS)
        measured = measured.select(~impossible_rows(measured))
        chip_pred = load_predictions(args.gemm_predictions, len(measured))
        cal = update_stretch(IntervalCalibration.load(args.update),
                             gemm_residuals(measured, chip_pred, "chip"),
                             {"stretch_command": command,
                              "stretch_input": {**_provenance(args.gemm_predictions),
                                                "note": args.note}})
        cal = replace(cal, metadata={**dict(cal.metadata), "stretch_seconds":
                                     round(time.perf_counter() - t0, 1)})
        out = cal.save(args.out)
        print(f"wrote {out}: stretch {next(iter(cal.stretch.values())):.3f}")
        return 0
    if not args.whole_models:
        ap.error("--whole-models is needed to fit a calibration (or --update one)")
    measured, chip_res, board_res = held_out_residuals(
        args.data, args.gemm_predictions, args.board_predictions, args.save_board_predictions)
    cal = fit_interval_calibration(
        chip_res, board_res, load_whole_models(args.whole_models),
        metadata={
            "description": "torch_gemm_cost interval calibration of the hybrid GEMM predictor",
            "training_command": command,
            "inputs": {"chip_held_out_gemms": _provenance(args.gemm_predictions),
                       "board_held_out_gemms": _provenance(args.board_predictions),
                       "whole_models": _provenance(args.whole_models),
                       "note": args.note},
            "gemm_residual_rows": {"chip_held_out": len(chip_res),
                                   "board_held_out": len(board_res)},
            "measured_rows": len(measured),
            "gpus": sorted(set(measured.gpu)),
            "seconds": round(time.perf_counter() - t0, 1),
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
        })
    out = cal.save(args.out)
    print(f"wrote {out}: {len(cal.buckets)} buckets, level terms "
          + ", ".join(f"{k} {v:.3f}" for k, v in cal.level_sigma.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
