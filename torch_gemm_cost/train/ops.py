"""Fit the memory-bound op costs (per op class: η per architecture, a floor) on measured ops.

The data is NeuSight's (MIT): elementwise ops, layer norm and softmax on float32 (rows, cols)
tensors, timed with CUDA events on P4, P100, V100, T4, A100-40GB and A100-80GB, plus this
project's own H200 rows of the same ops (``benchmarks/data/h200/vec``). Each class gets

    time = floor + bytes / (η · datasheet DRAM bandwidth)

fitted by Adam on the squared log error (relative error: times span four orders of magnitude),
on every measured GPU, with one η per architecture (how much of its datasheet bandwidth the
architecture's memory system delivers to a streaming kernel; for elementwise ops 0.80 on
Pascal, 0.87 on Turing, 0.99 on Volta, Ampere and Hopper, in ``data/op_costs.json``) and one
floor (CUDA-event overhead: the hosts', not the GPUs'). An architecture nobody measured takes the
geometric mean of the measured ones. The evaluation leaves each chip out in turn (the two A100
boards leave together): fit on the others, score on it, so a held-out chip has an η of its own
only where another chip of its architecture was measured (Pascal: P100 and P4).

The fused kernels of an LLM layer as a serving engine runs them (vidur's ``vec/vidur.csv.gz``,
MIT: a fused RMSNorm, SiLU·mul and rotary embedding, an embedding gather, torch's LayerNorm,
GELU and add, fp16 kernel times on A100-SXM4-80GB and A40) get constants per op
(``predict.ops.FUSED_OPS``): one DRAM share η for all of them, and per op bytes per SM-cycle
and a kernel floor (``fit_fused_ops``),
scored with each of the two chips held out (GA100, GA102) on ops of ``FUSED_MIN_MS`` or more.

    python -m torch_gemm_cost.train.ops [--data ../shared/data] [--out torch_gemm_cost/data/op_costs.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import get_device
from ..measured.table import DEFAULT_OWN_DIRS
from ..measured.vec import MeasuredOps, read_vec_file
from ..predict.ops import (
    FUSED_ALIASES,
    VEC_OPS,
    VERSION,
    FusedOpCost,
    fused_op_bytes,
    fused_time_ms_of,
    memory_time_ms,
    warm_l2_hit,
)
from ..predict.registry import SHIPPED
from ..predict.score import summarize_errors
from .gemm import chip_of

__all__ = [
    "FUSED_MIN_MS",
    "LAUNCH_MS",
    "VEC_OPS",
    "FusedRows",
    "VecRow",
    "fit_class",
    "fit_fused_ops",
    "fit_op_costs",
    "load_fused",
    "load_vec",
    "main",
    "predict_fused",
    "shared_eta",
]

log = logging.getLogger(__name__)

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
FUSED_MIN_MS = 0.01  # fused ops under this are scored apart: a kernel's floor is 2-8 µs
# priors of the fused-op fit, in the fitted (unconstrained) coordinates: a kernel streams at
# about 0.85 of the DRAM bandwidth unless its data say otherwise, and its SM side does not
# bind unless its data say it does (64 B per SM-cycle is beyond any measured kernel)
_ETA_PRIOR, _SM_PRIOR, _PRIOR_WEIGHT = 0.85, 64.0, 0.001


@dataclass(frozen=True)
class FusedRows:
    """Measured fused-op kernels (vidur's ``vec/vidur.csv.gz``) as tensors, (N,) each."""

    gpu: tuple[str, ...]
    op: tuple[str, ...]  # a ``FUSED_OPS`` name (``add3`` counts as two adds)
    measured_op: tuple[str, ...]
    dram_bytes: torch.Tensor
    kernels: torch.Tensor
    dram_bw_bytes_per_s: torch.Tensor
    sm_cycles_per_s: torch.Tensor  # SMs × boost clock
    l2_bytes: torch.Tensor
    latency_ms: torch.Tensor

    def __len__(self) -> int:
        return len(self.gpu)

    def select(self, keep: torch.Tensor) -> FusedRows:
        """The rows where ``keep`` (a bool mask) is true, in order."""
        idx = torch.nonzero(keep).flatten().tolist()
        fields: dict[str, Any] = {
            f: (tuple(v[i] for i in idx) if isinstance(v := getattr(self, f), tuple) else v[keep])
            for f in self.__dataclass_fields__}
        return FusedRows(**fields)


def load_fused(data_dir: str | Path) -> FusedRows:
    """vidur's fused LLM-layer ops (fp16, kernel time, A100-SXM4-80GB and A40), with their bytes
    (``predict.ops.fused_op_bytes``) and their GPU's facts."""
    path = Path(data_dir) / "vec" / "vidur.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"measured fused ops not found at {path} (expected ../shared/data)")
    ops = read_vec_file(path)
    keep = [i for i in range(len(ops)) if ops.fused[i]]
    facts: dict[str, tuple[float, float, float]] = {}
    for gpu in set(ops.gpu):
        d = ops.device(gpu)
        facts[gpu] = (d.dram_bw_bytes_per_s, d.sm_count * (d.boost_clock_mhz or 0) * 1e6,
                      d.l2_bytes)
    sizes = [fused_op_bytes(ops.op[i], ops.rows[i], ops.cols[i], ops.elem_bytes[i])
             for i in keep]

    def t(xs: Sequence[float]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.float64)

    return FusedRows(tuple(ops.gpu[i] for i in keep),
                     tuple(FUSED_ALIASES.get(ops.op[i], (ops.op[i], 1))[0] for i in keep),
                     tuple(ops.op[i] for i in keep),
                     t([float(b) for b, _ in sizes]), t([float(k) for _, k in sizes]),
                     t([facts[ops.gpu[i]][0] for i in keep]),
                     t([facts[ops.gpu[i]][1] for i in keep]),
                     t([facts[ops.gpu[i]][2] for i in keep]),
                     ops.latency_ms[torch.tensor(keep, dtype=torch.long)])


def _fused_raw(costs: dict[str, FusedOpCost], eta: float, roof_p: float
               ) -> dict[str, torch.Tensor]:
    raw = {"p": torch.tensor(math.log(math.expm1(roof_p - 1.0)), dtype=torch.float64),
           "eta": torch.tensor(math.log(eta / (1 - eta)), dtype=torch.float64)}
    for op, c in costs.items():
        raw[f"{op}.sm"] = torch.tensor(math.log(c.sm_bytes_per_cycle), dtype=torch.float64)
        raw[f"{op}.floor"] = torch.tensor(math.log(c.floor_ms), dtype=torch.float64)
    return raw


def predict_fused(rows: FusedRows, costs: dict[str, FusedOpCost], eta: float, roof_p: float,
                  *, warm_l2: bool = True) -> torch.Tensor:
    """Kernel time (ms) of every measured row from fused-op constants and the DRAM share ``eta``
    they share, (N,); ``warm_l2``: re-run on the same buffers, as vidur measured (a working set
    inside the L2 stays there)."""
    raw = _fused_raw(costs, eta, roof_p)
    with torch.no_grad():
        return _fused_forward(rows, raw, warm_l2)


def _fused_forward(rows: FusedRows, raw: dict[str, torch.Tensor], warm_l2: bool) -> torch.Tensor:
    names = sorted({op for op in rows.op})
    index = torch.tensor([names.index(op) for op in rows.op], dtype=torch.long)  # (N,)
    eta = torch.sigmoid(raw["eta"])  # the memory system's share, one for every op
    sm = torch.stack([raw[f"{n}.sm"] for n in names]).exp()[index]
    floor = torch.stack([raw[f"{n}.floor"] for n in names]).exp()[index]
    p = 1.0 + torch.nn.functional.softplus(raw["p"])
    hit = warm_l2_hit(rows.dram_bytes / rows.kernels, rows.l2_bytes) if warm_l2 else 0.0
    return fused_time_ms_of(rows.dram_bytes, rows.kernels, eta, sm, rows.dram_bw_bytes_per_s,
                            rows.sm_cycles_per_s, 0.0, p, hit, floor)


def fit_fused_ops(rows: FusedRows, steps: int = 600, lr: float = 0.05
                  ) -> tuple[dict[str, FusedOpCost], float, float]:
    """One DRAM share η for every fused op, and per op β (bytes per SM-cycle) and a kernel
    floor, and one soft-maximum exponent, minimising the mean squared log error with every op
    weighted alike; weak priors pull η towards 0.85 and β towards a side that does not bind,
    so a GPU whose rows never show a constant leaves it where the physics puts it. Returns
    (constants by op, η, exponent).

    η is the memory system's: what a streaming kernel draws of the datasheet bandwidth does not
    depend on the op it computes. An op that runs below that share on one GPU is held back by
    its SM side (its own loads in flight), and that β carries to a GPU whose DRAM is faster.
    One η per op would let an op held back by its SM side pass as DRAM-bound (the A40's RMSNorm
    draws about 0.6 of its bandwidth, where SiLU·mul and add draw 0.79-0.83) and price it too
    fast on a GPU whose DRAM is faster."""
    if not len(rows):
        raise ValueError("no measured fused-op rows to fit")
    ops = sorted(set(rows.op))
    raw = _fused_raw({op: FusedOpCost(_SM_PRIOR, 0.004) for op in ops}, _ETA_PRIOR, 4.0)
    for v in raw.values():
        v.requires_grad_(True)
    index = torch.tensor([ops.index(op) for op in rows.op], dtype=torch.long)
    weight = 1.0 / torch.bincount(index, minlength=len(ops)).double()[index] / len(ops)  # (N,)
    log_y = rows.latency_ms.log()
    eta0 = math.log(_ETA_PRIOR / (1 - _ETA_PRIOR))
    opt = torch.optim.Adam(list(raw.values()), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        pred = _fused_forward(rows, raw, warm_l2=True)
        loss = (weight * (pred.log() - log_y) ** 2).sum()
        prior = (raw["eta"] - eta0) ** 2 + sum((raw[f"{op}.sm"] - math.log(_SM_PRIOR)) ** 2
                                               for op in ops)
        (loss + _PRIOR_WEIGHT * prior / len(ops)).backward()
        opt.step()
    raw = {k: v.detach() for k, v in raw.items()}
    costs = {op: FusedOpCost(sm_bytes_per_cycle=float(raw[f"{op}.sm"].exp()),
                             floor_ms=float(raw[f"{op}.floor"].exp())) for op in ops}
    return (costs, float(torch.sigmoid(raw["eta"])),
            float(1.0 + torch.nn.functional.softplus(raw["p"])))


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
    (the same ops, measured on one's own GPU in the same layout), with their bytes and their GPU's
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
    return _vec_rows(read_vec_file(path))


def _vec_rows(ops: MeasuredOps) -> list[VecRow]:
    """The event-timed ops of ``ops`` (``VEC_OPS``), with their bytes and their GPU's DRAM
    bandwidth."""
    out: list[VecRow] = []
    bw = {gpu: ops.device(gpu).dram_bw_bytes_per_s for gpu in set(ops.gpu)}
    for i in range(len(ops)):
        if ops.fused[i]:
            continue
        op_class, passes = VEC_OPS[ops.op[i]]
        out.append(VecRow(ops.gpu[i], ops.source[i], ops.op[i], op_class, ops.rows[i],
                          ops.cols[i], float(passes * ops.rows[i] * ops.cols[i] * ops.elem_bytes[i]),
                          bw[ops.gpu[i]], float(ops.latency_ms[i])))
    return out


def _tensors(rows: Sequence[VecRow]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    def col(xs: list[float]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.float64)

    return (
        col([r.dram_bytes for r in rows]),
        col([r.bw_bytes_per_s for r in rows]),
        col([r.latency_ms for r in rows]),
    )


def fit_class(rows: Sequence[VecRow], steps: int = 400, lr: float = 0.05
              ) -> tuple[dict[str, float], float]:
    """(η per architecture, floor_ms) minimising the mean squared log error over ``rows``: one
    η for each architecture the rows were measured on (its memory system's share of the
    datasheet bandwidth), one event-timed floor for all (the hosts', not the GPUs')."""
    if not rows:
        raise ValueError("no measured rows to fit")
    dram, bw, y = _tensors(rows)  # (N,) each
    arch_of = {g: _architecture(g) for g in {r.gpu for r in rows}}
    archs = sorted(set(arch_of.values()))
    index = torch.tensor([archs.index(arch_of[r.gpu]) for r in rows], dtype=torch.long)
    raw = torch.tensor([1.0] * len(archs) + [math.log(0.02)], dtype=torch.float64,
                       requires_grad=True)
    opt = torch.optim.Adam([raw], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        eta = torch.sigmoid(raw[:-1])[index]
        pred = memory_time_ms(dram, torch.ones_like(dram), eta, raw[-1].exp(), bw)
        loss = ((pred.log() - y.log()) ** 2).mean()
        loss.backward()
        opt.step()
    etas = torch.sigmoid(raw[:-1].detach())
    return ({a: float(e) for a, e in zip(archs, etas)}, float(raw[-1].detach().exp()))


def shared_eta(by_architecture: Mapping[str, float]) -> float:
    """The η of an architecture no measurement covers: the geometric mean over the measured
    architectures, each counting once."""
    return math.exp(sum(math.log(e) for e in by_architecture.values()) / len(by_architecture))


def _architecture(gpu: str) -> str:
    return get_device(gpu).architecture


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
            by_arch, floor = fit_class(train, steps)
            for gpu in sorted({r.gpu for r in test}):
                eta = by_arch.get(_architecture(gpu), shared_eta(by_arch))
                scores[c][gpu] = {
                    "eta": round(eta, 4),
                    "floor_ms": round(floor, 5),
                    **_score([r for r in test if r.gpu == gpu], eta, floor),
                }
    classes: dict[str, dict[str, Any]] = {}
    for c, items in by_class.items():
        by_arch, floor = fit_class(items, steps)
        classes[c] = {
            "eta": round(shared_eta(by_arch), 4),
            "eta_by_architecture": {a: round(e, 4) for a, e in by_arch.items()},
            "floor_ms": round(floor, 5),
            "fitted_on": sorted({r.op for r in items}),
        }
    for c, src in BORROWED.items():
        classes[c] = {**{k: classes[src][k] for k in ("eta", "eta_by_architecture", "floor_ms")},
                      "borrowed_from": src}
    fused = _fused_table(data_dir, steps, exclude_chips, metrics)
    return {
        "format": SHIPPED["op_costs"].format,
        "version": VERSION,
        "model": "time = kernels * launch_ms + dram_bytes / (eta * dram_bw_bytes_per_s); eta "
                 "per architecture where one was measured (eta_by_architecture), else the "
                 "geometric mean over the measured architectures (eta)",
        "classes": classes,
        "launch_ms": LAUNCH_MS,
        "provenance": {
            "data": "NeuSight vec/neusight.csv.gz (MIT License, Copyright (c) 2025 Georgia "
            "Institute of Technology and Microsoft Corporation): float32 elementwise, layer norm "
            "and softmax latencies timed with CUDA events; the same ops measured by this "
            "project on an H200 (benchmarks/data/h200/vec, MIT License)",
            "train_gpus": sorted({r.gpu for r in rows}),
            "fit": f"Adam on squared log error, {steps} steps, per op class: an eta per "
                   "architecture, one floor",
            "launch_ms": "not fitted: a kernel's cost back to back on one stream (the measured "
            "floor_ms includes CUDA-event overhead)",
        },
        "leave_chip_out": scores,
        "fused_ops": fused,
    }


def _fused_table(data_dir: str | Path, steps: int, exclude_chips: Sequence[str],
                 metrics: bool) -> dict[str, Any]:
    """The ``fused_ops`` section: constants fitted on every vidur GPU but ``exclude_chips``'
    boards, and (with ``metrics``) each chip's scores from a fit without it."""
    rows = load_fused(data_dir)
    rows = rows.select(torch.tensor([chip_of(g) not in exclude_chips for g in rows.gpu]))
    fused_steps = max(steps * 3 // 2, 1)
    scores: dict[str, dict[str, Any]] = {}
    for chip in sorted({chip_of(g) for g in rows.gpu}) if metrics else []:
        held = torch.tensor([chip_of(g) == chip for g in rows.gpu])
        test = rows.select(held)
        pred = predict_fused(test, *fit_fused_ops(rows.select(~held), steps=fused_steps))
        for op in sorted(set(test.measured_op)):
            for gpu in sorted(set(test.gpu)):
                keep = torch.tensor([o == op and g == gpu
                                     for o, g in zip(test.measured_op, test.gpu)])
                big = keep & (test.latency_ms >= FUSED_MIN_MS)
                s, small = summarize_errors(pred[big], test.latency_ms[big]), keep & ~big
                scores.setdefault(op, {})[gpu] = {
                    "n": s.rows, "mape_pct": round(100 * s.mape, 2),
                    "median_ape_pct": round(100 * s.median_ape, 2),
                    "n_below_min_ms": int(small.sum()),
                }
    costs, eta, p = fit_fused_ops(rows, steps=fused_steps)
    return {
        "model": "time = kernels * launch_ms + dram_bytes * ((1 / (eta * dram_bw))^p + "
                 "(1 / (sm_bytes_per_cycle * sm_count * boost_clock))^p)^(1/p)",
        "roof_p": round(p, 4),
        "eta": round(eta, 4),
        "ops": {op: {"sm_bytes_per_cycle": round(c.sm_bytes_per_cycle, 4),
                     "floor_ms": round(c.floor_ms, 5)} for op, c in costs.items()},
        "data": "vidur vec/vidur.csv.gz (MIT License, Copyright (c) Microsoft Corporation): "
                "fp16 kernel times of fused LLM-layer ops on A100-SXM4-80GB and A40",
        "train_gpus": sorted(set(rows.gpu)),
        "min_ms": FUSED_MIN_MS,
        "fit": f"Adam on squared log error, {fused_steps} steps, every op weighted alike; "
               "measured re-runs keep a working set inside the L2 warm",
        "leave_chip_out": scores,
    }


def main(argv: Sequence[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(root / ".." / "shared" / "data"))
    parser.add_argument("--out", default=str(root / "torch_gemm_cost" / "data" / "op_costs.json"))
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
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
    lines.append(f"fused op (vidur, ops >= {FUSED_MIN_MS} ms)  gpu held out          "
                 "rows  MAPE%  medAPE%")
    for op, per_gpu in table["fused_ops"]["leave_chip_out"].items():
        for gpu, m in per_gpu.items():
            lines.append(f"{op:34s} {gpu:21s} {m['n']:5d} {m['mape_pct']:6.1f} "
                         f"{m['median_ape_pct']:7.1f}")
    print("\n".join(lines))  # the script's output: the leave-GPU-out evaluation
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
