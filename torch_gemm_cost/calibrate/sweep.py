"""What to time: a designed sweep of GEMM shapes, cheapest first, per device and dtype."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..hardware.catalog import DeviceSpec, is_cpu
from ..hardware.dtypes import DTYPES, resolve_dtype
from ..suggest import check_choice

__all__ = [
    "SWEEP_OPS",
    "SweepPoint",
    "alignment_dtypes",
    "design_alignment_sweep",
    "design_sweep",
    "sweep_dtypes",
]

MAX_OPERAND_BYTES = 1 << 29  # largest A or B the sweep allocates (512 MiB)
SWEEP_OPS = ("bmm", "linear", "matmul")


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
        check_choice("op", self.op, SWEEP_OPS)
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


def sweep_dtypes(spec: DeviceSpec) -> tuple[str, ...]:
    """Every dtype the sweep times on ``spec``: those the device runs fast.

    CPU: float32, plus bfloat16/float16 where the ISA has dot-product instructions for them
    (without, torch falls back to slow scalar paths). GPU: float32, tf32, float16, bfloat16 as
    supported. NB: fp8 and int8 need scaled-matmul kernels and are not swept.
    """
    if is_cpu(spec):
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
    if is_cpu(spec):
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
    floor = 10e-6 if is_cpu(spec) else 20e-6
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
    max_est_s = max_est_s if max_est_s is not None else (3.0 if is_cpu(spec) else 0.2)
    shapes = _regime_shapes(spec) + _random_shapes(seed, n_random)
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


_Shape = tuple[tuple[int, int, int, int], str]  # (batch, m, n, k), regime


def _regime_shapes(spec: DeviceSpec) -> list[_Shape]:
    """The hand-designed regimes of ``design_sweep``, in order."""
    cores = max(1, spec.sm_count)
    edges, block = _blocking(spec)
    shapes: list[_Shape] = []

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
    return shapes


def _random_shapes(seed: int, count: int) -> list[_Shape]:
    """Seeded log-uniform shapes, every other one rounded to a multiple of 8, 16 or 64."""
    rng = random.Random(seed)

    def log_uniform(lo: int, hi: int) -> int:
        return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))

    shapes: list[_Shape] = []
    for i in range(count):
        b = 1 if rng.random() < 0.7 else log_uniform(2, 64)
        m, n, k = log_uniform(1, 4096), log_uniform(8, 8192), log_uniform(8, 8192)
        if i % 2 == 0:  # aligned half
            q = rng.choice((8, 16, 64))
            n, k = max(q, n // q * q), max(q, k // q * q)
            m = m if m < q else m // q * q
        shapes.append(((b, m, n, k), "random"))
    return shapes


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
    if not is_cpu(spec) and spec.peak("fp8"):
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
    max_est_s = max_est_s if max_est_s is not None else (3.0 if is_cpu(spec) else 0.2)
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
