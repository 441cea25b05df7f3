"""Fit the memory-bound op costs (η and floor per op class) on measured non-GEMM ops.

The data is NeuSight's (MIT): elementwise ops, layer norm and softmax on float32 (rows, cols)
tensors, timed with CUDA events on P4, P100, V100, T4, A100-40GB and A100-80GB, plus this
project's own H200 rows of the same ops (``benchmarks/data/h200/vec``). Each class gets

    time = floor + bytes / (η · datasheet DRAM bandwidth)

fitted by Adam on the squared log error (relative error: times span four orders of magnitude),
on every measured GPU. The evaluation leaves each chip out in turn (the two A100 boards leave
together): fit on the others, score on it.

    python -m torch_gemm_cost.train.ops [--data ../shared/data] [--out torch_gemm_cost/data/op_costs.json]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..devices import get_device
from ..gemms.measured import DEFAULT_OWN_DIRS
from ..predict.ops import memory_time_ms
from ..predict.score import summarize_errors
from .gemm import chip_of

__all__ = ["LAUNCH_MS", "VecRow", "fit_class", "fit_op_costs", "load_vec", "main"]

log = logging.getLogger(__name__)

# measured op -> (op class, tensor passes: inputs read + output written, each (rows, cols))
VEC_OPS: dict[str, tuple[str, int]] = {
    **{op: ("elementwise", 3) for op in ("add", "mul", "div", "pow")},
    **{op: ("elementwise", 2) for op in ("addu", "mulu", "divu", "powu", "relu", "tanh", "gelu")},
    "ln": ("norm", 2),
    "softmax": ("softmax", 2),
}
FITTED = ("elementwise", "norm", "softmax")
# classes without measurements take the constants of the closest measured kernel
BORROWED = {
    "reduction": "softmax",
    "copy": "elementwise",
    "embedding": "elementwise",
    "attention": "elementwise",
}
# NB: not fitted. Measured floors include CUDA-event overhead (~25 µs); back to back on one
# stream a kernel costs a few µs of launch gap and ramp.
LAUNCH_MS = 0.005
@dataclass(frozen=True)
class VecRow:
    gpu: str
    source: str
    op: str
    op_class: str
    rows: int
    cols: int
    dram_bytes: float
    bw_bytes_per_s: float
    latency_ms: float


def load_vec(data_dir: str | Path, own_dirs: Sequence[str | Path] = ()) -> list[VecRow]:
    """Rows of ``vec/neusight.csv.gz``, and of ``vec/tgc-vec.csv.gz`` in each of ``own_dirs``
    (the same ops, measured by ``benchmarks/measure_gpu.py``), with their bytes and their GPU's
    DRAM bandwidth."""
    path = Path(data_dir) / "vec" / "neusight.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"measured ops not found at {path} (expected ../shared/data)")
    out = _read_vec(path)
    for own in own_dirs:
        extra = Path(own) / "vec" / "tgc-vec.csv.gz"
        if not extra.is_file():
            raise FileNotFoundError(f"measured ops not found at {extra}")
        out += _read_vec(extra)
    return out


def _read_vec(path: Path) -> list[VecRow]:
    out: list[VecRow] = []
    bw: dict[str, float] = {}
    with gzip.open(path, "rt", newline="") as f:
        for line, rec in enumerate(csv.DictReader(f), start=2):
            if rec["op"] not in VEC_OPS:
                log.info("%s:%d: op %r has no class; skipped", path, line, rec["op"])
                continue
            op_class, passes = VEC_OPS[rec["op"]]
            if rec["gpu"] not in bw:
                bw[rec["gpu"]] = get_device(rec["gpu"]).dram_bw_bytes_per_s
            rows, cols = int(rec["rows"]), int(rec["cols"])
            out.append(
                VecRow(
                    rec["gpu"],
                    rec["source"],
                    rec["op"],
                    op_class,
                    rows,
                    cols,
                    float(passes * rows * cols * 4),
                    bw[rec["gpu"]],
                    float(rec["latency_ms"]),
                )
            )
    return out


def _tensors(rows: Sequence[VecRow]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    def col(xs: list[float]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.float64)

    return (
        col([r.dram_bytes for r in rows]),
        col([r.bw_bytes_per_s for r in rows]),
        col([r.latency_ms for r in rows]),
    )


def fit_class(rows: Sequence[VecRow], steps: int = 400, lr: float = 0.05) -> tuple[float, float]:
    """(η, floor_ms) minimising the mean squared log error over ``rows``."""
    if not rows:
        raise ValueError("no measured rows to fit")
    dram, bw, y = _tensors(rows)  # (N,) each
    raw = torch.tensor([1.0, math.log(0.02)], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([raw], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        pred = memory_time_ms(dram, torch.ones_like(dram), torch.sigmoid(raw[0]), raw[1].exp(), bw)
        loss = ((pred.log() - y.log()) ** 2).mean()
        loss.backward()
        opt.step()
    return float(torch.sigmoid(raw[0].detach())), float(raw[1].detach().exp())


def _score(rows: Sequence[VecRow], eta: float, floor_ms: float) -> dict[str, float | None]:
    dram, bw, y = _tensors(rows)
    pred = memory_time_ms(dram, torch.ones_like(dram), torch.tensor(eta), floor_ms, bw)
    s, big = summarize_errors(pred, y), summarize_errors(pred[y >= 0.1], y[y >= 0.1])
    return {
        "n": s.rows,
        "mape_pct": round(100 * s.mape, 2),
        "median_ape_pct": round(100 * s.median_ape, 2),
        "within_10_pct": round(100 * s.within_10, 1),
        "mape_ge_0.1ms_pct": round(100 * big.mape, 2) if big.rows else None,
    }


def fit_op_costs(data_dir: str | Path, steps: int = 400, *,
                 own_dirs: Sequence[str | Path] = DEFAULT_OWN_DIRS,
                 exclude_chips: Sequence[str] = (), metrics: bool = True) -> dict[str, Any]:
    """Fitted table (the content of ``data/op_costs.json``), with leave-one-chip-out metrics
    unless ``metrics`` is False.

    The constants are fitted on every measured GPU but those of ``exclude_chips`` (the held-out
    evaluation of a whole model leaves its chip out of this fit too).
    """
    rows = [r for r in load_vec(data_dir, own_dirs) if chip_of(r.gpu) not in exclude_chips]
    by_class = {c: [r for r in rows if r.op_class == c] for c in FITTED}
    chips = sorted({chip_of(r.gpu) for r in rows}) if metrics else []
    scores: dict[str, dict[str, Any]] = {}
    for c, items in by_class.items():
        scores[c] = {}
        for chip in chips:
            train = [r for r in items if chip_of(r.gpu) != chip]
            test = [r for r in items if chip_of(r.gpu) == chip]
            if not test or not train:
                continue
            eta, floor = fit_class(train, steps)
            for gpu in sorted({r.gpu for r in test}):
                scores[c][gpu] = {
                    "eta": round(eta, 4),
                    "floor_ms": round(floor, 5),
                    **_score([r for r in test if r.gpu == gpu], eta, floor),
                }
    classes: dict[str, dict[str, Any]] = {}
    for c, items in by_class.items():
        eta, floor = fit_class(items, steps)
        classes[c] = {
            "eta": round(eta, 4),
            "floor_ms": round(floor, 5),
            "fitted_on": sorted({r.op for r in items}),
        }
    for c, src in BORROWED.items():
        classes[c] = {**{k: classes[src][k] for k in ("eta", "floor_ms")}, "borrowed_from": src}
    return {
        "format": 1,
        "model": "time = kernels * launch_ms + dram_bytes / (eta * dram_bw_bytes_per_s)",
        "classes": classes,
        "launch_ms": LAUNCH_MS,
        "provenance": {
            "data": "NeuSight vec/neusight.csv.gz (MIT License, Copyright (c) 2025 Georgia "
            "Institute of Technology and Microsoft Corporation): float32 elementwise, layer norm "
            "and softmax latencies timed with CUDA events; the same ops measured by this "
            "project on an H200 (benchmarks/data/h200/vec, MIT License)",
            "train_gpus": sorted({r.gpu for r in rows}),
            "fit": f"Adam on squared log error, {steps} steps, per op class",
            "launch_ms": "not fitted: a kernel's cost back to back on one stream (the measured "
            "floor_ms includes CUDA-event overhead)",
        },
        "leave_chip_out": scores,
    }


def main(argv: Sequence[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(root / ".." / "shared" / "data"))
    parser.add_argument("--out", default=str(root / "torch_gemm_cost" / "data" / "op_costs.json"))
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args(argv)
    table = fit_op_costs(args.data, args.steps)
    Path(args.out).write_text(json.dumps(table, indent=1) + "\n")
    lines = [
        "class        gpu                   eta   floor_ms  MAPE%  medAPE%  <=10%  MAPE%(>=0.1ms)"
    ]
    for c, per_gpu in table["leave_chip_out"].items():
        for gpu, m in per_gpu.items():
            lines.append(
                f"{c:12s} {gpu:21s} {m['eta']:.3f} {m['floor_ms']:.4f} {m['mape_pct']:6.1f}"
                f" {m['median_ape_pct']:7.1f} {m['within_10_pct']:6.1f} {m['mape_ge_0.1ms_pct']}"
            )
    print("\n".join(lines))  # the script's output: the leave-GPU-out evaluation
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
