"""Fit each host's costs (``predict.host.HostCosts``) on KernelBench's v0 timings.

KernelBench (MIT, ScalingIntelligence/KernelBench) times 250 small PyTorch programs with a CUDA
event pair around ``model(*inputs)``, on several GPUs at several clouds (``board``: one GPU at
one cloud, so one kind of host). Most v0 programs are small enough that the host's Python,
dispatch and launches set their time. Each program is captured and priced once per GPU that
timed it as KernelBench runs it (``estimate(..., mode=kernelbench.MODE, timing="kernel")``: one
forward without autograd, the modules' training flags as built; its kernels in issue order,
``predict.call.KernelSequence``), and each board's costs are fitted to its timings through the
same schedule ``estimate`` evaluates:

- eager (``eager``): ``eager_call_ms`` and ``eager_op_ms`` through ``event_time_ms``, a view
  at an op's cost (``eager_view_ms``: the timings cannot tell the two apart);
- compiled without CUDA graphs (``compile_inductor_default``,
  ``..._max-autotune-no-cudagraphs``): ``compiled_call_ms``, ``compiled_kernel_ms``;
- CUDA graph replays (``compile_cudagraphs`` over the eager kernels, ``..._reduce-overhead``
  and ``..._max-autotune`` over inductor's): ``graph_call_ms`` through ``graph_time_ms``.

Each by Adam on the mean absolute log error (robust: a program whose GPU time the predictor
misses should not drag a host's costs), costs kept positive through their logs. The GPU times
are the predictor's, never fitted here. ``leave_chip_out`` scores each chip's boards with the
prior of the other chips' hosts (``HostCostTable.prior``), as ``estimate`` prices a GPU.

    python -m torch_gemm_cost.train.host [--data ../shared/data] [--out torch_gemm_cost/data/host_costs.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import get_device
from ..measured.kernelbench import MODE, build, programs
from ..predict.call import ISSUE_KINDS, KernelSequence, input_copy_ms
from ..predict.host import (
    COST_FIELDS,
    VERSION,
    HostCosts,
    HostCostTable,
    event_time_ms,
    graph_time_ms,
)
from ..predict.registry import SHIPPED

__all__ = ["GROUPS", "SETS", "HostRow", "duplicate_boards", "fit_group", "fit_host_costs",
           "host_name", "load_rows", "main", "predict_rows"]

log = logging.getLogger(__name__)

# KernelBench mode -> (the group of costs it fits, compiled)
GROUPS: dict[str, tuple[str, bool]] = {
    "eager": ("eager", False),
    "compile_inductor_default": ("compiled", True),
    "compile_inductor_max-autotune-no-cudagraphs": ("compiled", True),
    "compile_cudagraphs": ("graph", False),
    "compile_inductor_reduce-overhead": ("graph", True),
    "compile_inductor_max-autotune": ("graph", True),
}
# the problem sets whose timings fit hosts: v0 (January-June 2025, PyTorch 2.5) and v0.1
# (August 2025-January 2026, a newer PyTorch), each (board, set) one host
SETS: tuple[str, ...] = ("v0", "v0.1")
# NB: two eager costs are pulled towards what they are, as the timings alone cannot place them.
# An issue without a kernel (a view, an allocation, a detach, a composite's inner op) is a
# dispatcher hop, mostly from C++ inside one Python-level call: about 1-3 µs against an op's
# 10-40 µs, but its count moves with the ops' (fitted freely, one board's came out dearer than
# its ops, another's four times cheaper at the same error). Entering the call (the module's
# __call__, the event record) is some µs, but on v0.1, whose programs all run 1 ms or more,
# a free fit made it 0.7-2.7 ms: the GPU models' misses, not the host. Each cost's log is
# pulled towards PULLS' value with weight PULL per squared log-ratio, so the timings move it
# only where they tell it apart.
PULLS: dict[str, float] = {"eager_view_ms": 0.002, "eager_call_ms": 0.01}
PULL = 0.05


# the costs each group fits, and where a fit starts (ms)
_FITS: dict[str, dict[str, float]] = {
    "eager": {"eager_call_ms": 0.01, "eager_op_ms": 0.01, "eager_view_ms": 0.002},
    "compiled": {"compiled_call_ms": 0.03, "compiled_kernel_ms": 0.01},
    "graph": {"graph_call_ms": 0.03},
}


@dataclass(frozen=True)
class HostRow:
    """One canonical timing with its program's issues on the GPU that timed it; ``host``:
    the (board, problem set) it fits (``host_name``)."""

    host: str
    board: str
    problem_set: str
    date: str
    gpu: str  # catalog id
    chip: str
    mode: str
    program: str
    measured_ms: float
    issues: KernelSequence
    copy_ms: float  # a graph replay's input copies on this GPU


def host_name(board: str, problem_set: str) -> str:
    """A fitted host's name: its board, and the problem set when not v0 (the v0.1 timings ran
    months later with a newer PyTorch: another host though the same cloud)."""
    return board if problem_set == "v0" else f"{board}/{problem_set}"


def _timings(data: Path) -> Any:
    """The canonical timings of the problem sets ``SETS``, without a board whose eager
    timings repeat another's row for row (``A6000_babel_v0.0`` is ``A6000_babel``'s v0 file
    under a second name: counted once)."""
    import pandas as pd

    path = data / "kernelbench" / "timings.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"no KernelBench timings at {path} (expected ../shared/data)")
    df = pd.read_csv(path)
    df = df[(df.canonical == 1) & df.problem_file.notna() & df.problem_set.isin(list(SETS))
            & df["mode"].isin(list(GROUPS))]
    return df[~df.board.isin(duplicate_boards(df))]


def duplicate_boards(df: Any) -> set[str]:
    """Boards whose every eager timing (problem, problem set, mean) is another board's: the
    one with fewer rows, or the later name where both hold the same."""
    eager = df[df["mode"] == "eager"]
    held = {b: set(zip(g.problem_file, g.problem_set, g.mean_ms))
            for b, g in eager.groupby("board")}
    return {b for b, mine in held.items() if mine and any(
        o != b and mine <= theirs and (len(theirs) > len(mine) or o < b)
        for o, theirs in held.items())}


def load_rows(data: str | Path, levels: Sequence[int] = (1, 2, 3)) -> list[HostRow]:
    """Every canonical timing of ``levels`` (v0 and v0.1) with its program's issues, each program
    captured once and priced on every GPU that timed it, eager and compiled."""
    from ..api import compare  # the whole pipeline prices the programs

    data = Path(data)
    df = _timings(data)
    df = df[df.level.isin(list(levels))]
    ids = {name: get_device(name).id for name in df.gpu_name.unique()}
    zero = HostCosts(0.0, 0.0, 0.0)
    rows: list[HostRow] = []
    for tree in sorted({f.split("/")[1] for f in df.problem_file}):
        for prog in programs(data / "kernelbench" / "problems" / tree, tuple(levels)):
            mine = df[df.problem_file.str.endswith(f"{tree}/level{prog.level}/{prog.name}")]
            if mine.empty:
                continue
            gpus = sorted({ids[g] for g in mine.gpu_name})
            specs = [get_device(g) for g in gpus]
            for compiled in (False, True):
                wanted = mine[[GROUPS[m][1] == compiled for m in mine["mode"]]]
                if wanted.empty:
                    continue
                try:
                    built = build(prog)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        reports = compare(built.model, built.inputs, devices=specs,
                                          mode=MODE, compiled=compiled, timing="kernel",
                                          host=zero)
                except Exception as e:  # noqa: BLE001 - a program that fails is left out
                    log.info("%s/%s: %s", tree, prog.name, e)
                    continue
                seq = {spec.id: r.call.issues for spec, r in zip(specs, reports)
                       if r.call is not None}
                for r in wanted.itertuples():
                    spec = get_device(ids[r.gpu_name])
                    s = seq[spec.id]
                    rows.append(HostRow(host_name(r.board, r.problem_set), r.board,
                                        r.problem_set, str(r.date), spec.id,
                                        spec.chip or spec.id, r.mode, prog.name,
                                        float(r.mean_ms), s, input_copy_ms(s.input_bytes, spec)))
            log.info("%s level%d %s", tree, prog.level, prog.name)
    return rows


_Chunk = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _padded(rows: Sequence[HostRow], chunk: int = 64) -> list[_Chunk]:
    """The rows in chunks of similar length, each (row index (C,), gpu ms (C, N), kind (C, N)
    long, copy ms (C,)), N the chunk's longest sequence; a padding issue is of kind
    ``len(ISSUE_KINDS)``, which costs nothing and runs nothing. Chunks keep a 12,000-issue
    model from padding every short program to its length."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i].issues.gpu_ms))
    out = []
    for at in range(0, len(order), chunk):
        idx = order[at:at + chunk]
        n = max(len(rows[i].issues.gpu_ms) for i in idx)
        gpu = torch.zeros(len(idx), n, dtype=torch.float64)
        kind = torch.full((len(idx), n), len(ISSUE_KINDS), dtype=torch.long)
        for j, i in enumerate(idx):
            k = len(rows[i].issues.gpu_ms)
            gpu[j, :k], kind[j, :k] = rows[i].issues.gpu_ms, rows[i].issues.kind
        out.append((torch.tensor(idx), gpu, kind,
                    torch.tensor([rows[i].copy_ms for i in idx], dtype=torch.float64)))
    return out


def predict_rows(rows: Sequence[HostRow] | list[_Chunk], group: str,
                 costs: dict[str, torch.Tensor]) -> torch.Tensor:
    """(R,) each row's time under ``group``'s schedule with ``costs`` (ms, scalar tensors;
    differentiable in them); ``rows`` may be their ``_padded`` chunks."""
    chunks = rows if rows and isinstance(rows[0], tuple) else _padded(rows)  # type: ignore[arg-type]
    zero = torch.zeros((), dtype=torch.float64)
    if group == "eager":
        per_kind = torch.stack([costs["eager_op_ms"],
                                costs.get("eager_view_ms", costs["eager_op_ms"]),
                                costs["eager_op_ms"], zero])
        call = costs["eager_call_ms"]
    else:  # compiled; a graph replay issues nothing
        per_kind = torch.stack([costs.get("compiled_kernel_ms", zero)] * 3 + [zero])
        call = costs.get("compiled_call_ms", zero)
    parts, index = [], []
    for idx, gpu, kind, copy in chunks:  # type: ignore[misc]
        if group == "graph":
            parts.append(graph_time_ms(gpu, copy, costs["graph_call_ms"]))
        else:
            parts.append(event_time_ms(per_kind[kind], gpu, call.expand(gpu.shape[0])))
        index.append(idx)
    if not parts:
        return torch.zeros(0, dtype=torch.float64)
    out = torch.empty(sum(len(i) for i in index), dtype=torch.float64)
    return out.index_put((torch.cat(index),), torch.cat(parts))


def fit_group(rows: Sequence[HostRow], group: str, steps: int = 200, lr: float = 0.05
              ) -> dict[str, float]:
    """The costs of ``group`` (``_FITS``) that fit ``rows`` best, by Adam on the mean absolute
    log error (an eager view's and call's costs pulled towards ``PULLS``)."""
    raw = {k: torch.tensor(v, dtype=torch.float64).log().requires_grad_()
           for k, v in _FITS[group].items()}
    measured = torch.tensor([r.measured_ms for r in rows], dtype=torch.float64).log()
    opt = torch.optim.Adam(list(raw.values()), lr=lr)
    padded = _padded(rows)
    for _ in range(steps):
        opt.zero_grad()
        pred = predict_rows(padded, group, {k: v.exp() for k, v in raw.items()})
        loss = (pred.clamp(min=1e-9).log() - measured).abs().mean()
        for name, toward in PULLS.items():
            if name in raw:
                loss = loss + PULL * (raw[name] - math.log(toward)) ** 2
        loss.backward()
        opt.step()
    return {k: float(v.detach().exp()) for k, v in raw.items()}


def _mape(rows: Sequence[HostRow], group: str, costs: HostCosts) -> float:
    with torch.no_grad():
        pred = predict_rows(rows, group, {k: torch.tensor(v, dtype=torch.float64)
                                          for k, v in costs.to_dict().items() if v is not None})
    meas = torch.tensor([r.measured_ms for r in rows], dtype=torch.float64)
    return float(((pred - meas).abs() / meas).mean() * 100)


def fit_host_costs(rows: Sequence[HostRow], steps: int = 200) -> dict[str, Any]:
    """The table (``data/host_costs.json``'s content): each host's fitted costs (one per
    board and problem set), and the scores of each chip's hosts under the prior of the other
    chips' hosts of their own generation (``mape_pct``) and under the default prior, the
    newest generation's (``default_mape_pct``)."""
    hosts: dict[str, Any] = {}
    for host in sorted({r.host for r in rows}):
        mine = [r for r in rows if r.host == host]
        fitted: dict[str, float] = {}
        counts: dict[str, int] = {}
        for group in _FITS:
            grows = [r for r in mine if GROUPS[r.mode][0] == group]
            counts[group] = len(grows)
            if len(grows) >= 20:  # a cost needs enough programs to stand on
                fitted.update(fit_group(grows, group, steps))
        if "eager_op_ms" not in fitted:
            continue
        costs = HostCosts.from_dict({f: fitted.get(f) for f in COST_FIELDS})
        hosts[host] = {"chip": mine[0].chip, "board": mine[0].board,
                       "generation": mine[0].problem_set, "date": max(r.date for r in mine),
                       "gpus": sorted({r.gpu for r in mine}), "rows": counts,
                       "costs": costs.to_dict()}
    table = HostCostTable.from_dict({"hosts": hosts})
    scores: dict[str, Any] = {}
    for host, v in hosts.items():
        own = table.prior([v["chip"]], v["generation"]).mid
        default = table.prior([v["chip"]]).mid
        for group in _FITS:
            grows = [r for r in rows if r.host == host and GROUPS[r.mode][0] == group]
            if not grows or (group == "graph" and own.graph_call_ms is None):
                continue
            scores.setdefault(host, {})[group] = {
                "n": len(grows), "mape_pct": round(_mape(grows, group, own), 1),
                "default_mape_pct": round(_mape(grows, group, default), 1),
                "own_fit_mape_pct": round(_mape(grows, group, table.hosts[host]), 1)}
    return {
        "format": SHIPPED["host_costs"].format,
        "version": VERSION,
        "model": "eager: max_j (h_j + g_j + ... + g_N), h_j = eager_call_ms + the issue costs "
                 "of ops 1..j (eager_op_ms per op with a kernel, eager_view_ms per issue "
                 "without one), g the predicted kernel times; compiled: the same with "
                 "compiled_call_ms and compiled_kernel_ms per kernel; graph replay: "
                 "graph_call_ms + input copies + the kernels' sum",
        "hosts": hosts,
        "provenance": {
            "data": "KernelBench (MIT License, Copyright (c) 2024 Stanford University, "
                    "ScalingIntelligence/KernelBench): canonical v0 and v0.1 timings of "
                    "kernelbench/timings.csv.gz, CUDA events around model(*inputs), 100 "
                    "trials per program; one host per board and problem set, a board whose "
                    "eager timings repeat another's counted once",
            "fit": f"per host and group of modes, Adam on the mean absolute log error, "
                   f"{steps} steps, the log of each of {PULLS} (ms) pulled towards it with "
                   f"weight {PULL} per squared log-ratio; the GPU times are the shipped "
                   f"predictors', not fitted here",
            "prior": "the median of each cost over the hosts of the newest generation (v0.1) "
                     "whose GPU is another chip; the range of the other chips' hosts of "
                     "every generation is the interval",
        },
        "leave_chip_out": scores,
    }


def main(argv: Sequence[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(root / ".." / "shared" / "data"))
    parser.add_argument("--out", default=str(root / "torch_gemm_cost" / "data" /
                                             "host_costs.json"))
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    table = fit_host_costs(load_rows(args.data, args.levels), args.steps)
    table["provenance"]["command"] = "python -m torch_gemm_cost.train.host " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("/"))
    Path(args.out).write_text(json.dumps(table, indent=1) + "\n")
    head = "host                   chip    group     rows  held-out MAPE%  default-prior%"
    lines = [head + "  own-fit MAPE%"]
    for host, groups in table["leave_chip_out"].items():
        for group, m in groups.items():
            lines.append(f"{host:22s} {table['hosts'][host]['chip']:7s} {group:9s} "
                         f"{m['n']:5d} {m['mape_pct']:14.1f} {m['default_mape_pct']:15.1f} "
                         f"{m['own_fit_mape_pct']:14.1f}")
    print("\n".join(lines))
    for host, v in table["hosts"].items():
        print(host, {k: x for k, x in v["costs"].items()})
    print(f"median eager_op_ms over hosts: "
          f"{statistics.median(v['costs']['eager_op_ms'] for v in table['hosts'].values()):.4f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
