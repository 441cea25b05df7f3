"""Stage 3: instruction-aware arithmetic intensity of one tile.

    I = TileOps / (TileMem + λ1·R_inst + λ2·W_inst)

R_inst and W_inst count the tile's global load and store instructions: bytes moved over the
vector width the operand's alignment allows (16 bytes when the leading dim in bytes is a multiple
of 16, else 8, 4 or 2). λ1, λ2 ≥ 0 are bytes-equivalent costs per instruction, so misaligned
operands pay in intensity.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tiles import TileGrid

__all__ = ["TileTraffic", "intensity", "tile_traffic"]


@dataclass(frozen=True)
class TileTraffic:
    """Per (GEMM, candidate), (N, C)."""

    ops: torch.Tensor  # 2·Tm·Tn·k_slice
    mem_bytes: torch.Tensor  # A and B panels read, C tile written
    read_inst: torch.Tensor
    write_inst: torch.Tensor


def tile_traffic(
    grid: TileGrid,
    in_bytes: torch.Tensor,
    out_bytes: torch.Tensor,
    a_align: torch.Tensor,
    b_align: torch.Tensor,
    c_align: torch.Tensor,
) -> TileTraffic:
    eb, ob = in_bytes.unsqueeze(1), out_bytes.unsqueeze(1)
    a_bytes = grid.tile_m * grid.k_slice * eb
    b_bytes = grid.tile_n * grid.k_slice * eb
    # NB: split-K partials are written in fp32 and reduced later; the reduce kernel is not modelled.
    c_elem = torch.where(grid.split_k > 1.0, torch.clamp(ob, min=4.0), ob)
    c_bytes = grid.tile_m * grid.tile_n * c_elem
    read_inst = a_bytes / a_align.unsqueeze(1) + b_bytes / b_align.unsqueeze(1)
    write_inst = c_bytes / c_align.unsqueeze(1)
    ops = 2.0 * grid.tile_m * grid.tile_n * grid.k_slice
    return TileTraffic(ops, a_bytes + b_bytes + c_bytes, read_inst, write_inst)


def intensity(traffic: TileTraffic, lambda_read: torch.Tensor,
              lambda_write: torch.Tensor) -> torch.Tensor:
    """FLOPs per byte-equivalent, (N, C).

    >>> f = lambda v: torch.tensor(v, dtype=torch.float64)
    >>> float(intensity(TileTraffic(f(100.), f(10.), f(2.), f(1.)), f(2.), f(1.)))
    6.666666666666667

    (100 / (10 + 2·2 + 1·1))
    """
    return traffic.ops / (traffic.mem_bytes + lambda_read * traffic.read_inst
                          + lambda_write * traffic.write_inst)
