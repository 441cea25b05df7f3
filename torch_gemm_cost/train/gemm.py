"""Fit the hybrid GEMM predictor on measured GEMMs, score it, and write shipped weights.

    torch-gemm-cost train --data ../shared/data --out torch_gemm_cost/data/hybrid_weights.json

Scoring is per (gpu, source, dtype) group: MAPE, median APE, share within 10% and 25%. The honest
score of a GPU is the one from a model that never saw its chip (``leave_one_chip_out``).
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import get_device
from ..measured.gemm import DEFAULT_OWN_DIRS, MeasuredGemms, load_all_gemms
from ..predict.gemm.hybrid import UNFITTED_SOURCES, HybridPredictor
from ..predict.gemm.roofline import impossible_rows
from ..predict.score import summarize_errors

__all__ = [
    "CREDITS",
    "GroupScore",
    "chip_of",
    "leave_one_chip_out",
    "overall",
    "score_groups",
    "train_gemm_predictor",
]

log = logging.getLogger(__name__)

CREDITS: tuple[dict[str, str], ...] = (
    {"source": "neusight, neusight-test", "project": "NeuSight (sitar-lab/NeuSight)",
     "license": "MIT"},
    {"source": "vidur", "project": "Vidur (microsoft/vidur) profiling data", "license": "MIT"},
    {"source": "deepbench", "project": "DeepBench (baidu-research/DeepBench)",
     "license": "Apache-2.0"},
    {"source": "xla-ptable", "project": "XLA matmul performance tables (openxla/xla)",
     "license": "Apache-2.0"},
    {"source": "llmcompass", "project": "LLMCompass (PrincetonUniversity/LLMCompass)",
     "license": "BSD-3-Clause"},
    {"source": "aiconfigurator", "project": "aiconfigurator (ai-dynamo/aiconfigurator), "
     "Copyright NVIDIA: LLM linear layers as vLLM runs them", "license": "Apache-2.0"},
    {"source": "tgc-align, calibrate", "project": "torch_gemm_cost's own H200 measurements "
     "(benchmarks/data/h200): the alignment sweep and the calibration sweep",
     "license": "MIT"},
)


@dataclass(frozen=True)
class GroupScore:
    """Accuracy of one (gpu, source, dtype) group."""

    gpu: str
    source: str
    dtype: str
    rows: int
    mape: float  # mean |pred − meas| / meas
    median_ape: float
    within_10: float  # share of rows with APE ≤ 10%
    within_25: float

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v)
                for k, v in self.__dict__.items()}


def score_groups(measured: MeasuredGemms, pred_ms: torch.Tensor) -> list[GroupScore]:
    """Scores per (gpu, source, dtype), sorted by key. Rows with NaN predictions are skipped."""
    names = measured.gemms.dtype_names()
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, key in enumerate(zip(measured.gpu, measured.source, names)):
        groups.setdefault(key, []).append(i)
    out = []
    for key in sorted(groups):
        idx = torch.tensor(groups[key])
        s = summarize_errors(pred_ms[idx], measured.latency_ms[idx])
        if s.rows:
            out.append(GroupScore(*key, rows=s.rows, mape=s.mape, median_ape=s.median_ape,
                                  within_10=s.within_10, within_25=s.within_25))
    return out


def overall(scores: Sequence[GroupScore]) -> float:
    """MAPE averaged over groups (each group counts once, whatever its size)."""
    return sum(s.mape for s in scores) / max(len(scores), 1)


def chip_of(gpu: str) -> str:
    """The chip a GPU id's board carries (``"a100_pcie_40gb"`` -> ``"GA100"``); the id itself
    for a device the catalog lacks or whose chip it does not record."""
    try:
        return get_device(gpu).chip or gpu
    except ValueError:
        return gpu


def leave_one_chip_out(
    measured: MeasuredGemms,
    make: Callable[[int], Any],
    *,
    chips: Iterable[str] | None = None,
    seeds: Sequence[int] = (0,),
    unit: Callable[[str], str] = chip_of,
) -> torch.Tensor:
    """Predicted ms for every row, each chip's rows from models fitted without any board of
    that chip (the A100 PCIe and SXM boards leave together, as do the two V100s), averaged
    over ``seeds`` (geometric mean). ``make(seed)`` returns an unfitted predictor with ``fit``
    and ``predict_measured``. Rows of chips not in ``chips`` stay NaN. ``unit(gpu)`` names
    what leaves together: the chip by default; ``str`` leaves each board out alone, so the
    other boards of its chip stay in the fit."""
    row_chip = [unit(g) for g in measured.gpu]
    pred = torch.full((len(measured),), float("nan"), dtype=torch.float64)
    for chip in sorted(set(row_chip) if chips is None else chips):
        held = torch.tensor([c == chip for c in row_chip], dtype=torch.bool)
        if not held.any():
            continue
        train = measured.select(~held)
        test = measured.select(held)
        logs = []
        for seed in seeds:
            t0 = time.perf_counter()
            model = make(seed).fit(train)
            logs.append(torch.log(model.predict_measured(test)))
            log.info("held out %s (seed %d): %.1fs", chip, seed, time.perf_counter() - t0)
        pred[held] = torch.exp(torch.stack(logs).mean(dim=0))
    return pred


def train_gemm_predictor(
    data_dir: str | Path,
    *,
    own_dirs: Sequence[str | Path] = DEFAULT_OWN_DIRS,
    seed: int = 0,
    command: str = "",
    **hyper: Any,
) -> HybridPredictor:
    """Fit the hybrid on every trainable measured row of ``data_dir`` and of ``own_dirs`` and
    attach its provenance and training metrics as ``metadata_`` (saved by ``save``)."""
    measured = load_all_gemms(data_dir, own_dirs)
    t0 = time.perf_counter()
    model = HybridPredictor(seed=seed, **hyper).fit(measured)
    seconds = time.perf_counter() - t0
    scores = score_groups(measured, model.predict_measured(measured))
    return model.set_metadata({
        "description": "torch_gemm_cost hybrid GEMM predictor weights",
        "data_sources": list(CREDITS),
        "training_command": command,
        "trained_gpus": sorted({g for g, s in zip(measured.gpu, measured.source)
                                if s not in UNFITTED_SOURCES}),
        "unfitted_sources": dict(UNFITTED_SOURCES),
        "trained_rows": model.n_train_rows_,
        "measured_rows": len(measured),
        "impossible_rows_dropped": int(impossible_rows(measured).sum()),
        "train_seconds": round(seconds, 1),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "physical_constants": model.physical_constants(),
        "metrics": {
            "note": "fit on every measured GPU (in-sample)",
            "overall_group_mape": round(overall(scores), 4),
            "groups": [s.as_dict() for s in scores],
        },
    })
