"""Calibrate: time a designed GEMM sweep on the local GPU or CPU and fit a device profile.

    sweep = design_sweep(spec, dtypes)          # small shapes first
    runs = run_sweep(sweep, device, timer, budget_s)
    write_measurements(out / "measurements.csv", spec, runs, timer.timing)
    profile = fit_profile(spec, read_measurements(out / "measurements.csv"))
    save_profile(out / "profile.json", profile)
    spec, predictor = load_profile(out / "profile.json")

The GPU and the CPU share every step; only the timer differs (CUDA events with an L2 flush before
each run on a GPU, ``perf_counter`` on the CPU). On the CPU the cores take the place of SMs, the
cache levels are the CPU's own (``devices.host_cpu``) and the tiles are the BLAS register and
thread blocking.

The profile is JSON (never pickle): the detected ``DeviceSpec`` and a fitted predictor, either
``CalibratedPredictor`` (sustained peak, bandwidths, blocking and call floor per dtype) or the
hybrid predictor fine-tuned from the shipped weights, whichever predicts the sweep's held-out
shapes better.
"""

from __future__ import annotations

import bisect
import csv
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import torch

from .devices import (
    DeviceSpec,
    copy_bw_bytes_per_s,
    get_device,
    host_cpu,
    spec_from_record,
    spec_to_record,
)
from .dtypes import DTYPES, resolve_dtype
from .gemms.records import DTYPE_NAMES, OP_LAYOUT, GemmBatch
from .predict.base import Estimator, GemmPrediction, Predictor
from .predict.score import summarize_errors

__all__ = [
    "CSV_COLUMNS",
    "FORMAT",
    "CalibratedPredictor",
    "CpuTimer",
    "CudaTimer",
    "Measurement",
    "SweepPoint",
    "alignment_dtypes",
    "calibrate",
    "design_alignment_sweep",
    "design_sweep",
    "fit_profile",
    "kernel_names",
    "load_profile",
    "read_measurements",
    "run_sweep",
    "save_profile",
    "sweep_dtypes",
    "write_measurements",
]

log = logging.getLogger(__name__)

FORMAT = "torch_gemm_cost.profile"
VERSION = 1
SOURCE = "calibrate"
# DATA.md's gemm schema, in its column order
CSV_COLUMNS: tuple[str, ...] = (
    "gpu", "gpu_name", "source", "timing", "op", "dtype", "batch", "m", "n", "k", "bias",
    "layout", "latency_ms", "kernel", "grid_x", "grid_y", "grid_z", "block_x", "n_kernels",
    "aux_kernels",
)
MAX_OPERAND_BYTES = 1 << 29  # largest A or B the sweep allocates (512 MiB)
SWEEP_OPS = ("bmm", "linear", "matmul")


# ------------------------------------------------------------------------------- the sweep
@dataclass(frozen=True)
class SweepPoint:
    """One GEMM to time, ``C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]``.

    ``op`` is how it is called: ``bmm`` (``torch.bmm``, B stored (k, n)), ``linear``
    (``F.linear``, the weight stored (n, k); fp8 through ``torch._scaled_mm``) or ``matmul``
    (2-D ``A @ B``). ``linear`` and ``matmul`` take batch 1; ``bias`` adds a fused bias to a
    ``linear``."""

    batch: int
    m: int
    n: int
    k: int
    dtype: str
    regime: str  # square, skinny, flat, batched, tile_edge, wave_edge, random, align_n, ...
    est_s: float = field(default=0.0, compare=False)  # rough cost, for the small-first order
    op: str = "bmm"
    bias: bool = False

    def __post_init__(self) -> None:
        if self.op not in SWEEP_OPS:
            raise ValueError(f"op must be one of {', '.join(SWEEP_OPS)}, got {self.op!r}")
        if self.op != "bmm" and self.batch != 1:
            raise ValueError(f"op {self.op!r} takes batch 1, got batch={self.batch}")
        if self.bias and self.op != "linear":
            raise ValueError(f"only op 'linear' fuses a bias, got op={self.op!r} with bias")

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.m, self.n, self.k)

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def _is_cpu(spec: DeviceSpec) -> bool:
    return spec.architecture == "cpu"


def sweep_dtypes(spec: DeviceSpec) -> tuple[str, ...]:
    """Every dtype the sweep times on ``spec``: those the device runs fast.

    CPU: float32, plus bfloat16/float16 where the ISA has dot-product instructions for them
    (without, torch falls back to slow scalar paths). GPU: float32, tf32, float16, bfloat16 as
    supported. NB: fp8 and int8 need scaled-matmul kernels and are not swept.
    """
    if _is_cpu(spec):
        wanted = ("float32", "bfloat16", "float16")
        return tuple(d for d in wanted if d == "float32" or spec.peak(DTYPES[d].peak_key))
    major = int(spec.compute_capability.split(".")[0]) if spec.compute_capability[:1].isdigit() \
        else 0
    out = ["float32"]
    if spec.peak("tf32") or major >= 8:
        out.append("tf32")
    if spec.peak("fp16") or major >= 6:
        out.append("float16")
    if spec.peak("bf16") or major >= 8:
        out.append("bfloat16")
    return tuple(out)


def _blocking(spec: DeviceSpec) -> tuple[tuple[int, ...], int]:
    """(tile edges to probe, thread/CTA block edge) for the sweep's edge shapes."""
    if _is_cpu(spec):
        # register blocks are multiples of the SIMD lanes; threads split the output in blocks
        return (16, 32, 48, 64, 96, 128, 256), 64
    return (64, 128, 256), 128


def _est_s(point_dims: tuple[int, int, int, int], dtype: str, spec: DeviceSpec) -> float:
    """A rough run time: 25% of the nominal peak or the DRAM bandwidth, plus a call floor."""
    b, m, n, k = point_dims
    cd = DTYPES[dtype]
    try:
        peak = spec.peak_flops_per_s(cd)
    except ValueError:
        peak = 1e12
    bw = spec.dram_bw_bytes_per_s if spec.dram_bw_bytes_per_s > 0 else 1e11
    nbytes = b * ((m * k + k * n) * cd.in_bytes + m * n * cd.out_bytes)
    floor = 10e-6 if _is_cpu(spec) else 20e-6
    return floor + max(2.0 * b * m * n * k / (0.25 * peak), nbytes / bw)


def design_sweep(
    spec: DeviceSpec,
    dtypes: Sequence[str] | None = None,
    *,
    seed: int = 0,
    n_random: int = 360,
    max_est_s: float | None = None,
) -> list[SweepPoint]:
    """The shapes to time, cheapest first, so a sweep cut short by its budget still spans every
    regime and dtype at small sizes.

    Covers square GEMMs (aligned powers of two and their ±1 neighbours), memory-bound skinny
    GEMMs (m = 1..64 against large weights), flat GEMMs (small k), batched small GEMMs, tile
    edges (T-1, T, T+1 for each register/CTA tile edge T), wave edges (output blocks = a multiple
    of the SM/core count, and one more), and seeded log-uniform random shapes, half of them
    rounded to multiples of 8/16/64 and half left misaligned.
    """
    dtypes = tuple(resolve_dtype(d).name for d in (dtypes or sweep_dtypes(spec)))
    cores = max(1, spec.sm_count)
    edges, block = _blocking(spec)
    max_est_s = max_est_s if max_est_s is not None else (3.0 if _is_cpu(spec) else 0.2)
    shapes: list[tuple[tuple[int, int, int, int], str]] = []

    def add(regime: str, *dims: int) -> None:
        b, m, n, k = dims
        shapes.append(((b, m, n, k), regime))

    for d in (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
        add("square", 1, d, d, d)
        if d >= 32:
            add("square", 1, d - 1, d - 1, d - 1)
            add("square", 1, d + 1, d + 1, d + 1)
            add("square", 1, d * 3 // 2 + 3, d * 3 // 2 + 3, d * 3 // 2 + 3)
    for m in (1, 2, 4, 8, 16, 32, 64):
        for k, n in ((512, 512), (1024, 1024), (1000, 3001), (2048, 2048), (4096, 4096),
                     (4096, 1024), (1024, 4096), (4095, 4097), (8192, 4096)):
            add("skinny", 1, m, n, k)
            if m >= 8:
                add("skinny", 1, m + 1, n, k)
    for mn in (256, 1024, 2048, 4097):
        for k in (1, 4, 16, 63, 64):
            add("flat", 1, mn, mn, k)
    for b in (2, 4, 8, 16, 32, 64):
        for m, n, k in ((32, 32, 32), (64, 64, 32), (128, 128, 64), (64, 128, 256),
                        (33, 65, 17), (100, 100, 100), (256, 256, 256)):
            add("batched", b, m, n, k)
    for t in edges:
        for d in (t - 1, t, t + 1):
            add("tile_edge", 1, d, 512, 512)
            add("tile_edge", 1, 512, d, 512)
            add("tile_edge", 1, 512, 512, d)
    for j in (1, 2, 4, 8):
        for extra in (0, 1):
            add("wave_edge", 1, block * cores * j + extra, block, 256)
            add("wave_edge", 1, block * j, block * cores + extra * block // 2, 512)

    rng = random.Random(seed)

    def log_uniform(lo: int, hi: int) -> int:
        return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))

    for i in range(n_random):
        b = 1 if rng.random() < 0.7 else log_uniform(2, 64)
        m, n, k = log_uniform(1, 4096), log_uniform(8, 8192), log_uniform(8, 8192)
        if i % 2 == 0:  # aligned half
            q = rng.choice((8, 16, 64))
            n, k = max(q, n // q * q), max(q, k // q * q)
            m = m if m < q else m // q * q
        add("random", b, m, n, k)

    points: dict[tuple[tuple[int, int, int, int], str], SweepPoint] = {}
    for dims, regime in shapes:
        b, m, n, k = dims
        for dt in dtypes:
            if (dims, dt) in points:
                continue
            cd = DTYPES[dt]
            if max(b * m * k, b * k * n, b * m * n) * max(cd.in_bytes, cd.out_bytes) \
                    > MAX_OPERAND_BYTES:
                continue
            est = _est_s(dims, dt, spec)
            if est <= max_est_s:
                points[(dims, dt)] = SweepPoint(b, m, n, k, dt, regime, est)
    return sorted(points.values(), key=lambda p: (p.est_s, p.dtype, p.shape))


# (n, k) of common weights, each dim a multiple of 64: Llama-3-8B attention, MLP up and down,
# GPT-2's padded vocabulary, Llama-2's vocabulary, GPT-2's MLP
ALIGN_WEIGHTS: tuple[tuple[int, int], ...] = (
    (4096, 4096), (14336, 4096), (4096, 14336), (50304, 768), (32000, 4096), (3072, 768),
)
# N + offset: the weight's own alignment, then 1, 2, 4 and 8 elements (GPT-2's 50257 = 50304 - 47)
ALIGN_OFFSETS: tuple[int, ...] = (0, -1, -2, -4, -8)
ALIGN_TOKENS: tuple[int, ...] = (1, 8, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def alignment_dtypes(spec: DeviceSpec) -> tuple[str, ...]:
    """The alignment sweep's dtypes: the calibration sweep's, plus fp8 where the device has an
    fp8 matrix rate (Ada, Hopper and later)."""
    out = list(sweep_dtypes(spec))
    if not _is_cpu(spec) and spec.peak("fp8"):
        out.append("float8_e4m3fn")
    return tuple(out)


def design_alignment_sweep(
    spec: DeviceSpec,
    dtypes: Sequence[str] | None = None,
    *,
    weights: Sequence[tuple[int, int]] = ALIGN_WEIGHTS,
    offsets: Sequence[int] = ALIGN_OFFSETS,
    tokens: Sequence[int] = ALIGN_TOKENS,
    max_est_s: float | None = None,
) -> list[SweepPoint]:
    """Linear layers whose n or k is moved off the weight's alignment, cheapest first.

    For each weight (n, k), token count m and dtype: ``linear`` at (n + o, k) and at (n, k + o)
    for each offset o (regimes ``align_n`` and ``align_k``); ``matmul`` (B stored (k, n)) at the
    aligned shape and with n or k one off (``layout``, not for fp8, whose kernels take B
    column-major only); and ``linear`` with a fused bias at the aligned shape (``bias``). The
    pairs it makes (n = 50304 against 50303, say) are what padding advice needs measured.
    """
    dtypes = tuple(resolve_dtype(d).name for d in (dtypes or alignment_dtypes(spec)))
    max_est_s = max_est_s if max_est_s is not None else (3.0 if _is_cpu(spec) else 0.2)
    points: dict[tuple[Any, ...], SweepPoint] = {}

    def add(regime: str, dtype: str, m: int, n: int, k: int, op: str = "linear",
            bias: bool = False) -> None:
        cd = DTYPES[dtype]
        key = (m, n, k, dtype, op, bias)
        if key in points or min(m, n, k) < 1:
            return
        if max(m * k, k * n, m * n) * max(cd.in_bytes, cd.out_bytes) > MAX_OPERAND_BYTES:
            return
        est = _est_s((1, m, n, k), dtype, spec)
        if est <= max_est_s:
            points[key] = SweepPoint(1, m, n, k, dtype, regime, est, op, bias)

    for dtype in dtypes:
        fp8 = DTYPES[dtype].peak_key == "fp8"
        for n, k in weights:
            for m in tokens:
                for o in offsets:
                    add("align_n", dtype, m, n + o, k)
                    add("align_k", dtype, m, n, k + o)
                add("bias", dtype, m, n, k, bias=True)
                if not fp8:
                    for nn, kk in ((n, k), (n - 1, k), (n, k - 1)):
                        add("layout", dtype, m, nn, kk, op="matmul")
    return sorted(points.values(), key=lambda p: (p.est_s, p.dtype, p.op, p.shape))


# ------------------------------------------------------------------------------- timing
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
    start = clock()
    operands = _Operands(device)
    best: dict[int, tuple[float, int]] = {}  # point index -> (lowest median ms, runs)
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    ratios: list[float] = []  # measured / estimated time of recent points

    def time_point(i: int, until_s: float) -> bool:
        """Time point i once more; False if it does not fit before ``until_s``."""
        p = points[i]
        left = until_s - (clock() - start)
        recent = sorted(ratios[-50:])
        ratio = recent[len(recent) // 2] if recent else 1.0
        if p.est_s * ratio * (reps + 1) > left:
            return False
        torch.backends.cuda.matmul.allow_tf32 = p.dtype == "tf32"
        fn = operands.call(p)
        try:
            first = time_runs(fn, 2 if p.est_s < 1e-3 else 1, timer)[-1]
        except RuntimeError as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.info("%s %s refused: %s", p.op, p.shape, message)
            if refused is not None:
                refused.append((p, message))
            return True
        if p.est_s > 0:
            ratios.append(first * 1e-3 / p.est_s)
        runs = _reps(first, reps)
        if runs * first * 1e-3 > until_s - (clock() - start):
            return False
        low = best.get(i, (float("inf"), runs))[0]
        for _ in range(1 + retries):
            times = time_runs(fn, runs, timer)
            low = min(low, sorted(times)[runs // 2])
            if not _stalled(times) or runs * low * 1e-3 > until_s - (clock() - start):
                break
        best[i] = (low, runs)
        if progress is not None:
            progress(len(best), len(points), clock() - start, budget_s)
        return True

    try:
        first_pass_s = budget_s * (1.0 - revisit_share)
        for i in range(len(points)):
            if not time_point(i, first_pass_s):
                break
        slow = [i for i, (ms, _) in best.items() if ms >= 0.5]
        # slowest against the estimate first; points without an estimate (est_s 0) last
        slow.sort(key=lambda i: -best[i][0] * 1e-3 / points[i].est_s if points[i].est_s > 0
                  else 0.0)
        for i in slow:
            if not time_point(i, budget_s):
                break
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    log.info("timed %d of %d sweep points in %.1f s", len(best), len(points), clock() - start)
    return [Measurement(points[i], ms, runs) for i, (ms, runs) in sorted(best.items())]



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


# ------------------------------------------------------------------------------- data files
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


@dataclass(frozen=True)
class Calibration:
    """Measured rows of one device: a batch of GEMMs, their latencies and how they were timed."""

    gemms: GemmBatch
    latency_ms: torch.Tensor  # (N,) float64
    device_id: str
    timing: str

    def __len__(self) -> int:
        return int(self.latency_ms.shape[0])

    def select(self, index: torch.Tensor) -> Calibration:
        return Calibration(self.gemms.select(index), self.latency_ms[index], self.device_id,
                           self.timing)


def read_measurements(path: str | Path) -> Calibration:
    """Read a ``measurements.csv`` written by ``write_measurements`` (one device, one timing).
    Raises ValueError naming the file, line and column of a bad value."""
    from .gemms.measured import gemm_batch_from_columns

    path = Path(path)
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in ("gpu", "timing", "op", "dtype", "batch", "m", "n", "k",
                               "latency_ms") if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        rows = list(reader)
    if not rows:
        raise ValueError(f"{path}: no measured rows")
    for col in ("gpu", "timing"):
        values = sorted({r[col] for r in rows})
        if len(values) != 1:
            raise ValueError(f"{path}: expected one {col}, found {', '.join(values)}")
    names = [f"{path.name} line {i}" for i in range(2, len(rows) + 2)]
    gemms = gemm_batch_from_columns(
        op=[r["op"] for r in rows], layout=[r.get("layout") or "" for r in rows],
        dtype=[r["dtype"] for r in rows], batch=[r["batch"] for r in rows],
        m=[r["m"] for r in rows], n=[r["n"] for r in rows], k=[r["k"] for r in rows],
        bias=[r.get("bias") or "0" for r in rows], row_names=names,
    )
    latency = []
    for name, r in zip(names, rows):
        try:
            value = float(r["latency_ms"])
        except ValueError:
            value = float("nan")
        if not 0.0 < value < float("inf"):
            raise ValueError(f"{name}, column 'latency_ms': expected a positive number, "
                             f"got {r['latency_ms']!r}")
        latency.append(value)
    return Calibration(gemms, torch.tensor(latency, dtype=torch.float64), rows[0]["gpu"],
                       rows[0]["timing"])


# ------------------------------------------------------------------------------- the fitted model
def _inv_softplus(x: float) -> float:
    return math.log(math.expm1(x))


_HUBER = 0.25  # log-time error beyond which the fit's loss grows linearly (about 28%)
_PER_DTYPE = ("log_peak", "log_floor_ms", "log_floor_big_ms", "log_switch_flops", "log_m_half",
              "log_n_half", "log_k_half")
_SHARED = ("log_bw_dram", "log_bw_llc", "log_bw_out", "log_par_flops", "pack", "roof_p")
_HYPER = ("tile_n", "block", "steps", "lr", "seed", "neighbours", "radius")


def _llc_bytes(spec: DeviceSpec) -> float:
    return float(spec.l3_bytes or spec.l2_bytes or 1 << 20)


def _shape_features(gemms: GemmBatch) -> torch.Tensor:
    """(N, 4) log2 of batch, m, n, k: the space in which measured neighbours are near."""
    dims = torch.stack([gemms.batch, gemms.m, gemms.n, gemms.k], dim=1)
    return torch.log2(torch.clamp(dims, min=1.0))


class CalibratedPredictor(Estimator):
    """A device's own GEMM physics, fitted to its measurements; implements ``Predictor``.

    Per dtype d: sustained peak P_d, a call floor t0_d that steps up where the library switches
    from its small-GEMM path to the blocked one, and half-efficiency dims (m½, n½, k½). Shared:
    bandwidths of DRAM, the last-level cache and output writes, the FLOPs from which the BLAS
    uses every core, an operand re-read factor γ ∈ [1, 4] (packing) and the roofline's
    softness q. The DRAM bandwidth is held near the copy probe's figure.

        compute = 2·b·m·⌈n/Tn⌉Tn·k / (P_d · par · m/(m+m½) · n/(n+n½) · k/(k+k½))
        par     = min(fill of the cores by ⌈m/B⌉·⌈n/B⌉·b output blocks in waves,
                      share of cores the BLAS threads: a sigmoid in log FLOPs)
        memory  = γ·(A+B)·(h/BW_llc + (1-h)/BW_dram) + C/BW_out, h = share in the LLC,
                  γ = 1 for a GEMV (m or n = 1), which streams its operands unpacked
        base    = t0_d + (compute^q + memory^q)^(1/q)

    Tn is the vector-register tile along n (CPU) or the CTA tile (GPU), B the block one core or
    SM owns: on a GPU ``par`` is wave quantization with SMs for cores. The time is then the
    base times the Gaussian-weighted mean ratio measured/base of the ``neighbours`` nearest
    measured GEMMs of the same dtype (distance in log2 dims, scale ``radius``), shrunk towards
    1 where none is near. NB: no split-K, no per-layout alignment term.
    """

    name = "calibrated"
    version = "1"
    dtypes_: tuple[str, ...]

    def __init__(self, *, tile_n: int = 1, block: int = 64, steps: int = 600, lr: float = 0.05,
                 seed: int = 0, neighbours: int = 8, radius: float = 0.5) -> None:
        self.tile_n = tile_n
        self.block = block
        self.steps = steps
        self.lr = lr
        self.seed = seed
        self.neighbours = neighbours
        self.radius = radius

    # ---------------------------------------------------------------- the model
    def _local_dtype(self, gemms: GemmBatch) -> torch.Tensor:
        table = torch.full((len(DTYPE_NAMES),), -1, dtype=torch.long)
        for i, name in enumerate(self.dtypes_):
            table[DTYPE_NAMES.index(name)] = i
        local = table[gemms.dtype_index]  # (N,)
        if bool((local < 0).any()):
            bad = gemms.dtype_names()[int(torch.nonzero(local < 0)[0])]
            raise ValueError(f"calibrated profile has no {bad} measurements; calibrated "
                             f"dtypes: {', '.join(self.dtypes_)}")
        return local

    def _forward(self, gemms: GemmBatch, spec: DeviceSpec,
                 p: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The physical base time and its parts, (N,) each."""
        d = self._local_dtype(gemms)
        b, m, n, k = (torch.clamp(t, min=1.0) for t in (gemms.batch, gemms.m, gemms.n, gemms.k))
        cores = float(max(1, spec.sm_count))
        sp = torch.nn.functional.softplus
        np_ = torch.ceil(n / self.tile_n) * self.tile_n
        units = b * torch.ceil(m / self.block) * torch.ceil(n / self.block)
        waves = torch.ceil(units / cores)
        wave_fill = units / (waves * cores)
        log_flops = torch.log(2.0 * b * m * n * k)
        threads = 1.0 + (cores - 1.0) * torch.sigmoid(log_flops - p["log_par_flops"])
        par = torch.minimum(wave_fill, threads / cores)
        log_eff = (torch.log(m / (m + torch.exp(p["log_m_half"][d])))
                   + torch.log(n / (n + torch.exp(p["log_n_half"][d])))
                   + torch.log(k / (k + torch.exp(p["log_k_half"][d]))))
        log_compute = (torch.log(2.0 * b * m * np_ * k) - p["log_peak"][d] - torch.log(par)
                       - log_eff)
        ab = b * (m * k + k * n) * gemms.in_bytes
        c = b * m * n * gemms.out_bytes
        hit = torch.sigmoid(2.0 * (math.log(_llc_bytes(spec)) - torch.log(ab + c)))
        inv_bw = hit * torch.exp(-p["log_bw_llc"]) + (1.0 - hit) * torch.exp(-p["log_bw_dram"])
        # a GEMV (m or n = 1) streams its operands once; a GEMM packs them (γ reads)
        gemv = (m <= 1.0) | (n <= 1.0)
        reads = torch.where(gemv, torch.ones_like(m), 1.0 + 3.0 * torch.sigmoid(p["pack"]))
        memory = reads * ab * inv_bw + c * torch.exp(-p["log_bw_out"])
        log_memory = torch.log(memory)
        q = 1.0 + sp(p["roof_p"])
        log_s = torch.logsumexp(torch.stack([q * log_compute, q * log_memory]), dim=0) / q
        small, big = torch.exp(p["log_floor_ms"][d]), torch.exp(p["log_floor_big_ms"][d])
        floor = small + (big - small) * torch.sigmoid(2.0 * (log_flops - p["log_switch_flops"][d]))
        return {
            "time_ms": floor + torch.exp(log_s) * 1e3,
            "compute_ms": torch.exp(log_compute) * 1e3,
            "memory_ms": memory * 1e3,
            "launch_ms": floor,
            "waves": waves,
            "last_wave_fill": wave_fill,
            "util": par * torch.exp(log_eff),
            "h2": hit,
            "mem_bw_bytes_per_s": 1.0 / inv_bw,
        }

    def _correction(self, gemms: GemmBatch, chunk: int = 16384) -> torch.Tensor:
        """(N,) log ratio measured/base of the nearest measured GEMMs, shrunk towards 0."""
        x = _shape_features(gemms).float()
        d = self._local_dtype(gemms)
        out = torch.zeros(len(gemms), dtype=torch.float64)
        for j in torch.unique(d).tolist():  # one group per dtype, not per GEMM
            rows = torch.nonzero(d == j).flatten()
            ref = self.neighbour_dtype_ == j
            ref_x, ref_r = self.neighbour_x_[ref].float(), self.neighbour_log_ratio_[ref]
            if ref_x.shape[0] == 0:
                continue
            kk = min(self.neighbours, ref_x.shape[0])
            for lo in range(0, rows.shape[0], chunk):  # bounded memory: (chunk, refs)
                idx_rows = rows[lo:lo + chunk]
                near, idx = torch.topk(torch.cdist(x[idx_rows], ref_x), kk, dim=1,
                                       largest=False)  # (c, K)
                w = torch.exp(-0.5 * (near.double() / self.radius) ** 2)
                out[idx_rows] = (w * ref_r[idx]).sum(1) / (w.sum(1) + 0.5)
        return out

    def predict(self, gemms: GemmBatch, device: DeviceSpec | str) -> GemmPrediction:
        spec = get_device(device)
        with torch.no_grad():
            out = self._forward(gemms, spec, self._params())
            corr = torch.exp(self._correction(gemms))
        empty = (gemms.batch <= 0) | (gemms.m <= 0) | (gemms.n <= 0) | (gemms.k <= 0)
        zero = torch.zeros(len(gemms), dtype=torch.float64)
        details = {k: torch.where(empty, zero, v) for k, v in out.items() if k != "time_ms"}
        details["neighbour_ratio"] = corr
        return GemmPrediction(time_ms=torch.where(empty, zero, out["time_ms"] * corr),
                              compute_bound=details["compute_ms"] >= details["memory_ms"],
                              details=details)

    def _params(self) -> dict[str, torch.Tensor]:
        params = getattr(self, "params_", None)
        if params is None:
            raise ValueError("calibrated predictor has no fitted parameters: call fit(...) or "
                             "load a profile")
        return params

    # ---------------------------------------------------------------- training
    def _init_params(self, data: Calibration, spec: DeviceSpec) -> dict[str, torch.Tensor]:
        g, y = data.gemms, data.latency_ms
        names = g.dtype_names()
        per: dict[str, list[float]] = {k: [] for k in _PER_DTYPE}
        for dt in self.dtypes_:
            sel = torch.tensor([x == dt for x in names])
            rate = g.flops[sel] / (y[sel] * 1e-3)
            flops = g.flops[sel]
            tiny, mid = y[sel][flops < 1e5], y[sel][(flops >= 1e5) & (flops < 1e6)]
            low = float(torch.quantile(y[sel], 0.05))
            per["log_peak"].append(math.log(float(rate.max()) * 1.2))
            per["log_floor_ms"].append(math.log(0.8 * float(tiny.min()) if len(tiny) else low))
            per["log_floor_big_ms"].append(math.log(0.5 * float(mid.median()) if len(mid)
                                                    else low))
            per["log_switch_flops"].append(math.log(1e5))
            per["log_m_half"].append(math.log(2.0))
            per["log_n_half"].append(math.log(8.0))
            per["log_k_half"].append(math.log(16.0))
        bw = spec.dram_bw_bytes_per_s if spec.dram_bw_bytes_per_s > 0 else 1e11
        params = {k: torch.tensor(v, dtype=torch.float64) for k, v in per.items()}
        params.update({
            "log_bw_dram": torch.tensor(math.log(bw), dtype=torch.float64),
            "log_bw_llc": torch.tensor(math.log(4.0 * bw), dtype=torch.float64),
            "log_bw_out": torch.tensor(math.log(bw), dtype=torch.float64),
            "log_par_flops": torch.tensor(math.log(1e7 if _is_cpu(spec) else 1e3),
                                          dtype=torch.float64),
            "pack": torch.tensor(-2.0, dtype=torch.float64),  # 1 + 3·sigmoid: about 1.36
            "roof_p": torch.tensor(_inv_softplus(2.0), dtype=torch.float64),
        })
        return params

    def fit(self, data: Calibration, spec: DeviceSpec, *,
            warm_start: bool = False) -> CalibratedPredictor:
        """Fit the physical parameters with Adam on the pseudo-Huber loss of log time (relative
        error, robust to runs that a busy host stalled by a scheduler tick), each dtype weighted
        equally, then keep every row's log ratio measured/base for the neighbour correction
        (rows over e× slower than the base, stalls, are left out); returns self. ``warm_start``
        continues from the current parameters."""
        torch.manual_seed(self.seed)
        names = data.gemms.dtype_names()
        dtypes = tuple(dict.fromkeys(names))
        if not (warm_start and getattr(self, "params_", None) is not None
                and set(dtypes) <= set(self.dtypes_)):
            self.dtypes_ = dtypes
            self.params_ = self._init_params(data, spec)
        counts = {dt: names.count(dt) for dt in dtypes}
        w = torch.tensor([1.0 / counts[x] for x in names], dtype=torch.float64)
        w = w / w.sum()
        log_y = torch.log(data.latency_ms)
        probe_log_bw = math.log(spec.dram_bw_bytes_per_s if spec.dram_bw_bytes_per_s > 0 else 1e11)
        params = {k: v.clone().requires_grad_(True) for k, v in self.params_.items()}
        opt = torch.optim.Adam(list(params.values()), lr=self.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, self.steps))
        loss = torch.tensor(float("nan"))
        for _ in range(self.steps):
            opt.zero_grad()
            pred = self._forward(data.gemms, spec, params)["time_ms"]
            err = torch.log(pred) - log_y
            loss = (w * _HUBER ** 2 * (torch.sqrt(1.0 + (err / _HUBER) ** 2) - 1.0)).sum()
            # the copy probe measured DRAM bandwidth; few sweep GEMMs overflow the LLC
            loss = loss + 0.05 * (params["log_bw_dram"] - probe_log_bw) ** 2
            loss.backward()
            opt.step()
            sched.step()
        self.params_ = {k: v.detach() for k, v in params.items()}
        self.loss_ = float(loss.detach())
        with torch.no_grad():
            ratio = log_y - torch.log(self._forward(data.gemms, spec, self.params_)["time_ms"])
        keep = ratio < 1.0
        self.neighbour_x_ = _shape_features(data.gemms)[keep]
        self.neighbour_dtype_ = self._local_dtype(data.gemms)[keep]
        self.neighbour_log_ratio_ = ratio[keep]
        return self

    def physical_constants(self) -> dict[str, Any]:
        """The fitted constants in their units."""
        p = self._params()
        sp = torch.nn.functional.softplus

        def per(name: str, scale: float = 1.0) -> dict[str, float]:
            return {d: float(torch.exp(p[name][i])) * scale for i, d in enumerate(self.dtypes_)}

        return {
            "sustained_flops_per_s": per("log_peak"),
            "floor_ms": per("log_floor_ms"),
            "blocked_floor_ms": per("log_floor_big_ms"),
            "blocked_from_flops": per("log_switch_flops"),
            "dram_bw_bytes_per_s": float(torch.exp(p["log_bw_dram"])),
            "llc_bw_bytes_per_s": float(torch.exp(p["log_bw_llc"])),
            "output_bw_bytes_per_s": float(torch.exp(p["log_bw_out"])),
            "all_cores_from_flops": float(torch.exp(p["log_par_flops"])),
            "operand_reads": 1.0 + 3.0 * float(torch.sigmoid(p["pack"])),
            "roofline_q": 1.0 + float(sp(p["roof_p"])),
        }

    # ---------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.name, "version": self.version, "hyperparameters": self.get_params(),
            "dtypes": list(self.dtypes_),
            "params": {k: v.tolist() for k, v in self._params().items()},
            "neighbours": {
                "log2_dims": [[round(v, 5) for v in row] for row in self.neighbour_x_.tolist()],
                "dtype": self.neighbour_dtype_.tolist(),
                "log_ratio": [round(v, 5) for v in self.neighbour_log_ratio_.tolist()],
            },
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CalibratedPredictor:
        hyper = doc["hyperparameters"]
        if not isinstance(hyper, Mapping):
            raise TypeError("'hyperparameters' must be an object")
        unknown = sorted(set(hyper) - set(_HYPER))
        if unknown:
            raise ValueError(f"unknown hyperparameters {unknown}; known: {', '.join(_HYPER)}")
        model = cls(**hyper)
        for key in ("tile_n", "block", "neighbours"):
            if not isinstance(getattr(model, key), int) or getattr(model, key) < 1:
                raise ValueError(f"hyperparameter {key!r} must be a positive integer, "
                                 f"got {getattr(model, key)!r}")
        if not (isinstance(model.radius, (int, float)) and model.radius > 0):
            raise ValueError(f"hyperparameter 'radius' must be positive, got {model.radius!r}")
        dtypes = doc["dtypes"]
        if not isinstance(dtypes, list) or not dtypes:
            raise ValueError("'dtypes' must be a non-empty list of dtype names")
        model.dtypes_ = tuple(resolve_dtype(d).name for d in dtypes)
        raw = doc["params"]
        if not isinstance(raw, Mapping):
            raise TypeError("'params' must be an object")
        params = {}
        for name in (*_PER_DTYPE, *_SHARED):
            if name not in raw:
                raise ValueError(f"missing parameter {name!r}")
            t = torch.tensor(raw[name], dtype=torch.float64)
            want: tuple[int, ...] = (len(dtypes),) if name in _PER_DTYPE else ()
            if tuple(t.shape) != want:
                raise ValueError(f"parameter {name!r} has shape {tuple(t.shape)}, "
                                 f"expected {want}")
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"parameter {name!r} is not finite")
            params[name] = t
        model.params_ = params
        nb = doc["neighbours"]
        x = torch.tensor(nb["log2_dims"], dtype=torch.float64).reshape(-1, 4)
        dt = torch.tensor(nb["dtype"], dtype=torch.long).reshape(-1)
        r = torch.tensor(nb["log_ratio"], dtype=torch.float64).reshape(-1)
        if not x.shape[0] == dt.shape[0] == r.shape[0]:
            raise ValueError("'neighbours' lists differ in length")
        if bool(((dt < 0) | (dt >= len(dtypes))).any()) or not bool(torch.isfinite(r).all()):
            raise ValueError("'neighbours' holds a dtype index or ratio out of range")
        model.neighbour_x_, model.neighbour_dtype_, model.neighbour_log_ratio_ = x, dt, r
        return model


# ------------------------------------------------------------------------------- the profile
def _tile_candidates(spec: DeviceSpec) -> tuple[tuple[int, int], ...]:
    """(Tn, block) candidates: register blocking along n on a CPU, CTA tiles on a GPU."""
    if _is_cpu(spec):
        return ((1, 64), (16, 64), (32, 64))
    return ((64, 64), (128, 128), (256, 128))


def _split(n: int, share: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    cut = max(1, round(n * share)) if n >= 10 else 0
    return perm[cut:], perm[:cut]


def _measured_spec(spec: DeviceSpec, data: Calibration) -> DeviceSpec:
    """``spec`` with any dtype peak the measurements beat (or lack) raised to the best measured
    rate, so no measured row looks faster than physics (nominal clocks understate boost)."""
    peaks = dict(spec.peak_flops)
    names = data.gemms.dtype_names()
    raised = []
    for dt in dict.fromkeys(names):
        sel = torch.tensor([x == dt for x in names])
        best = float((data.gemms.flops[sel] / (data.latency_ms[sel] * 1e-3)).max())
        key = DTYPES[dt].peak_key
        if dt == "float32" and spec.peak("fp32_matrix"):
            key = "fp32_matrix"
        current = peaks.get(key)
        if current is None or not current > best:
            peaks[key] = best * 1.05
            raised.append(key)
    if not raised:
        return spec
    return replace(spec, peak_flops=tuple(sorted(peaks.items())),
                   uncertain=tuple(dict.fromkeys((*spec.uncertain, "peak_flops"))),
                   notes=(*spec.notes, (f"peaks {', '.join(raised)} raised to 1.05x the best "
                                        "measured rate")))


def _as_measured(data: Calibration, spec: DeviceSpec) -> Any:
    """``data`` as the hybrid's ``MeasuredGemms``. NB: its ``gpu`` column holds the spec itself
    (``get_device`` takes either), since a calibrated device need not be in the catalog; CPU
    wall-clock rows use the hybrid's ``event`` launch slot (both include dispatch)."""
    from .gemms.measured import MeasuredGemms

    size = len(data)
    timing = "event" if data.timing == "wall" else data.timing
    gpu = cast("tuple[str, ...]", (spec,) * size)
    return MeasuredGemms(gemms=data.gemms, gpu=gpu, source=(SOURCE,) * size,
                         timing=(timing,) * size, latency_ms=data.latency_ms)


def _shipped_hybrid(steps: int, seed: int) -> Any:
    """The hybrid predictor with the package's shipped weights, or None where there are none."""
    from importlib import resources

    from .predict import shipped_weights_path
    from .predict.hybrid import HybridPredictor

    path = shipped_weights_path()
    if not path.is_file():
        return None
    with resources.as_file(path) as real:
        return HybridPredictor.load(real).set_params(steps=steps, seed=seed,
                                                     default_timing="event")


def fit_profile(spec: DeviceSpec, data: Calibration, *, seed: int = 0, holdout: float = 0.2,
                steps: int = 600, hybrid_steps: int = 100) -> dict[str, Any]:
    """Fit the profile's predictor to ``data`` and return the profile document.

    Candidates are fitted on a seeded 80% of the rows and scored on the rest: the hybrid
    predictor fine-tuned from the shipped weights (warm start, ``hybrid_steps`` Adam steps;
    skipped where no weights ship) and ``CalibratedPredictor`` at each register/CTA tile. The
    candidate with the lowest held-out median APE is refitted on all rows and kept.
    """
    spec = _measured_spec(spec, data)
    train_idx, val_idx = _split(len(data), holdout, seed)
    train = data.select(train_idx)
    val = data.select(val_idx) if len(val_idx) else train
    scores: dict[str, dict[str, float]] = {}
    fitted: dict[str, Any] = {}
    hybrid = _shipped_hybrid(hybrid_steps, seed) if hybrid_steps > 0 else None
    if hybrid is not None:
        hybrid.fit(_as_measured(train, spec), warm_start=True)
        fitted["hybrid"] = hybrid
        scores["hybrid"] = summarize_errors(hybrid.predict(val.gemms, spec).time_ms,
                                            val.latency_ms).in_percent()
    for tn, block in _tile_candidates(spec):
        model = CalibratedPredictor(tile_n=tn, block=block, steps=steps, seed=seed)
        model.fit(train, spec)
        fitted[f"calibrated_n{tn}"] = model
        scores[f"calibrated_n{tn}"] = summarize_errors(model.predict(val.gemms, spec).time_ms,
                                                       val.latency_ms).in_percent()
    for name, score in scores.items():
        log.info("%s: held-out MAPE %.1f%%, median %.1f%%", name, score["mape"],
                 score["median_ape"])
    # by median APE: a mean would rank candidates on the few rows that other jobs stalled
    chosen = min(scores, key=lambda name: (scores[name]["median_ape"], scores[name]["mape"]))
    model = fitted[chosen]
    if chosen == "hybrid":
        model.set_params(steps=max(1, hybrid_steps // 3))
        model.fit(_as_measured(data, spec), warm_start=True).set_params(steps=hybrid_steps)
        predictor_doc = {"kind": "hybrid", "weights": model.to_dict()}
        constants = model.physical_constants()
    else:
        model.set_params(steps=max(1, steps // 3))
        model.fit(data, spec, warm_start=True).set_params(steps=steps)
        predictor_doc = model.to_dict()
        constants = model.physical_constants()
    return {
        "format": FORMAT,
        "version": VERSION,
        "device": spec_to_record(spec),
        "predictor": predictor_doc,
        "fit": {
            "rows": len(data), "holdout_rows": len(val_idx), "timing": data.timing,
            "holdout": scores, "chosen": chosen,
            "train_all": summarize_errors(model.predict(data.gemms, spec).time_ms,
                                          data.latency_ms).in_percent(),
            "constants": constants,
        },
    }


def save_profile(path: str | Path, profile: Mapping[str, Any]) -> Path:
    """Write a profile document as JSON."""
    path = Path(path)
    path.write_text(json.dumps(profile, indent=1) + "\n", encoding="utf-8")
    return path


_PREDICTOR_KINDS = ("calibrated", "hybrid")


def load_profile(path: str | Path) -> tuple[DeviceSpec, Predictor]:
    """The device spec and fitted predictor of a calibration profile written by
    ``torch-gemm-cost calibrate``. JSON only, validated: a missing file raises FileNotFoundError,
    anything malformed a ValueError that names the file and the bad entry."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"calibration profile {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"calibration profile {str(path)!r} cannot be read: {e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"calibration profile {str(path)!r} is not valid JSON: {e}") from None
    try:
        if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
            got = doc.get("format") if isinstance(doc, Mapping) else type(doc).__name__
            raise ValueError(f"format is {got!r}, expected {FORMAT!r}")
        if doc.get("version") != VERSION:
            raise ValueError(f"version is {doc.get('version')!r}, this reader knows {VERSION}")
        for key in ("device", "predictor"):
            if key not in doc:
                raise ValueError(f"missing {key!r}")
        spec = spec_from_record(doc["device"])
        pred_doc = doc["predictor"]
        kind = pred_doc.get("kind") if isinstance(pred_doc, Mapping) else None
        if kind == "calibrated":
            predictor: Predictor = CalibratedPredictor.from_dict(pred_doc)
        elif kind == "hybrid":
            from .predict.hybrid import HybridPredictor

            weights = pred_doc["weights"]
            got = weights.get("version") if isinstance(weights, Mapping) else None
            if str(got) != HybridPredictor.version:
                # the profile's device still stands, but its weights are another model's
                raise ValueError(
                    f"its hybrid weights are version {got}, this predictor reads version "
                    f"{HybridPredictor.version}: run `torch-gemm-cost calibrate` again")
            predictor = HybridPredictor.from_dict(weights)
        else:
            raise ValueError(f"predictor kind is {kind!r}; known: {', '.join(_PREDICTOR_KINDS)}")
    except (KeyError, TypeError, ValueError) as e:
        detail = f"missing {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"calibration profile {str(path)!r} is invalid: {detail}") from None
    return spec, predictor


# ------------------------------------------------------------------------------- the whole loop
@dataclass(frozen=True)
class CalibrationResult:
    """Where ``calibrate`` wrote its files, and what it measured and fitted."""

    profile_path: Path
    measurements_path: Path
    spec: DeviceSpec
    measured: int  # sweep points timed
    planned: int  # sweep points designed
    elapsed_s: float
    fit: Mapping[str, Any]


def _cpu_times() -> tuple[float, float, float] | None:
    """(host idle CPU seconds, host total CPU seconds, this process's CPU seconds), from
    /proc/stat on Linux; None elsewhere."""
    try:
        with open("/proc/stat", encoding="utf-8") as fh:
            fields = [float(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = float(os.sysconf("SC_CLK_TCK"))
    return (fields[3] + fields[4]) / tick, sum(fields[:8]) / tick, time.process_time()


def _other_jobs_share(before: tuple[float, float, float] | None,
                      after: tuple[float, float, float] | None) -> float | None:
    """Share of the host's CPU time that other processes used between two ``_cpu_times``."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    idle, total, own = (a - b for a, b in zip(after, before))
    return min(1.0, max(0.0, 1.0 - (idle + own) / total))


def _target(device: str) -> tuple[DeviceSpec, str, Any]:
    """(spec, torch device, timer) for ``cpu``, ``cuda`` or ``cuda:N``."""
    if device == "cpu":
        return host_cpu(), "cpu", CpuTimer()
    if device == "cuda" or device.startswith("cuda:"):
        spec = get_device(device)  # raises if there is no GPU
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        dev = f"cuda:{index}"
        if not spec.dram_bw_bytes_per_s > 0:
            spec = replace(spec, dram_bw_bytes_per_s=copy_bw_bytes_per_s(dev))
        return spec, dev, CudaTimer(dev, spec.l2_bytes)
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def calibrate(
    device: str,
    budget_s: float,
    out_dir: str | Path,
    *,
    dtypes: Sequence[str] | None = None,
    reps: int = 7,
    seed: int = 0,
    fit_steps: int = 600,
    progress: Callable[[int, int, float, float], None] | None = None,
    timer: Any = None,
) -> CalibrationResult:
    """Measure a designed sweep on ``device`` for about ``budget_s`` seconds and fit a profile.

    Writes ``out_dir/measurements.csv`` (DATA.md schema) and ``out_dir/profile.json``. About 90%
    of the budget goes to timing (80% where shipped hybrid weights are to be fine-tuned), the
    rest to the fit. ``timer`` replaces the device's timer
    (tests use it to exercise the GPU path's flushes on the CPU).
    """
    if not budget_s > 0:
        raise ValueError(f"budget_s must be positive, got {budget_s!r}")
    start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec, dev, default_timer = _target(device)
    timer = timer or default_timer
    points = design_sweep(spec, dtypes, seed=seed)
    from .predict import shipped_weights_path

    # the fit takes about 10% of the budget, 20% with the hybrid to fine-tune as well
    fit_share = 0.2 if fit_steps > 0 and shipped_weights_path().is_file() else 0.1
    sweep_s = (1.0 - fit_share) * budget_s - (time.perf_counter() - start)
    before = _cpu_times()
    runs = run_sweep(points, dev, timer, sweep_s, reps=reps, progress=progress)
    busy = _other_jobs_share(before, _cpu_times())
    if busy is not None and busy > 0.25:
        log.warning("other jobs used %.0f%% of the host's CPU time during the sweep; its "
                    "timings may include their interference", 100 * busy)
    if not runs:
        raise ValueError(f"budget_s={budget_s} timed no GEMM on {spec.name}; the smallest "
                         f"useful budget here is about {budget_s + 5:.0f} s")
    csv_path = write_measurements(out / "measurements.csv", spec, runs, timer.timing)
    data = read_measurements(csv_path)
    profile = fit_profile(spec, data, seed=seed, steps=fit_steps,
                          hybrid_steps=max(0, fit_steps // 6))
    elapsed = time.perf_counter() - start
    profile["calibration"] = {
        "device": device, "budget_s": budget_s, "elapsed_s": round(elapsed, 2),
        "timing": timer.timing, "reps": reps, "seed": seed,
        "dtypes": list(dict.fromkeys(r.point.dtype for r in runs)),
        "measured": len(runs), "planned": len(points),
        "other_jobs_cpu_share": None if busy is None else round(busy, 3),
        "measurements": csv_path.name, "torch": torch.__version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = save_profile(out / "profile.json", profile)
    return CalibrationResult(path, csv_path, spec, len(runs), len(points), elapsed,
                             profile["fit"])
