"""Capture and estimate every KernelBench program: does each one estimate, how long its capture
takes, what stopped the ones that fail, and which ops have no cost model.

    python benchmarks/kernelbench_capture.py      # writes benchmarks/results/kernelbench_capture.md
    python benchmarks/kernelbench_capture.py --tree v0.1_249ad22 --device l40s --timeout-s 30

Each program is built as ``measured.kernelbench.build`` builds it (the meta device; the CPU for
a constructor that reads values), captured once with ``capture()`` (timed: the method that took
it) and estimated once with ``estimate()`` on the device, its dtype the model's own. Times are
process CPU seconds on one torch thread (wall seconds swing with the host's load); the first
capture also pays torch's lazy imports. A program that uses more than ``--timeout-s`` seconds of
CPU time is stopped and listed as a failure. Mamba-2's programs import einops
(``pip install -e ".[kernelbench]"``).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import logging
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from tabulate import tabulate

import torch_gemm_cost as tgc
from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.measured.kernelbench import LEVELS, KernelBenchProgram, build, programs

RESULTS = Path(__file__).resolve().parent / "results" / "kernelbench_capture.md"
# the original sizes, and the scaled-up ones (with the one program that makes CUDA inputs)
TREES = ("v0_0228e57", "v0.1_48eb3a0")
_T = TypeVar("_T")


class ProgramTimeout(BaseException):
    """A program ran past its time limit (a BaseException: capture's fallbacks catch Exception
    and must not swallow it)."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Stop the block with ``ProgramTimeout`` once it has used ``seconds`` of process CPU time
    (SIGPROF, main thread only): CPU time, so a busy host does not stop a program early."""
    def stop(signum: int, frame: Any) -> None:
        raise ProgramTimeout(f"ran past the {seconds} s CPU-time limit")

    previous = signal.signal(signal.SIGPROF, stop)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


@dataclass
class Outcome:
    """What one program did: where it was built, the capture method and CPU seconds, the
    estimate, or the stage that failed and why."""

    program: KernelBenchProgram
    built_on: str = ""
    method: str = ""
    build_s: float = 0.0
    capture_s: float = 0.0
    estimate_s: float = 0.0
    total_ms: float = 0.0
    gemms: int = 0
    failed_stage: str = ""
    reason: str = ""
    unmodelled: collections.Counter[str] = field(default_factory=collections.Counter)


def _timed(fn: Callable[[], _T]) -> tuple[_T, float]:
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def run_program(program: KernelBenchProgram, device: str, timeout_s: int) -> Outcome:
    """Build, capture and estimate one program within ``timeout_s`` seconds."""
    out = Outcome(program)
    stage = "build"
    try:
        with time_limit(timeout_s):
            built, out.build_s = _timed(lambda: build(program))
            out.built_on = built.device
            stage = "capture"
            captured, out.capture_s = _timed(lambda: capture(built.model, built.inputs))
            out.method = captured.method
            stage = "estimate"
            report, out.estimate_s = _timed(
                lambda: tgc.estimate(built.model, built.inputs, device=device))
            out.total_ms, out.gemms = report.total_ms, len(report.gemms)
            out.unmodelled.update(o.op.op for o in report.unmodelled)
    except (Exception, ProgramTimeout) as e:  # noqa: BLE001 - each failure is reported
        out.failed_stage, out.reason = stage, _reason(e)
    return out


def level_rows(outcomes: list[Outcome]) -> list[list[Any]]:
    rows = []
    for level in LEVELS:
        mine = [o for o in outcomes if o.program.level == level]
        ok = [o for o in mine if not o.failed_stage]
        methods = collections.Counter(o.method for o in ok)
        caps = [o.capture_s for o in ok] or [0.0]
        unmod = sum(sum(o.unmodelled.values()) for o in mine)
        rows.append([level, len(mine), len(ok), len(mine) - len(ok),
                     sum(o.built_on == "cpu" for o in mine),
                     " / ".join(str(methods[m]) for m in ("dispatch", "export", "eager")),
                     f"{statistics.median(caps):.2f}", f"{max(caps):.2f}", f"{sum(caps):.1f}",
                     f"{sum(o.estimate_s for o in ok):.1f}", unmod])
    return rows


LEVEL_HEADERS = ["level", "programs", "estimated", "failed", "built on CPU",
                 "captured by dispatch / export / eager", "capture s median", "max",
                 "total", "estimate s total", "unmodelled ops"]


def _program(o: Outcome) -> str:
    return f"level{o.program.level}/{o.program.name}"


def tree_section(tree: str, outcomes: list[Outcome], device: str) -> list[str]:
    """One problem tree's section: per level, failures, ops without a cost model, programs
    built on the CPU, the slowest programs."""
    ok = [o for o in outcomes if not o.failed_stage]
    unmodelled = sum(sum(o.unmodelled.values()) for o in outcomes)
    summary = (f"**{len(ok)} of {len(outcomes)} programs estimate**, {unmodelled} ops "
               "without a cost model.")
    lines = [f"## `{tree}`", "", summary, "",
             tabulate(level_rows(outcomes), headers=LEVEL_HEADERS, tablefmt="github"), "",
             "Failures:", ""]
    failed = [o for o in outcomes if o.failed_stage]
    lines.append(tabulate([[_program(o), o.failed_stage, o.reason] for o in failed],
                          headers=["program", "stage", "reason"], tablefmt="github")
                 if failed else "None.")
    lines += ["", "Ops without a cost model:", ""]
    unmod: collections.Counter[str] = collections.Counter()
    where: dict[str, list[str]] = collections.defaultdict(list)
    for o in outcomes:
        unmod.update(o.unmodelled)
        for op in o.unmodelled:
            where[op].append(f"level{o.program.level}/{o.program.number}")
    lines.append(tabulate([[op, n, ", ".join(where[op])] for op, n in unmod.most_common()],
                          headers=["op", "count", "programs"], tablefmt="github")
                 if unmod else "None: every op of every estimated program has a cost model.")
    built_cpu = [o for o in outcomes if o.built_on == "cpu"]
    if built_cpu:
        lines += ["", "Built on the CPU:", "",
                  tabulate([[_program(o), o.method or "-", f"{o.build_s:.2f}"]
                            for o in built_cpu],
                           headers=["program", "captured by", "build s"], tablefmt="github")]
    slow = sorted(ok, key=lambda o: o.capture_s + o.estimate_s, reverse=True)[:8]
    lines += ["", "Slowest programs:", "",
              tabulate([[_program(o), o.method, f"{o.capture_s:.2f}", f"{o.estimate_s:.2f}",
                         o.gemms, f"{o.total_ms:.3f}"] for o in slow],
                       headers=["program", "captured by", "capture s", "estimate s", "GEMMs",
                                f"predicted ms ({device})"], tablefmt="github"), ""]
    return lines


def render(runs: dict[str, list[Outcome]], args: argparse.Namespace, wall_s: float,
           cpu_s: float) -> str:
    trees = " ".join(f"--tree {t}" for t in runs)
    command = (f"python benchmarks/kernelbench_capture.py {trees} --device {args.device} "
               f"--timeout-s {args.timeout_s}")
    setup = (f"one torch thread, {platform.processor() or platform.machine()}, "
             f"torch {torch.__version__}, torch_gemm_cost {tgc.__version__}")
    intro = (f"`{command}` on {datetime.date.today()}: {setup}. Each program of "
             "`kernelbench/problems/<tree>` is built (`measured.kernelbench.build`), captured "
             "once (`capture()`) and estimated once (`estimate()` on "
             f"{args.device}, the model's own dtype). Times are process CPU seconds; the run "
             f"took {cpu_s / 60:.1f} min of CPU time ({wall_s / 60:.1f} min of wall time on a "
             "shared host). A program is stopped after "
             f"{args.timeout_s} s of CPU time.")
    legend = ("Built on CPU: the constructor reads a value (`.item()`), so the program was "
              "built for real on the CPU within the default `real_bytes_limit` (4 GiB) and "
              "captured on fake copies of its tensors. Captured by eager: a meta model that "
              "reads values, run on CPU tensors of the same shapes. `v0_0228e57` holds the "
              "original sizes; `v0.1_48eb3a0` the sizes scaled up so the GPU dominates, and one "
              "program whose inputs are made with `device='cuda'` in fp16.")
    total = sum(len(o) for o in runs.values())
    ok = sum(not o.failed_stage for outs in runs.values() for o in outs)
    lines = ["# KernelBench: every program captured and estimated", "", intro, "",
             f"**{ok} of {total} programs estimate.**", "", legend, ""]
    for tree, outcomes in runs.items():
        lines += tree_section(tree, outcomes, args.device)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--tree", action="append",
                        help="a problem tree under kernelbench/problems, repeatable (default: "
                        f"{' and '.join(TREES)})")
    parser.add_argument("--device", default="a100_sxm4_80gb")
    parser.add_argument("--timeout-s", type=int, default=60,
                        help="CPU seconds per program (build, capture and estimate)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    logging.disable(logging.WARNING)  # each unmodelled op is in the table, not the log
    start, start_cpu = time.perf_counter(), time.process_time()
    runs: dict[str, list[Outcome]] = {}
    for tree in args.tree or TREES:
        runs[tree] = []
        for program in programs(args.data / "kernelbench" / "problems" / tree):
            o = run_program(program, args.device, args.timeout_s)
            status = f"FAILED at {o.failed_stage}: {o.reason}" if o.failed_stage else (
                f"{o.method}, capture {o.capture_s:.2f} s, {o.total_ms:.3f} ms")
            print(f"{tree} level{program.level}/{program.name}: {status}", file=sys.stderr,
                  flush=True)
            runs[tree].append(o)
    text = render(runs, args, time.perf_counter() - start, time.process_time() - start_cpu)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
