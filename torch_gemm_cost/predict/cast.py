"""vLLM's fp8 activation cast: the kernel that converts a GEMM's 16-bit input to fp8 before an
fp8 GEMM, its time, and its two latencies read off measured rows.

vLLM's static per-tensor cast (``static_scaled_fp8_quant``, csrc/quantization/fp8/common.cu)
runs one CTA of 256 threads per token row, each thread converting one 16-byte vector (8
elements) per pass, so a row of K elements takes ⌈K / 2048⌉ passes. The SMs work through the
rows ⌈rows / SMs⌉ deep, each paying a fixed time per CTA and one more per further pass (about a
DRAM round trip, which the next pass waits on), and the 3 bytes an element (2 read, 1 written)
stream at the datasheet DRAM bandwidth on top:

    t = ⌈rows / SMs⌉ · (t_cta + (⌈K / 2048⌉ − 1) · t_pass) + 3 · rows · K / BW

Both latencies are in microseconds, not clocks. They are not fitted with the GEMM weights: the
joint fit trades them against the GEMM's own small-N error (it priced the cast 1.2-1.4× the
measured one on every GPU in its own fit). ``fit_cast_latencies`` reads them off the rows
instead: every (M, K) series of a GPU, timed at four or more N, is read at N -> 0, which leaves
the cast (and the launches) alone; over the deep series (M ≥ 4096, so launches are a small share
of each row an SM works through) the two latencies are the least-squares line in the passes,
the bytes term subtracted. The datasheet bandwidth, not a GEMM's sustained one, because the
input was just written and is partly still in L2; held out by chip the line's two latencies
agree to 10% between folds (``benchmarks/fp8_cast.py``).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

__all__ = ["CAST_BYTES_PER_ELEMENT", "CAST_ELEMENTS_PER_PASS", "DEEP_ROWS", "CastLatencies",
           "cast_intercepts_ms", "cast_ms", "fit_cast_latencies"]

# elements of a row the cast converts per pass: 256 threads × one 16-byte vector of 16-bit
# elements
CAST_ELEMENTS_PER_PASS = 256 * 16 // 2
# 2 bytes read, 1 written
CAST_BYTES_PER_ELEMENT = 3.0
# M of the series whose N -> 0 time is read as the cast's: ⌈M / SMs⌉ ≥ 28 rows an SM works
# through on the largest GPU measured (148 SMs), so the launches are a small share of a row
DEEP_ROWS = 4096


@dataclass(frozen=True)
class CastLatencies:
    """The cast's fixed time per CTA and per further pass over a row, and how many (M, K)
    series of how many GPUs they were read from."""

    cta_us: float
    pass_us: float
    series: int
    gpus: tuple[str, ...]


def cast_ms(elements: torch.Tensor, k: torch.Tensor, sm_count: torch.Tensor,
            dram_bw_bytes_per_s: torch.Tensor, cta_us: torch.Tensor,
            pass_us: torch.Tensor) -> torch.Tensor:
    """Milliseconds (N,) of casting ``elements`` (N,) 16-bit elements, rows of ``k`` (N,), on
    GPUs of ``sm_count`` SMs and a datasheet DRAM bandwidth of ``dram_bw_bytes_per_s`` (N,);
    0 where ``elements`` is 0. ``cta_us`` and ``pass_us`` are the two latencies (scalars or
    (N,)); the function is differentiable in them."""
    # NB: a stand-in of one element where none is cast, so no 0/0 reaches a gradient
    some = elements > 0
    elems = torch.where(some, elements, torch.ones_like(elements))
    k = k.clamp(min=1.0)
    rows = torch.round(elems / k)  # elements are rows · k; round off float32's error
    depth = torch.ceil(rows / sm_count)  # rows one SM works through
    passes = torch.ceil(k / CAST_ELEMENTS_PER_PASS)
    latency_s = depth * (cta_us + (passes - 1.0) * pass_us) * 1e-6
    cast_s = latency_s + CAST_BYTES_PER_ELEMENT * elems / dram_bw_bytes_per_s
    return torch.where(some, cast_s * 1e3, torch.zeros_like(cast_s))


def cast_intercepts_ms(m: Sequence[int], n: Sequence[int], k: Sequence[int],
                       ms: Sequence[float], min_elements: int = 1
                       ) -> dict[tuple[int, int], float]:
    """The time at N -> 0 of every (M, K) series with at least four distinct N and M·K of
    ``min_elements`` or more: the least-squares line through its four smallest N (one time
    per N, the median where N repeats), read at N = 0. Series whose intercept is not positive
    are left out."""
    series: dict[tuple[int, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for mi, ni, ki, t in zip(m, n, k, ms):
        if mi * ki >= min_elements:
            series[(mi, ki)][ni].append(t)
    out = {}
    for key, by_n in series.items():
        if len(by_n) < 4:
            continue
        xs = sorted(by_n)[:4]
        ys = [statistics.median(by_n[x]) for x in xs]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
                 / sum((x - mx) ** 2 for x in xs))
        intercept = my - slope * mx
        if intercept > 0:
            out[key] = intercept
    return out


def fit_cast_latencies(series: Mapping[str, Mapping[tuple[int, int], float]],
                       sm_count: Mapping[str, int], dram_bw_bytes_per_s: Mapping[str, float]
                       ) -> CastLatencies | None:
    """The cast's two latencies from ``series``, GPU -> {(M, K): the N -> 0 time in ms}
    (``cast_intercepts_ms``): a least-squares line, relative to each time, of the microseconds
    per row an SM works through (the time over ⌈M / SMs⌉, datasheet-bandwidth bytes taken off)
    against the passes over a row less one, each GPU weighing the same. Only series of
    M ≥ ``DEEP_ROWS`` count. None where they span fewer than two pass counts (the line is not
    determined) or the line is not positive."""
    xs: list[tuple[float, float]] = []
    ys: list[float] = []
    ws: list[float] = []
    passes_seen: set[int] = set()
    gpus = []
    for gpu in sorted(series):
        deep = [(m, k, ms) for (m, k), ms in series[gpu].items() if m >= DEEP_ROWS]
        if not deep:
            continue
        gpus.append(gpu)
        for m, k, ms in deep:
            depth = math.ceil(m / sm_count[gpu])
            passes = math.ceil(k / CAST_ELEMENTS_PER_PASS)
            passes_seen.add(passes)
            per_row_us = ms * 1e3 / depth
            bytes_us = CAST_BYTES_PER_ELEMENT * m * k / dram_bw_bytes_per_s[gpu] * 1e6 / depth
            # relative least squares: each equation divided by the measured time
            xs.append((1.0 / per_row_us, (passes - 1.0) / per_row_us))
            ys.append((per_row_us - bytes_us) / per_row_us)
            ws.append(1.0 / len(deep))
    if len(passes_seen) < 2:
        return None
    w = torch.tensor(ws, dtype=torch.float64).sqrt()
    a = torch.tensor(xs, dtype=torch.float64) * w[:, None]
    b = torch.tensor(ys, dtype=torch.float64) * w
    cta_us, pass_us = torch.linalg.lstsq(a, b[:, None]).solution.flatten().tolist()
    if cta_us <= 0 or pass_us <= 0:
        return None
    return CastLatencies(cta_us=cta_us, pass_us=pass_us, series=len(ys), gpus=tuple(gpus))
