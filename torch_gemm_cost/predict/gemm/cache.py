"""Stage 2: the three-level cache model and the effective bandwidth it gives.

Tile loads hit L1 with rate H1, L2 with rate H2, and otherwise go to DRAM at η_DRAM of its
datasheet bandwidth, shared by the tiles in flight (``grid_dram_bandwidth``: a grid that keeps
part of the GPU busy leaves DRAM to the SMs it uses, each up to its L2 port). A tile moves only
the rows and columns that exist (``TileGrid.rows``, ``cols``). The effective bandwidth weights
the time per byte at each level:

    1 / MemBw = H1 / BW_L1 + (1 − H1)·H2 / BW_L2 + (1 − H1)·(1 − H2) / (η_DRAM·BW_DRAM)

H2 comes from geometry: A/B panels shared by the tiles that run together in one wave are L2 hits
whatever the matrix size; reuse across waves holds only while the operands fit in L2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tiles import TileGrid

__all__ = [
    "L2Geometry",
    "effective_bandwidth",
    "grid_dram_bandwidth",
    "l2_geometry",
    "l2_hit_rate",
    "requested_ab_bytes",
    "wave_unique_ab_bytes",
]


def requested_ab_bytes(grid: TileGrid, in_bytes: torch.Tensor) -> torch.Tensor:
    """A and B bytes all tiles load: tiles·(rows + cols)·k_slice·bytes, (N, C), with the rows
    and columns a tile holds that exist (loads past an edge are predicated off)."""
    return grid.tiles * (grid.rows + grid.cols) * grid.k_slice * in_bytes.unsqueeze(1)


def wave_unique_ab_bytes(grid: TileGrid, m: torch.Tensor, n: torch.Tensor,
                         in_bytes: torch.Tensor) -> torch.Tensor:
    """Distinct A/B bytes the tiles of one full wave touch, (N, C).

    A wave smaller than one (batch, split) item's tile grid covers a near-square patch of
    wm×wn tiles: it reads the wm·rows of A and wn·cols of B that exist (``TileGrid.rows``,
    ``cols``: at most Tm and Tn a tile; loads past an edge are predicated off). A larger wave covers
    whole items, each reading its (m + n)·k_slice panel once.
    """
    mm, nn, eb = m.unsqueeze(1), n.unsqueeze(1), in_bytes.unsqueeze(1)
    gm = torch.ceil(mm / grid.tile_m)
    gn = torch.ceil(nn / grid.tile_n)
    per_item = gm * gn  # tiles of one (batch, split) item
    w = torch.minimum(grid.tiles, grid.slots)  # tiles in one wave
    wn = torch.minimum(gn, torch.sqrt(w))
    wm = torch.minimum(gm, w / wn)
    patch = (wm * grid.rows + wn * grid.cols) * grid.k_slice * eb
    whole = (w / per_item) * (mm + nn) * grid.k_slice * eb  # ⌈m/Tm⌉·Tm ≥ m: all of m and n
    return torch.where(w < per_item, patch, whole)


@dataclass(frozen=True)
class L2Geometry:
    """The parameter-free inputs of H2, (N, C) or (N, 1) bytes."""

    requested: torch.Tensor  # A/B bytes all tiles load
    unique_wave: torch.Tensor  # distinct A/B bytes of one wave
    waves: torch.Tensor
    compulsory: torch.Tensor  # batch·(mk + kn)·bytes
    item: torch.Tensor  # (mk + kn)·bytes: one batch item's operands

    def select(self, index: torch.Tensor) -> L2Geometry:
        """Keep candidate columns ``index`` (N, K)."""
        return L2Geometry(self.requested.gather(1, index), self.unique_wave.gather(1, index),
                          self.waves.gather(1, index), self.compulsory, self.item)


def l2_geometry(grid: TileGrid, batch: torch.Tensor, m: torch.Tensor, n: torch.Tensor,
                k: torch.Tensor, in_bytes: torch.Tensor) -> L2Geometry:
    return L2Geometry(
        requested=requested_ab_bytes(grid, in_bytes).clamp(min=1.0),
        unique_wave=wave_unique_ab_bytes(grid, m, n, in_bytes),
        waves=grid.waves,
        compulsory=(batch * (m * k + k * n) * in_bytes).unsqueeze(1),
        item=((m * k + k * n) * in_bytes).unsqueeze(1),
    )


def l2_hit_rate(geo: L2Geometry, l2_bytes: torch.Tensor, l2_share: torch.Tensor) -> torch.Tensor:
    """H2 per candidate, (N, C), in [0, 1].

    ``l2_share`` (0, 1] is the part of L2 that holds reusable panels. Panels shared by the tiles
    of one wave are hits whatever their size (the tiles step through k together, so only a few
    k-slabs are live); reuse across waves (H2 → 1 − compulsory/requested) holds while one item's
    A and B fit, falling off smoothly as (size / capacity)² beyond.
    """
    capacity = (l2_bytes * l2_share).unsqueeze(1)  # (N, 1)
    h2_wave = torch.clamp(1.0 - geo.waves * geo.unique_wave / geo.requested, 0.0, 1.0)
    h2_all = torch.clamp(1.0 - geo.compulsory / geo.requested, 0.0, 1.0)
    fit_all = 1.0 / (1.0 + (geo.item / capacity) ** 2)
    return h2_wave + torch.clamp(h2_all - h2_wave, min=0.0) * fit_all


def effective_bandwidth(
    h1: torch.Tensor,
    h2: torch.Tensor,
    bw_l1: torch.Tensor,
    bw_l2: torch.Tensor,
    bw_dram_eff: torch.Tensor,
) -> torch.Tensor:
    """Hit-weighted harmonic bandwidth (bytes/s). ``bw_dram_eff`` is η_DRAM·BW_DRAM.

    >>> f = lambda v: torch.tensor(v, dtype=torch.float64)
    >>> float(effective_bandwidth(f(0.), f(0.), f(1e13), f(5e12), f(1.6e12)))  # H1 = H2 = 0
    1600000000000.0
    """
    per_byte = h1 / bw_l1 + (1.0 - h1) * h2 / bw_l2 + (1.0 - h1) * (1.0 - h2) / bw_dram_eff
    return 1.0 / per_byte


def grid_dram_bandwidth(bw_dram_eff: torch.Tensor, bw_l2: torch.Tensor, waves: torch.Tensor,
                        last_wave_fill: torch.Tensor) -> torch.Tensor:
    """DRAM bandwidth (bytes/s) as a grid's tiles see it, (N, C), in the units the memory side
    costs them in: whole waves, every slot's tile drawing its share.

    DRAM is shared by the tiles in flight. A grid that keeps a share ``occupancy`` of the slots
    busy, (waves − 1 + last_wave_fill) / waves, leaves each of them 1/occupancy times a full
    wave's share, up to what an SM can draw at all, its L2 port (``bw_l2``, the L2 rate of
    every SM together):

        BW = min(η·BW_DRAM / occupancy, BW_L2)

    >>> f = lambda v: torch.tensor([v], dtype=torch.float64)
    >>> float(grid_dram_bandwidth(f(1e12), f(4e13), f(1.), f(0.25)))  # a quarter-full wave
    4000000000000.0
    >>> float(grid_dram_bandwidth(f(1e12), f(4e13), f(1.), f(0.01)))  # one tile: the L2 port
    40000000000000.0
    >>> float(grid_dram_bandwidth(f(1e12), f(4e13), f(4.), f(1.)))  # full waves: DRAM's own
    1000000000000.0
    """
    occupancy = (waves - 1.0 + last_wave_fill) / waves
    return torch.minimum(bw_dram_eff / occupancy, bw_l2)
