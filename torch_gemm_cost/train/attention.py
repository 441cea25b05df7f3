"""Fit the fused-attention model on measured attention calls and write the shipped weights.

    python -m torch_gemm_cost.train.attention [--data ../shared/data]
        [--out torch_gemm_cost/data/attention_weights.json] [--steps 500] [--seed 0]

The data is aiconfigurator's (ai-dynamo/aiconfigurator, Copyright NVIDIA, Apache-2.0): vLLM's
attention kernels on A100-SXM4-80GB, H200, B200 and L40S, prefill and decode, bf16 and fp8 KV,
timed per call with CUDA events. The shipped fit uses every row (a seeded sample per group); the
scores it records are in-sample. The weights also carry an interval calibration
(``fit_attention_intervals``): the residuals of fits that left each GPU out, so the training
fits five times.

Scores are per (gpu, phase, KV dtype), over calls of ``MIN_MS`` or more; shorter calls, which
sit on the event-timed launch floor, are scored apart.
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..measured.attention import MeasuredAttention, load_attention
from ..predict.attention import AttentionPredictor
from ..predict.intervals import (
    ATTENTION_PHASES,
    PROBS,
    SIZES,
    AttentionIntervals,
    conformal_grid,
    quantile_at,
    size_class,
)
from .intervals import RAW_PROBS, group_weights, mapped_probs

__all__ = [
    "CREDITS",
    "MIN_GPUS",
    "MIN_MS",
    "AttentionScore",
    "fit_attention_intervals",
    "leave_one_gpu_out",
    "main",
    "score_attention",
    "train_attention",
]

log = logging.getLogger(__name__)

MIN_MS = 0.01  # calls below this are scored apart: the launch floor is about 0.006-0.012 ms
MIN_GPUS = 2  # GPUs an interval bucket needs; a thinner one takes its phase's pooled quantiles
CREDITS: tuple[dict[str, str], ...] = (
    {"source": "aiconfigurator", "file": "attention/aiconfigurator.csv.gz",
     "project": "aiconfigurator (ai-dynamo/aiconfigurator)", "copyright": "Copyright NVIDIA",
     "license": "Apache-2.0",
     "what": "vLLM attention kernels (FlashAttention 2/3/4, FlashInfer, TensorRT-LLM FMHA, "
             "Triton) timed per call with CUDA events on A100-SXM4-80GB, H200, B200, L40S"},
)


@dataclass(frozen=True)
class AttentionScore:
    """Accuracy of one (gpu, phase, KV dtype) group, over calls of at least ``min_ms``
    (or, with ``below``, over the calls under it)."""

    gpu: str
    phase: str
    kv_dtype: str
    rows: int
    mape: float  # mean |pred − meas| / meas
    median_ape: float
    within_10: float  # share of rows with APE ≤ 10%
    within_25: float
    median_ratio: float  # median pred / meas

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v)
                for k, v in self.__dict__.items()}


def score_attention(measured: MeasuredAttention, pred_ms: torch.Tensor, *,
                    min_ms: float = MIN_MS, below: bool = False) -> list[AttentionScore]:
    """Scores per (gpu, phase, KV dtype), sorted by key, over the calls measured at ``min_ms``
    or more (``below``: under ``min_ms``). Rows with non-finite predictions are skipped."""
    y = measured.latency_ms
    keep = (y < min_ms) if below else (y >= min_ms)
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, key in enumerate(zip(measured.gpu, measured.phase, measured.kv_dtype)):
        if keep[i]:
            groups.setdefault(key, []).append(i)
    out = []
    for key in sorted(groups):
        idx = torch.tensor(groups[key])
        ok = torch.isfinite(pred_ms[idx])
        p, m = pred_ms[idx][ok], y[idx][ok]
        if len(m) == 0:
            continue
        ape = (p - m).abs() / m
        out.append(AttentionScore(*key, rows=len(m), mape=float(ape.mean()),
                                  median_ape=float(ape.median()),
                                  within_10=float((ape <= 0.10).double().mean()),
                                  within_25=float((ape <= 0.25).double().mean()),
                                  median_ratio=float((p / m).median())))
    return out


def leave_one_gpu_out(measured: MeasuredAttention, make: Callable[[], AttentionPredictor]
                      ) -> tuple[torch.Tensor, dict[str, AttentionPredictor]]:
    """Predicted ms of every row from a model fitted on the other GPUs' rows only, and those
    models by held-out GPU; ``make()`` returns an unfitted predictor. Boards of one chip share
    an id here, so they leave together."""
    pred = torch.full((len(measured),), float("nan"), dtype=torch.float64)
    models = {}
    for gpu in sorted(set(measured.gpu)):
        held = measured.mask(gpu=gpu)
        t0 = time.perf_counter()
        models[gpu] = make().fit(measured.select(~held))
        pred[held] = models[gpu].predict_measured(measured.select(held))
        log.info("held out %s: %.1fs", gpu, time.perf_counter() - t0)
    return pred, models


def _bucket_grids(log_ratio: torch.Tensor, gpu: Sequence[str], keys: Sequence[tuple[str, str]],
                  probs: Sequence[float]) -> dict[tuple[str, str | None], torch.Tensor]:
    """Conformal grids (P,) of ``log_ratio`` (n,) per (phase, size) key with rows of at least
    ``MIN_GPUS`` GPUs, and per phase pooled (size None); each GPU weighs the same in each."""
    out: dict[tuple[str, str | None], torch.Tensor] = {}
    groups: dict[tuple[str, str | None], list[int]] = {}
    for i, (phase, size) in enumerate(keys):
        groups.setdefault((phase, size), []).append(i)
        groups.setdefault((phase, None), []).append(i)
    for key, rows in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        names = sorted({gpu[i] for i in rows})
        if len(names) < MIN_GPUS:
            continue
        w = group_weights(torch.tensor([names.index(gpu[i]) for i in rows]))
        out[key] = conformal_grid(log_ratio[torch.tensor(rows)], w, probs)
    return out


def _grid_of(grids: Mapping[tuple[str, str | None], torch.Tensor], key: tuple[str, str]
             ) -> torch.Tensor:
    return grids[key] if key in grids else grids[(key[0], None)]


def fit_attention_intervals(measured: MeasuredAttention, held_ms: torch.Tensor, *,
                            probs: Sequence[float] = PROBS) -> AttentionIntervals:
    """Interval calibration of the attention model from leave-one-GPU-out predictions
    ``held_ms`` (N,) of ``measured``: split-conformal quantiles of log(measured / predicted)
    per (phase, size of the predicted time), each GPU weighing the same, read at the raw
    probabilities whose tails held-out GPUs crossed at the nominal rate (``mapped_probs``: the
    tail map of the GEMM calibration, each GPU scored by quantiles of the others)."""
    r = torch.log(measured.latency_ms / held_ms)
    ok = torch.isfinite(r)
    idx = torch.nonzero(ok).flatten()
    r = r[idx]
    gpu = [measured.gpu[i] for i in idx.tolist()]
    sizes = size_class(held_ms[idx]).tolist()
    keys = [(ATTENTION_PHASES[int(d)], SIZES[z])
            for d, z in zip(measured.calls.decode[idx].tolist(), sizes)]
    gpus = sorted(set(gpu))
    if len(gpus) < MIN_GPUS + 1:
        raise ValueError(f"attention intervals need residuals of at least {MIN_GPUS + 1} GPUs "
                         f"(a tail map leaves each out); got {gpus}")
    below = torch.zeros(len(RAW_PROBS), dtype=torch.float64)
    above = torch.zeros(len(RAW_PROBS), dtype=torch.float64)
    for g in gpus:
        mine = [i for i, x in enumerate(gpu) if x == g]
        rest = [i for i, x in enumerate(gpu) if x != g]
        grids = _bucket_grids(r[torch.tensor(rest)], [gpu[i] for i in rest],
                              [keys[i] for i in rest], RAW_PROBS)
        q = torch.stack([_grid_of(grids, keys[i]) for i in mine])  # (M, R)
        mr = r[torch.tensor(mine)].unsqueeze(1)
        below += (mr < q).double().mean(0) / len(gpus)
        above += (mr > q).double().mean(0) / len(gpus)
    raw_t = torch.tensor(RAW_PROBS)
    mapped = mapped_probs(torch.where(raw_t < 0.5, below, 0.0),
                          torch.where(raw_t > 0.5, above, 0.0), RAW_PROBS, probs)
    grids = _bucket_grids(r, gpu, keys, RAW_PROBS)
    buckets = tuple(grids)
    log_q = torch.stack([torch.stack([quantile_at(grids[b], p, RAW_PROBS) for p in mapped])
                         for b in buckets])
    return AttentionIntervals(
        tuple(probs), buckets, log_q,
        {"residuals": "leave-one-GPU-out predictions of every measured call",
         "gpus": gpus, "rows": len(r), "mapped_probs": [round(p, 5) for p in mapped]})


def _overall(scores: Sequence[AttentionScore]) -> float:
    return statistics.fmean(s.mape for s in scores) if scores else float("nan")


def train_attention(data_dir: str | Path, *, command: str = "", **hyper: Any
                    ) -> AttentionPredictor:
    """Fit on every measured row and attach provenance, credits and in-sample scores as
    ``metadata_`` (written by ``save``), and the interval calibration (``intervals_``) from
    leave-one-GPU-out fits (``fit_attention_intervals``)."""
    measured = load_attention(data_dir)
    held, _ = leave_one_gpu_out(measured, lambda: AttentionPredictor(**hyper))
    model = AttentionPredictor(**hyper).fit(measured)
    model.intervals_ = fit_attention_intervals(measured, held)
    pred = model.predict_measured(measured)
    scores = score_attention(measured, pred)
    small = score_attention(measured, pred, below=True)
    model.metadata_ = {
        "description": "torch_gemm_cost fused-attention model (FlashAttention-class kernels)",
        "data_sources": list(CREDITS),
        "training_command": command,
        "trained_gpus": sorted(set(measured.gpu)),
        "measured_rows": len(measured),
        "trained_rows": model.n_train_rows_,
        "train_seconds": round(model.fit_seconds_, 1),
        "loss_history": model.loss_history_,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "metrics": {
            "note": "in-sample: fitted on every GPU listed, scored warm as measured, calls of "
                    f"{MIN_MS} ms or more",
            "min_ms": MIN_MS,
            "overall_group_mape": round(_overall(scores), 4),
            "groups": [s.as_dict() for s in scores],
            "groups_below_min_ms": [s.as_dict() for s in small],
        },
    }
    return model


def main(argv: Sequence[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(root / ".." / "shared" / "data"))
    parser.add_argument("--out",
                        default=str(root / "torch_gemm_cost" / "data" / "attention_weights.json"))
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    command = "python -m torch_gemm_cost.train.attention" + (
        f" --steps {args.steps}" if args.steps != 500 else "") + (
        f" --seed {args.seed}" if args.seed else "")
    model = train_attention(args.data, command=command, steps=args.steps, seed=args.seed)
    model.save(args.out)
    lines = [("gpu                 phase    kv_dtype   rows   MAPE%  medAPE%  <=10%  <=25%  "
             "pred/meas   (in-sample, calls >= 0.01 ms)")]
    for s in model.metadata_["metrics"]["groups"]:
        lines.append(f"{s['gpu']:19s} {s['phase']:8s} {s['kv_dtype']:9s} {s['rows']:6d} "
                     f"{100 * s['mape']:6.1f} {100 * s['median_ape']:7.1f} "
                     f"{100 * s['within_10']:6.1f} {100 * s['within_25']:6.1f} "
                     f"{s['median_ratio']:9.2f}")
    print("\n".join(lines))  # the script's output: the in-sample scores
    print(f"wrote {args.out} ({model.metadata_['train_seconds']} s fit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
