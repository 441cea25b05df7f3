"""Sustained compute: the share of its datasheet rate an engine keeps under load.

Two limits that no GPU's data can teach another, so both come from the catalog:

Issue. An SM issues schedulers × dispatch units × 32 instruction lanes a clock. On Pascal (two
dispatch units) and on Volta, Turing and GA100 (16-lane FP32 pipes) that is twice the FP32
lanes; on GA102, Ada, Hopper and Blackwell it equals them, so each load, address or loop
instruction an SGEMM issues takes a slot from an FMA:

    issue share = min(1, issue lanes per FP32 lane / (1 + r))

with r the non-FMA instructions per FMA of the SGEMM main loop (a CUTLASS SIMT loop with an
8x8 thread tile: 64 FFMA, 4 LDS.128 and about 2 more per k step, r ≈ 6/64).

Power. NVIDIA's base clock is the clock a board guarantees at its power limit on a heavy load.
Power grows as activity × clock^γ (P ∝ f·V², V rising with f), so a GEMM that keeps a share
``activity`` of its engine busy holds

    clock / boost = min(1, (base / boost) · (base_activity / activity)^(1/γ))

where base_activity (one per engine: SIMT, matrix) is the activity the base clock is specified
for, relative to a GEMM running flat out. The min is the soft knee of ``power_cap``.

Boost. The top of that min is set by the board, not the chip. A datacenter board's boost clock
is the highest it runs. A GeForce card's rated boost clock is a typical clock: GPU Boost raises
a fan-cooled card above it while power and temperature allow, and its datasheet peaks (computed
at the rated boost) are exceeded. Public clocks of GeForce cards at stock under load: RTX 4090
Founders Edition 2810-2850 MHz against its rated 2520 (1.12x), RTX 3090 Ti Founders Edition
2000-2050 MHz against 1860 (1.09x) (NVIDIA's Cyberpunk 2077 demo, TweakTown 2022-09-22); and an
RTX 4090 runs cuBLASLt fp16, bf16 and fp8 GEMMs at 179.2, 179.2 and 354.3 TFLOP/s, 1.08x and
1.07x its datasheet's 165.2 and 330.3 (xzwgit/gpu-flops-bench README). So a GeForce board's top
clock for a matrix-unit GEMM is ``GEFORCE_CLOCK_OVER_BOOST`` (1.10) times its rated boost, with
the power law above still under it: its base clock stays the clock it holds at its power limit.
A SIMT (CUDA-core) GEMM keeps the rated boost: public FP32 SGEMMs reach 24.5-24.8 TFLOP/s on an
RTX 3090 and 47.6-49.3 on an RTX 4090 (benchmarks/sustained.py), no faster than at the rated
clock, as FMAs on every lane draw a board to its power limit where half-rate tensor math (fp32
accumulation on GeForce) does not.

A flat-out GEMM's clock. Where the vendor publishes the clock a board holds on its best dense
GEMM at its power limit (AMD's Max-Achievable FLOPs runs report the median clock), that clock
is the one at activity 1, and the same law raises it for lighter GEMMs:

    clock / boost = min(1, (gemm clock / boost) · (1 / activity)^(1/γ))
"""

from __future__ import annotations

import torch

__all__ = ["GEFORCE_CLOCK_OVER_BOOST", "power_cap", "simt_issue_share", "sustained_clock_share",
           "top_clock_over_boost"]

# the top clock of a GeForce board under load over its rated boost clock (see above)
GEFORCE_CLOCK_OVER_BOOST = 1.10


def top_clock_over_boost(board_class: str) -> float:
    """The highest clock a board of ``board_class`` (catalog.BOARD_CLASSES) runs a matrix-unit
    GEMM at, over its rated boost clock: 1.10 on GeForce, 1 on every other board.

    >>> top_clock_over_boost("geforce"), top_clock_over_boost("datacenter")
    (1.1, 1.0)
    """
    return GEFORCE_CLOCK_OVER_BOOST if board_class == "geforce" else 1.0


def power_cap(need_w: torch.Tensor, board_w: torch.Tensor, *, q: torch.Tensor | float,
              alpha: torch.Tensor | float) -> torch.Tensor:
    """Share of full clock (0, 1] a board of ``board_w`` watts sustains when running at full
    clock would draw ``need_w``: (1 + (need/board)^(q·α))^(−1/q) → min(1, (board/need)^α).
    Broadcasts; NaN ``board_w`` (power unknown) means no cap."""
    unknown = torch.isnan(board_w)
    # NB: a NaN in the branch torch.where drops still poisons the gradient, so unknown boards
    # get a finite stand-in before the division
    safe_w = torch.where(unknown, need_w, board_w)
    cap = (1.0 + (need_w / safe_w) ** (q * alpha)) ** (-1.0 / q)
    return torch.where(unknown, torch.ones_like(cap), cap)


def sustained_clock_share(activity: torch.Tensor, base_share: torch.Tensor,
                          base_activity: torch.Tensor, *, gamma: torch.Tensor | float,
                          q: torch.Tensor | float) -> torch.Tensor:
    """Share of boost clock held at ``activity`` by a board whose base clock is ``base_share``
    of its boost (NaN: unpublished, no drop). Broadcasts."""
    unknown = torch.isnan(base_share)
    # NB: NaN must not reach the power law even where torch.where drops it (gradients)
    boost_over_base = torch.where(unknown, torch.ones_like(base_share), 1.0 / base_share)
    need = activity / base_activity * boost_over_base ** gamma  # power at boost / the limit
    board = torch.where(unknown, torch.full_like(base_share, float("nan")),
                        torch.ones_like(base_share))
    return power_cap(need, board, q=q, alpha=1.0 / gamma)


def simt_issue_share(issue_per_lane: torch.Tensor, overhead_per_fma: torch.Tensor | float
                     ) -> torch.Tensor:
    """Share of the FP32 lanes an SGEMM keeps busy when every non-FMA instruction takes an
    issue slot: min(1, issue lanes per FP32 lane / (1 + overhead))."""
    return torch.clamp(issue_per_lane / (1.0 + overhead_per_fma), max=1.0)
