"""Stage 1: output tiles, split-K and waves.

A GEMM runs as a grid of Tm×Tn output tiles, each stepping through k (or k/split_k with split-K).
Tiles run in waves of ``SMs × CTAs per SM``, or, with stream-K on the large-tile engine, as an even
share of all tiles' work per slot. Every candidate (tile, split) of the GEMM's engine gets its
tile count, waves and work per wave; the predictor takes the fastest.

NB: the fastest candidate is an envelope over plausible kernels, not the kernel cuBLAS picks (on
NeuSight's rows it matches the real tile only part of the time).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "ENGINES",
    "MAX_CTAS",
    "MAX_SPLIT_K",
    "MMA_ROWS",
    "SPLITS",
    "SPLITS_BY_ENGINE",
    "STREAM_K",
    "TILES",
    "TileGrid",
    "candidate_table",
    "ctas_per_sm",
    "mma_row_share",
    "tile_grid",
]

# Execution engines: CUDA-core SIMT, matrix units (Volta..Ada, CDNA), large-tile matrix units
# (Hopper and later: warpgroup MMA with bigger tiles).
ENGINES: tuple[str, ...] = ("simt", "mma", "mma_large")

# (Tm, Tn) candidates per engine, from cuBLAS/CUTLASS kernel names (e.g. ampere_sgemm_128x64).
TILES: dict[str, tuple[tuple[int, int], ...]] = {
    "simt": ((32, 32), (64, 32), (32, 64), (64, 64), (128, 32), (32, 128), (128, 64), (64, 128),
             (128, 128)),
    "mma": ((64, 32), (32, 64), (64, 64), (128, 64), (64, 128), (128, 128), (256, 64), (64, 256),
            (256, 128), (128, 256)),
    "mma_large": ((64, 64), (128, 64), (64, 128), (128, 128), (256, 64), (64, 256), (256, 128),
                  (128, 256), (256, 256)),
}
# Most CTAs one SM runs at a time, per engine. An SGEMM CTA keeps its SM's FMA pipes busy alone, so
# SIMT waves count one tile per SM: where cuBLAS runs one kernel for every shape (A100: 128x128,
# Pascal: 128x64), the time of fp32 bmm follows floor + waves·(c·k + c0) with waves counted as one
# CTA per SM, not two.
MAX_CTAS: dict[str, int] = {"simt": 1, "mma": 4, "mma_large": 4}
# Split-K options per tile: 1 (none) or 0, meaning "fill the machine": the largest power of two
# that keeps the split tiles in one wave (≤ slots / tiles), at most 64 and keeping k/split ≥ 128.
SPLITS: tuple[int, ...] = (1, 0)
MAX_SPLIT_K = 64.0
# Stream-K (Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense Matrix-Matrix
# Multiplication on the GPU", PPoPP 2023): a persistent grid of one CTA per slot, each taking an
# equal share of every tile's k-iterations, so a grid of more tiles than slots runs in
# tiles / slots waves, with no partial last wave. Hopper's and Blackwell's GEMM libraries ship it
# (CUTLASS 3's ``StreamKScheduler`` for sm90 and sm100 kernels; cuBLAS picks it by heuristic), so
# it is a candidate of the large-tile engine only; the older engines' libraries tile by waves.
STREAM_K = -1
SPLITS_BY_ENGINE: dict[str, tuple[int, ...]] = {
    "simt": SPLITS, "mma": SPLITS, "mma_large": SPLITS + (STREAM_K,)}
# Rows of one warp-level tensor-core step: PTX's mma.sync m16n8k16 for fp16/bf16 (sm_80 on;
# m16n8k8 for tf32, m16n8k32 for fp8): the fewest rows of A a tensor-core kernel can multiply.
MMA_ROWS = 16.0


@dataclass(frozen=True)
class CandidateTable:
    """Per engine, C candidate (Tm, Tn, split_k) triples, padded with invalid entries."""

    tile_m: torch.Tensor  # (E, C)
    tile_n: torch.Tensor  # (E, C)
    split_k: torch.Tensor  # (E, C); STREAM_K marks a stream-K candidate
    valid: torch.Tensor  # (E, C) bool


def candidate_table() -> CandidateTable:
    rows = [[(tm, tn, s) for (tm, tn) in TILES[e] for s in SPLITS_BY_ENGINE[e]] for e in ENGINES]
    width = max(len(r) for r in rows)
    pad = [r + [(64, 64, 1)] * (width - len(r)) for r in rows]
    t = torch.tensor(pad, dtype=torch.float64)  # (E, C, 3)
    valid = torch.tensor([[i < len(r) for i in range(width)] for r in rows])
    return CandidateTable(t[..., 0], t[..., 1], t[..., 2], valid)


def ctas_per_sm(tile_m: torch.Tensor, tile_n: torch.Tensor, regfile_bytes: torch.Tensor,
                max_ctas: torch.Tensor | float = 4.0) -> torch.Tensor:
    """CTAs that fit on one SM by registers: fp32 accumulators take Tm·Tn·4 bytes, about half
    the registers a CTA uses.

    >>> int(ctas_per_sm(torch.tensor(128.), torch.tensor(128.), torch.tensor(262144.)))
    2
    """
    per_cta = tile_m * tile_n * 4.0 * 2.0
    return torch.minimum(torch.clamp(torch.floor(regfile_bytes / per_cta), min=1.0),
                         torch.as_tensor(max_ctas, dtype=per_cta.dtype))


def mma_row_share(m: torch.Tensor, tile_m: torch.Tensor) -> torch.Tensor:
    """Share of a tiled grid's matrix work that a kernel stepping through m in ``MMA_ROWS``-row
    MMA steps runs: ⌈m/16⌉·16 rows of the ⌈m/Tm⌉·Tm the tiles hold (≤ 1). ``m`` (N,),
    ``tile_m`` (N, C); returns (N, C).

    >>> mma_row_share(torch.tensor([1.0, 20.0]), torch.tensor([[64.0], [128.0]])).squeeze(1)
    tensor([0.2500, 0.2500])
    """
    rows_run = (torch.ceil(m / MMA_ROWS) * MMA_ROWS).unsqueeze(1)  # (N, 1)
    rows_tiled = torch.ceil(m.unsqueeze(1) / tile_m) * tile_m  # (N, C)
    return torch.clamp(rows_run / rows_tiled, max=1.0)


@dataclass(frozen=True)
class TileGrid:
    """Tile and wave quantities per (GEMM, candidate), all (N, C) float64."""

    tile_m: torch.Tensor
    tile_n: torch.Tensor
    split_k: torch.Tensor
    tiles: torch.Tensor  # batch·⌈m/Tm⌉·⌈n/Tn⌉·split_k
    slots: torch.Tensor  # SMs · CTAs per SM
    waves: torch.Tensor  # ⌈tiles / slots⌉; tiles / slots for stream-K beyond one wave
    last_wave_fill: torch.Tensor  # share of slots busy in the last wave, (0, 1]
    k_slice: torch.Tensor  # k / split_k
    ops_per_wave: torch.Tensor  # 2·Tm·Tn·k_slice·slots
    valid: torch.Tensor  # (N, C) bool
    rows: torch.Tensor  # rows of A a tile holds on average: m / ⌈m/Tm⌉ (≤ Tm)
    cols: torch.Tensor  # columns of B a tile holds on average: n / ⌈n/Tn⌉ (≤ Tn)


def tile_grid(
    batch: torch.Tensor,
    m: torch.Tensor,
    n: torch.Tensor,
    k: torch.Tensor,
    engine: torch.Tensor,
    sm_count: torch.Tensor,
    regfile_bytes: torch.Tensor,
    table: CandidateTable | None = None,
) -> TileGrid:
    """Tiles and waves of every candidate. Dims and device columns are (N,); ``engine`` indexes
    ``ENGINES``. Dims must be ≥ 1 (the predictor handles empty GEMMs before this)."""
    table = table or candidate_table()
    tm = table.tile_m[engine].to(m.dtype)  # (N, C)
    tn = table.tile_n[engine].to(m.dtype)
    sk = table.split_k[engine].to(m.dtype)
    valid = table.valid[engine]
    b, mm, nn, kk = (x.unsqueeze(1) for x in (batch, m, n, k))  # (N, 1)
    max_ctas = torch.tensor([float(MAX_CTAS[e]) for e in ENGINES], dtype=m.dtype)[engine]
    slots = sm_count.unsqueeze(1) * ctas_per_sm(tm, tn, regfile_bytes.unsqueeze(1),
                                                max_ctas.unsqueeze(1))
    grid_m, grid_n = torch.ceil(mm / tm), torch.ceil(nn / tn)
    tiles_1 = b * grid_m * grid_n
    fill_split = torch.exp2(torch.floor(torch.log2(torch.clamp(slots / tiles_1, min=1.0))))
    fill_split = torch.clamp(torch.minimum(fill_split, torch.floor(kk / 128.0)), 1.0, MAX_SPLIT_K)
    stream = (sk == STREAM_K) & (tiles_1 > slots)  # within one wave, stream-K is data-parallel
    sk = torch.where(sk == 0, fill_split, torch.clamp(sk, min=1.0))
    tiles = tiles_1 * sk
    whole = torch.ceil(tiles / slots)
    waves = torch.where(stream, tiles / slots, whole)
    fill = torch.where(stream, 1.0, (tiles - (whole - 1.0) * slots) / slots)
    k_slice = kk / sk
    ops = 2.0 * tm * tn * k_slice * slots
    return TileGrid(tm, tn, sk, tiles, slots, waves, fill, k_slice, ops, valid,
                    mm / grid_m, nn / grid_n)
