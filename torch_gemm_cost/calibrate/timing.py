"""How to time it: timers, the budgeted runner and the kernels each point launches, and the
timed rows in the measured data's schema (``measurements.csv``)."""

from __future__ import annotations

import bisect
import csv
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import DeviceSpec
from ..hardware.dtypes import DTYPES
from ..measured.gemm import PREDICTOR_TIMING, MeasuredGemms, read_gemm_file
from ..records.types import OP_LAYOUT
from .sweep import SweepPoint

__all__ = [
    "CSV_COLUMNS",
    "PREDICTOR_TIMING",
    "SOURCE",
    "CpuTimer",
    "CudaTimer",
    "Measurement",
    "kernel_names",
    "read_measurements",
    "run_sweep",
    "time_runs",
    "write_measurements",
]

log = logging.getLogger(__name__)

SOURCE = "calibrate"
# DATA.md's gemm schema, in its column order
CSV_COLUMNS: tuple[str, ...] = (
    "gpu", "gpu_name", "source", "timing", "op", "dtype", "batch", "m", "n", "k", "bias",
    "layout", "latency_ms", "kernel", "grid_x", "grid_y", "grid_z", "block_x", "n_kernels",
    "aux_kernels",
)


class CpuTimer:
    """Host wall clock (``time.perf_counter``) around each call; nothing to flush."""

    timing = "wall"

    def flush(self) -> None:
        pass

    def mark(self) -> Any:
        return time.perf_counter()

    def elapsed_ms(self, marks: Sequence[tuple[Any, Any]]) -> list[float]:
        return [(end - begin) * 1e3 for begin, end in marks]


class CudaTimer:
    """CUDA events around each call, with the L2 flushed (a buffer of twice its size
    overwritten) before each run, so every run starts from DRAM as a model's GEMM would."""

    timing = "event"

    def __init__(self, device: str, l2_bytes: float) -> None:
        self.device = device
        self._buffer = torch.empty(int(max(2 * l2_bytes, 1 << 20)) // 4, dtype=torch.float32,
                                   device=device)

    def flush(self) -> None:
        self._buffer.zero_()

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_ms(self, marks: Sequence[tuple[Any, Any]]) -> list[float]:
        torch.cuda.synchronize(self.device)
        return [float(begin.elapsed_time(end)) for begin, end in marks]


def time_runs(fn: Callable[[], Any], runs: int, timer: Any) -> list[float]:
    """Time ``runs`` calls of ``fn`` with ``timer``, flushing before each; ms per run."""
    marks = []
    for _ in range(runs):
        timer.flush()
        begin = timer.mark()
        fn()
        marks.append((begin, timer.mark()))
    return timer.elapsed_ms(marks)


@dataclass(frozen=True)
class Measurement:
    """The median of ``runs`` timed runs of one sweep point."""

    point: SweepPoint
    latency_ms: float
    runs: int
    kernels: tuple[str, ...] = ()  # the kernels it launched, where a profiler pass named them


class _Operands:
    """Reusable random A and B pools per dtype, grown on demand, so a point costs no fresh
    allocation or random fill beyond the one torch.bmm makes for C."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._pools: dict[tuple[str, str], torch.Tensor] = {}

    def _pool(self, which: str, dtype: torch.dtype, numel: int) -> torch.Tensor:
        key = (which, str(dtype))
        pool = self._pools.get(key)
        if pool is None or pool.numel() < numel:
            size = max(numel, 2 * (pool.numel() if pool is not None else 0), 1 << 16)
            self._pools.pop(key, None)
            fill = torch.float16 if dtype.itemsize == 1 and dtype.is_floating_point else dtype
            pool = torch.empty(size, dtype=fill, device=self.device).uniform_(-1.0, 1.0)
            pool = pool.to(dtype)
            self._pools[key] = pool
        return pool

    def get(self, p: SweepPoint) -> tuple[torch.Tensor, torch.Tensor]:
        dt = DTYPES[p.dtype].torch_dtype
        a = self._pool("a", dt, p.batch * p.m * p.k)[: p.batch * p.m * p.k]
        b = self._pool("b", dt, p.batch * p.k * p.n)[: p.batch * p.k * p.n]
        return a.view(p.batch, p.m, p.k), b.view(p.batch, p.k, p.n)

    def call(self, p: SweepPoint) -> Callable[[], Any]:
        """The call that runs ``p``: ``torch.bmm``, ``F.linear`` (fp8: ``torch._scaled_mm``
        with unit scales and a bf16 output, the weight read column-major) or 2-D ``A @ B``."""
        a, b = self.get(p)
        if p.op == "bmm":
            return lambda: torch.bmm(a, b)
        x = a.view(p.m, p.k)
        if p.op == "matmul":
            w = b.view(p.k, p.n)
            return lambda: torch.matmul(x, w)
        weight = b.view(p.n, p.k)
        cd = DTYPES[p.dtype]
        if cd.peak_key == "fp8":
            one = torch.ones((), dtype=torch.float32, device=self.device)
            out = torch.bfloat16
            bias = self._pool("bias", out, p.n)[: p.n] if p.bias else None
            return lambda: torch._scaled_mm(x, weight.t(), one, one, bias=bias, out_dtype=out)
        bias = self._pool("bias", cd.torch_dtype, p.n)[: p.n] if p.bias else None
        return lambda: torch.nn.functional.linear(x, weight, bias)


def _reps(first_ms: float, reps: int) -> int:
    """More runs for short GEMMs, whose times are noisier; fewer for long ones."""
    if first_ms < 1.0:
        return 2 * reps + 1
    if first_ms > 50.0:
        return max(3, reps - 2)
    return reps


def _stalled(times_ms: Sequence[float]) -> bool:
    """Whether a busy host stalled a batch of runs: its median sits a scheduler tick (over
    1 ms) and 1.5x above its fastest run. Physics does not vary that much between runs."""
    ordered = sorted(times_ms)
    med, low = ordered[len(ordered) // 2], ordered[0]
    return med > 1.5 * low and med - low > 1.0


def run_sweep(
    points: Sequence[SweepPoint],
    device: str,
    timer: Any,
    budget_s: float,
    *,
    reps: int = 7,
    retries: int = 2,
    revisit_share: float = 0.25,
    progress: Callable[[int, int, float, float], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    refused: list[tuple[SweepPoint, str]] | None = None,
) -> list[Measurement]:
    """Time ``points`` in order until ``budget_s`` is spent: a warm-up run, then the median of
    ``reps`` runs (more for sub-ms GEMMs).

    A shared host stalls runs by whole scheduler ticks while other jobs hold its cores. A batch
    whose spread shows it (``_stalled``) is timed again at once, up to ``retries`` times; and
    the last ``revisit_share`` of the budget re-times the points of 0.5 ms or more, the slowest
    against their estimate first, so each gets a second chance at a quiet moment. The lowest
    median counts. A point whose runs would overrun its pass's budget, judged from recent
    points' measured/estimated ratio and its warm-up, ends that pass.
    ``progress(done, total, elapsed_s, budget_s)`` follows every point. A point the backend
    refuses (fp8 kernels take no dims off a multiple of 16, say) is skipped and, with its error,
    appended to ``refused``."""
    sweep = _Sweep(points, _Operands(device), timer, reps, retries, clock, refused)
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    try:
        first_pass_s = budget_s * (1.0 - revisit_share)
        for i in range(len(points)):
            if not sweep.time_point(i, first_pass_s):
                break
            if progress is not None and i in sweep.best:
                progress(len(sweep.best), len(points), sweep.elapsed_s(), budget_s)
        for i in sweep.revisits():
            if not sweep.time_point(i, budget_s):
                break
            if progress is not None:  # every revisit was timed before: none is refused now
                progress(len(sweep.best), len(points), sweep.elapsed_s(), budget_s)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    log.info("timed %d of %d sweep points in %.1f s", len(sweep.best), len(points),
             sweep.elapsed_s())
    return [Measurement(points[i], ms, runs) for i, (ms, runs) in sorted(sweep.best.items())]


class _Sweep:
    """The state of one ``run_sweep``: each timed point's lowest median, and how the recent
    points' measured times compare with their estimates."""

    def __init__(self, points: Sequence[SweepPoint], operands: _Operands, timer: Any, reps: int,
                 retries: int, clock: Callable[[], float],
                 refused: list[tuple[SweepPoint, str]] | None) -> None:
        self.points, self.operands, self.timer = points, operands, timer
        self.reps, self.retries, self.clock, self.refused = reps, retries, clock, refused
        self.start = clock()
        self.best: dict[int, tuple[float, int]] = {}  # point index -> (lowest median ms, runs)
        self.ratios: list[float] = []  # measured / estimated time of recent points

    def elapsed_s(self) -> float:
        return self.clock() - self.start

    def time_point(self, i: int, until_s: float) -> bool:
        """Time point i once more; False if it does not fit before ``until_s``."""
        p = self.points[i]
        recent = sorted(self.ratios[-50:])
        ratio = recent[len(recent) // 2] if recent else 1.0
        if p.est_s * ratio * (self.reps + 1) > until_s - self.elapsed_s():
            return False
        torch.backends.cuda.matmul.allow_tf32 = p.dtype == "tf32"
        fn = self.operands.call(p)
        try:
            first = time_runs(fn, 2 if p.est_s < 1e-3 else 1, self.timer)[-1]
        except RuntimeError as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.info("%s %s refused: %s", p.op, p.shape, message)
            if self.refused is not None:
                self.refused.append((p, message))
            return True
        if p.est_s > 0:
            self.ratios.append(first * 1e-3 / p.est_s)
        runs = _reps(first, self.reps)
        if runs * first * 1e-3 > until_s - self.elapsed_s():
            return False
        low = self.best.get(i, (float("inf"), runs))[0]
        for _ in range(1 + self.retries):
            times = time_runs(fn, runs, self.timer)
            low = min(low, sorted(times)[runs // 2])
            if not _stalled(times) or runs * low * 1e-3 > until_s - self.elapsed_s():
                break
        self.best[i] = (low, runs)
        return True

    def revisits(self) -> list[int]:
        """The timed points of 0.5 ms or more, slowest against their estimate first; points
        without an estimate (est_s 0) last."""
        slow = [i for i, (ms, _) in self.best.items() if ms >= 0.5]
        slow.sort(key=lambda i: -self.best[i][0] * 1e-3 / self.points[i].est_s
                  if self.points[i].est_s > 0 else 0.0)
        return slow


def _short_kernel(name: str) -> str:
    """``void cutlass::Kernel2<...>(...)`` -> ``cutlass::Kernel2``; plain names unchanged."""
    head = name.split("(", 1)[0].split("<", 1)[0].strip()
    return head.rsplit(" ", 1)[-1] or name


def kernel_names(points: Sequence[SweepPoint], device: str) -> list[tuple[str, ...]]:
    """The device kernels each point launches, in launch order, from one profiler pass that runs
    every point once. Empty on the CPU (no device kernels) and for a point the backend refuses.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    operands = _Operands(device)
    cuda = device.startswith("cuda")
    calls = [operands.call(p) for p in points]
    tf32 = [p.dtype == "tf32" for p in points]
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    tag = "tgc_point_"
    try:
        with profile(activities=activities) as prof:
            for i, fn in enumerate(calls):
                torch.backends.cuda.matmul.allow_tf32 = tf32[i]
                with record_function(f"{tag}{i}"):
                    try:
                        fn()
                    except RuntimeError:  # refused: no kernels
                        pass
            if cuda:
                torch.cuda.synchronize(device)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    events = list(prof.events())
    ranges = sorted((e.time_range.start, e.time_range.end, int(e.name[len(tag):]))
                    for e in events if e.name.startswith(tag))
    starts = [r[0] for r in ranges]
    found: list[dict[str, None]] = [{} for _ in points]
    for e in events:
        if e.name.startswith(tag) or not getattr(e, "kernels", None):
            continue
        j = bisect.bisect_right(starts, e.time_range.start) - 1
        if j >= 0 and e.time_range.start <= ranges[j][1]:
            for kernel in e.kernels:
                found[ranges[j][2]].setdefault(kernel.name, None)
    return [tuple(f) for f in found]


def write_measurements(
    path: str | Path, spec: DeviceSpec, runs: Iterable[Measurement], timing: str,
    source: str = SOURCE,
) -> Path:
    """Write ``runs`` in DATA.md's gemm schema: op and layout as each point was called, the
    kernels where a profiler pass named them (the first in ``kernel``, short names of the rest
    in ``aux_kernels``; a workspace memset is never the first)."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for r in runs:
            p = r.point
            row = {"gpu": spec.id, "gpu_name": spec.name, "source": source, "timing": timing,
                   "op": p.op, "dtype": p.dtype, "batch": p.batch, "m": p.m, "n": p.n,
                   "k": p.k, "bias": int(p.bias), "layout": OP_LAYOUT[p.op],
                   "latency_ms": f"{r.latency_ms:.6g}"}
            if r.kernels:
                main = next((k for k in r.kernels if not k.startswith(("Memset", "Memcpy"))),
                            r.kernels[0])
                row.update(kernel=main, n_kernels=len(r.kernels),
                           aux_kernels=";".join(_short_kernel(k) for k in r.kernels
                                                if k != main))
            writer.writerow([row.get(c, "") for c in CSV_COLUMNS])
    return path


def read_measurements(path: str | Path) -> MeasuredGemms:
    """Read a ``measurements.csv`` written by ``write_measurements``: one device, one timing.
    Raises ValueError naming the file, line and column of a bad value."""
    rows = read_gemm_file(path, SOURCE, required=("gpu", "timing", "op", "dtype", "batch", "m",
                                                   "n", "k", "latency_ms"))
    if not len(rows):
        raise ValueError(f"{path}: no measured rows")
    for col in ("gpu", "timing"):
        values = sorted(set(getattr(rows, col)))
        if len(values) != 1:
            raise ValueError(f"{path}: expected one {col}, found {', '.join(values)}")
    return rows
