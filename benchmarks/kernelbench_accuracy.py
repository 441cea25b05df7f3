"""KernelBench held out: every program's whole-call time as ``estimate()`` predicts it, against
the time KernelBench measured on each visible GPU, per level, problem set and mode.

    python benchmarks/kernelbench_accuracy.py      # writes benchmarks/results/kernelbench_accuracy.md
    python benchmarks/kernelbench_accuracy.py --levels 1 --boards L40S_matx3 --save-rows rows.csv

Each program of a problem tree the canonical timings name (``measured.kernelbench``) is built as
a user builds it and estimated on every GPU that timed it, with one ``compare()`` call per
(compiled, timing) its timings need (``MODES``), as KernelBench runs it: ``mode="forward"``,
one forward without autograd with each module's training flag as ``Model(*init_inputs)`` leaves
it (``estimate_program``). KernelBench's timing script (ScalingIntelligence/KernelBench,
``scripts/generate_baseline_time.py``, ``measure_program_time``) builds ``Model(*init_inputs)``
inside ``torch.no_grad()``, moves it to the GPU and times ``model(*inputs)`` with CUDA events,
never calling ``.eval()``: every module keeps nn.Module's default ``training=True``, so a
BatchNorm normalizes with its batch's statistics (a pass over its input for them, its running
statistics updated, then the normalizing pass) and a dropout draws its mask. The timings are
scored by mode: ``eager`` against ``estimate(timing="event")``, ``compile_cudagraphs`` (CUDA
graphs over the eager kernels) against ``timing="graph"``, the inductor modes against
``compiled=True`` with ``"event"`` (no CUDA graphs) or ``"graph"`` (``reduce-overhead``,
``max-autotune``). Rows under ``--min-ms`` (0.05 ms) are left out of the MAPE, as the figures
of record are.

The baseline, in the same run, is a pure roofline of the same records: each GEMM at
max(FLOPs / dense peak of its dtype, compulsory bytes / DRAM bandwidth), each other op at its
bytes / DRAM bandwidth, no launches, nothing fused (the compiled rows get the same sum).

The GPU side of the predictor is not fitted on KernelBench, but for one constant and one rule
read off its programs: the depthwise kernel's issue share (``predict/stencil.py``, fitted on
``82``-``85`` of every board here) and the depth phases of strided 3D transposed convolutions
(``records/handlers.py``, read off ``73``, ``77`` and their kin). ``GEMM fit`` says whether a board
of the GPU's chip was in the GEMM predictor's fit (``hybrid_weights.json``: ``trained_gpus``);
``op fit`` the same for the non-GEMM op cost model (``op_costs.json``). The host's costs are
(``host_costs.json``, fitted on KernelBench's v0 and v0.1 timings by ``train/host.py``, one host
per board and problem set), and held out by chip: a GPU is priced with the median of the hosts of
the newest software generation (v0.1) whose GPU is another chip, as ``estimate`` prices it by
default (``host hosts``: how many; A10, A10G and RTX A6000 are one chip, GA102): v0's rows are
so priced with hosts of a later PyTorch, never their own.
The host costs are fitted on the programs captured as this benchmark prices them
(``measured.kernelbench.MODE``): a training-mode BatchNorm's ``num_batches_tracked`` increment
and a dropout's mask are issues there as here.
A board whose eager timings repeat another's (``A6000_babel_v0.0``) is counted once.

``--host-calibrated`` adds what a user gets once their own host is calibrated, not the default:
each host priced with its own costs, fitted on its timings of the other half of the programs
(``kernelbench_host``: two folds by program number parity), the GPU side held out as before.
``MAPE host-calibrated %`` takes the compiled and replay costs as ``calibrate --host`` writes
them (the prior scaled by the fitted eager op), ``MAPE host-fitted %`` the host's own fit of
them too.
"""

from __future__ import annotations

import argparse
import collections
import csv
import datetime
import json
import logging
import platform
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

import torch_gemm_cost as tgc
from torch_gemm_cost.hardware.catalog import DeviceSpec, get_device
from torch_gemm_cost.measured.kernelbench import MODE, build, programs
from torch_gemm_cost.predict.call import CallTime
from torch_gemm_cost.predict.host import HostCosts
from torch_gemm_cost.report import Comparison, CostReport
from torch_gemm_cost.train.host import duplicate_boards, host_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelbench_host import (
    Timing,
    as_calibrated,
    calibrated_ms,
    cross_fit_hosts,
    fold,
    host_rows,
)

RESULTS = Path(__file__).resolve().parent / "results" / "kernelbench_accuracy.md"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
WEIGHTS = Path(tgc.__file__).resolve().parent / "data"
# the mode KernelBench timed -> (compiled, timing the user's run has)
MODES: dict[str, tuple[bool, str]] = {
    "eager": (False, "event"),
    "compile_cudagraphs": (False, "graph"),
    "compile_inductor_default": (True, "event"),
    "compile_inductor_max-autotune-no-cudagraphs": (True, "event"),
    "compile_inductor_reduce-overhead": (True, "graph"),
    "compile_inductor_max-autotune": (True, "graph"),
}


def read_timings(data: Path) -> list[Timing]:
    """The canonical timings (``kernelbench/timings.csv.gz``), each GPU resolved from its driver
    name by the catalog (the ``gpu`` column is empty for boards the catalog lacked)."""
    import pandas as pd

    path = data / "kernelbench" / "timings.csv.gz"
    if not path.exists():
        raise SystemExit(f"no KernelBench timings at {path} (pass --data, the shared data folder)")
    df = pd.read_csv(path)
    df = df[(df.canonical == 1) & df.problem_file.notna() & df["mode"].isin(list(MODES))]
    df = df[~df.board.isin(duplicate_boards(df))]  # A6000_babel_v0.0 repeats A6000_babel
    ids = {name: get_device(name).id for name in df.gpu_name.unique()}
    return [Timing(r.board, ids[r.gpu_name], r.problem_set, r.problem_file.split("/")[1],
                   int(r.level), r.problem_file.split("/")[-1], r.mode, float(r.mean_ms),
                   str(r.date))
            for r in df.itertuples()]


def roofline_ms(report: CostReport, spec: DeviceSpec) -> float:
    """The records' pure roofline: no launches, no efficiency, nothing fused."""
    bw = spec.dram_bw_bytes_per_s
    total = 0.0
    for g in report.gemms:
        peak = spec.peak_flops_per_s(g.site.dtype)
        total += max(g.site.flops / peak, g.site.dram_bytes / bw)
    total += sum(o.op.dram_bytes / bw for o in report.others)
    return total * 1e3


def fitted_gpus() -> tuple[set[str], set[str]]:
    """The chips of the GPUs the GEMM predictor and the op cost model were fitted on."""
    gemm = json.loads((WEIGHTS / "hybrid_weights.json").read_text())["metadata"]["trained_gpus"]
    ops = json.loads((WEIGHTS / "op_costs.json").read_text())["provenance"]["train_gpus"]
    return ({get_device(g).chip for g in gemm}, {get_device(g).chip for g in ops})


def estimate_program(model: torch.nn.Module, inputs: tuple[Any, ...], specs: list[DeviceSpec],
                     compiled: bool, timing: str, predictor: Any = None) -> Comparison:
    """One report per GPU of ``model(*inputs)`` as KernelBench times it: ``compare`` with
    ``mode=MODE``, as a user prices a model built and called the same way."""
    return tgc.compare(model, inputs, devices=specs, mode=MODE, compiled=compiled,
                       timing=timing, predictor=predictor)


# (predicted ms, roofline ms, the host prior's source, the call ``estimate`` timed)
Priced = tuple[float, float, str, CallTime | None]


def predict(timings: list[Timing], data: Path, levels: tuple[int, ...],
            predictor: Any = None) -> dict[tuple[str, str, str, str], Priced | str]:
    """(tree, program, gpu, mode) -> its ``Priced``, or the error that stopped the program;
    one ``compare()`` per (compiled, timing) a program's timings need (``MODES``), over every
    GPU that timed it."""
    wanted: dict[tuple[str, str], dict[tuple[bool, str], set[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(set))
    for t in timings:
        wanted[t.tree, t.program][MODES[t.mode]].add(t.gpu)
    out: dict[tuple[str, str, str, str], Priced | str] = {}
    trees = sorted({t.tree for t in timings})
    for tree in trees:
        for prog in programs(data / "kernelbench" / "problems" / tree, levels):
            asks = wanted.get((tree, prog.name), {})
            for (compiled, timing), gpus in sorted(asks.items()):
                specs = [get_device(g) for g in sorted(gpus)]
                modes = [m for m, v in MODES.items() if v == (compiled, timing)]
                try:
                    built = build(prog)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        reports = estimate_program(built.model, built.inputs, specs,
                                                   compiled, timing, predictor)
                    for spec, rep in zip(specs, reports, strict=True):
                        for m in modes:
                            out[tree, prog.name, spec.id, m] = (
                                rep.total_ms, roofline_ms(rep, spec),
                                rep.call.host if rep.call else "", rep.call)
                except Exception as e:  # noqa: BLE001 - a program that fails is reported, not fatal
                    for g in gpus:
                        for m in modes:
                            out[tree, prog.name, g, m] = f"{type(e).__name__}: {e}"[:200]
            if asks:
                print(f"{tree} level{prog.level} {prog.name}", file=sys.stderr, flush=True)
    return out


def _hosts_in(source: str) -> str:
    """``KernelBench hosts (5, GA102 held out)`` -> ``5``."""
    return source.partition("(")[2].partition(",")[0].rstrip(")") or "-"


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100.0


def _shown(argv: list[str]) -> list[str]:
    """The command line as the results page shows it: the fits' folder a placeholder (it is
    this host's), the rows file left out (it changes no figure)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--save-rows" or arg.startswith("--save-rows="):
            skip = arg == "--save-rows"
        elif arg == "--cache" or arg.startswith("--cache="):
            out.append("--cache FOLDS")
            skip = arg == "--cache"
        else:
            out.append(arg)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="the shared data folder")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--boards", nargs="+", help="only these boards (the timings' board column)")
    ap.add_argument("--min-ms", type=float, default=0.05, help="score rows measured at or above")
    ap.add_argument("--save-rows", type=Path, help="CSV of every scored timing and its predictions")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--held-out", action="store_true",
                    help="price each GPU's GEMMs with a hybrid fitted without its chip "
                    "(benchmarks/e2e.py HeldOutByChip; about 15 minutes a chip on two cores)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="folder for the held-out fits, reused when present")
    ap.add_argument("--host-calibrated", action="store_true",
                    help="add the MAPE with each host's own costs, cross-fitted on its other "
                    "programs (what calibrating one's host gives)")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)

    timings = [t for t in read_timings(args.data) if t.level in args.levels
               and (not args.boards or t.board in args.boards)]
    predictor = None
    if args.held_out:
        from e2e import HeldOutByChip

        predictor = HeldOutByChip(args.data, cache=args.cache)
    preds = predict(timings, args.data, tuple(args.levels), predictor)
    gemm_chips, op_chips = fitted_gpus()
    if args.held_out:
        gemm_chips = set()  # every GPU's GEMMs priced by a fit without its chip

    scored: list[tuple[Timing, Priced]] = []
    failed: dict[tuple[str, str], str] = {}
    hosts: dict[str, str] = {}  # gpu -> the hosts its host prior holds
    for t in timings:
        got = preds.get((t.tree, t.program, t.gpu, t.mode))
        if isinstance(got, str) or got is None:
            failed[t.tree, t.program] = got or "not estimated"
            continue
        scored.append((t, got))
        hosts[t.gpu] = _hosts_in(got[2])
    # each row: (timing, predicted ms, roofline ms, (host-calibrated ms, host-fitted ms))
    rows: list[tuple[Timing, float, float, tuple[float, float] | None]] = [
        (t, got[0], got[1], None) for t, got in scored]
    unfitted = 0  # rows whose host the other fold could not fit: priced with the prior
    if args.host_calibrated:
        fits = cross_fit_hosts(host_rows(scored))
        measured: dict[tuple[str, int], HostCosts] = {}  # as calibrate --host writes them
        rows = []
        for t, (pred, roof, _, call) in scored:
            key = (host_name(t.board, t.problem_set), fold(t.program))
            spec = get_device(t.gpu)
            if key not in fits or call is None:
                unfitted += 1
                rows.append((t, pred, roof, (pred, pred)))
                continue
            if key not in measured:
                measured[key] = as_calibrated(fits[key], spec.chip or spec.id)
            rows.append((t, pred, roof, (calibrated_ms(call, measured[key], spec),
                                         calibrated_ms(call, fits[key], spec))))
    if args.save_rows:
        with args.save_rows.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["board", "gpu", "problem_set", "tree", "level", "program", "mode",
                        "measured_ms", "predicted_ms", "roofline_ms", "calibrated_ms",
                        "host_fitted_ms"])
            for t, p, r, c in rows:
                w.writerow([t.board, t.gpu, t.problem_set, t.tree, t.level, t.program, t.mode,
                            t.measured_ms, f"{p:.6g}", f"{r:.6g}",
                            *(("", "") if c is None else (f"{c[0]:.6g}", f"{c[1]:.6g}"))])

    # (measured, ours, roofline, (host-calibrated, host-fitted) or None), ms
    Vals = list[tuple[float, float, float, tuple[float, float] | None]]
    groups: dict[tuple[str, str, str, int, str], Vals] = collections.defaultdict(list)
    for t, p, r, c in rows:
        if t.measured_ms >= args.min_ms:
            groups[t.gpu, t.board, t.problem_set, t.level, t.mode].append((t.measured_ms, p, r, c))
    cal_head = (["MAPE host-calibrated %", "MAPE host-fitted %"] if args.host_calibrated
                else [])

    def scores(vals: Vals) -> list[Any]:
        """rows, MAPE (prior), [MAPE host-calibrated, host-fitted], roofline MAPE, median
        pred/meas"""
        cal = [round(statistics.fmean(_ape(c[i], m) for m, _, _, c in vals if c is not None), 1)
               for i in range(2 if args.host_calibrated else 0)]
        return [len(vals), round(statistics.fmean(_ape(p, m) for m, p, _, _ in vals), 1), *cal,
                round(statistics.fmean(_ape(r, m) for m, _, r, _ in vals), 1),
                round(statistics.median(p / m for m, p, _, _ in vals), 2)]

    table = []
    for (gpu, board, pset, level, mode), vals in sorted(groups.items()):
        chip = get_device(gpu).chip
        table.append([gpu, board, "yes" if chip in gemm_chips else "no",
                      "yes" if chip in op_chips else "no", hosts.get(gpu, "-"), pset, level,
                      mode, *scores(vals)])
    score_head = ["rows", "MAPE %", *cal_head, "roofline MAPE %", "median pred/meas"]
    headers = ["gpu", "board", "GEMM fit", "op fit", "host hosts", "set", "level", "mode",
               *score_head]

    by: dict[tuple[str, int, str], Vals] = collections.defaultdict(list)
    for (gpu, board, pset, level, mode), vals in groups.items():
        by[pset, level, mode] += vals
    summary = [[pset, level, mode, *scores(vals)] for (pset, level, mode), vals in sorted(by.items())]

    calibrated = [] if not args.host_calibrated else [
        "",
        ("`MAPE %` is the default, what `estimate` gives with no calibration: the host priced "
         "by the held-out prior above. The two columns beside it are not the default: they "
         "are what a user gets once their own host is calibrated. Each row's host costs are "
         "that host's own (its board and problem set), fitted by `train.host.fit_host_costs` "
         "on its timings of the other programs only, cross-fitted in two folds by program "
         "number parity (the odd programs priced with the costs fitted on the even ones and "
         "the other way round); the GPU side is held out as in `MAPE %`, and each row is "
         "priced as `estimate(..., host=HostCosts(...))` prices it. `MAPE host-calibrated %` "
         "stands for `torch-gemm-cost calibrate --host` on the user's machine: it measures "
         "the eager costs (here the fitted ones stand for its measurement) and writes the "
         "compiled and CUDA graph costs as the fitted hosts' prior (without the GPU's chip) "
         "scaled by the eager op (`calibrate.host.host_section`). `MAPE host-fitted %`: every "
         "cost the host's own, the compiled and graph ones too, as a calibration that timed "
         "compiled programs would give (`calibrate --host` does not); a cost the other fold "
         "has too few rows to fit (20 per group of modes: the compiled costs of the v0.1 "
         f"hosts) is the prior's. {unfitted} rows whose host the other fold could not fit "
         "keep the prior's price in both. `median pred/meas` is the default's."),
    ]
    cmd = "python benchmarks/kernelbench_accuracy.py " + " ".join(_shown(sys.argv[1:]))
    lines = [
        "# KernelBench: whole-call times held out",
        "",
        (f"`{cmd.strip()}` on {datetime.date.today()}: torch {torch.__version__}, "
        f"torch_gemm_cost {tgc.__version__}, {platform.machine()}. Canonical timings of "
        f"`kernelbench/timings.csv.gz`, rows measured at {args.min_ms} ms or more, each "
        f"program estimated as KernelBench runs it (`mode='{MODE}'`: one forward "
        "without autograd, the modules' training flags as `Model(*init_inputs)` leaves them, "
        "so BatchNorm on batch statistics and dropout on); "
        "`eager` scored against `estimate(timing='event')`, `compile_cudagraphs` against "
        "`timing='graph'`, the inductor modes against `estimate(compiled=True)` with "
        "`timing='event'` (no CUDA graphs) or `'graph'` (reduce-overhead, max-autotune). "
        "The GPU side is not fitted on KernelBench, but for one constant and one rule read "
        "off its programs: the depthwise kernel's issue share (fitted on `82`-`85` of every "
        "board here, so those rows are in-sample for it) and the depth phases of strided 3D "
        "transposed convolutions (read off `73`, `77` and their kin). `GEMM fit` / `op fit`: a board of the "
        "GPU's chip was in the GEMM predictor's / op cost model's fit (with `--held-out`, "
        "each GPU's GEMMs are priced by a hybrid refitted without its chip). The host costs are "
        "fitted on KernelBench's v0 and v0.1 timings, one host per board and problem set, and "
        "held out by chip: each GPU is priced as `estimate` prices it by default, with the "
        "median of the `host hosts` hosts of the newest generation (v0.1) whose GPU is "
        "another chip, v0's rows included. A board whose eager "
        "timings repeat another's (A6000_babel_v0.0) is counted once. "
        "Roofline: the same records at max(FLOPs/peak, bytes/bandwidth), no launches or host."),
        *calibrated,
        "",
        "## By problem set, level and mode (every board)",
        "",
        tabulate(summary, headers=["set", "level", "mode", *score_head], tablefmt="github"),
        "",
        "## Per GPU",
        "",
        tabulate(table, headers=headers, tablefmt="github"),
        "",
        f"## Programs that failed ({len(failed)})",
        "",
    ]
    lines += [f"- `{tree}/{prog}`: {err}" for (tree, prog), err in sorted(failed.items())] \
        or ["None."]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:14]))


if __name__ == "__main__":
    main()
