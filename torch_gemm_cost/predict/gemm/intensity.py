"""Stage 3: instruction-aware arithmetic intensity of one tile.

    I = TileOps / (TileMem + λ1·R_inst + λ2·W_inst)

R_inst and W_inst count the tile's global load and store instructions: bytes moved over the
vector width the operand's alignment allows (16 bytes when the leading dim in bytes is a multiple
of 16, else 8, 4 or 2). λ1, λ2 ≥ 0 are bytes-equivalent costs per instruction, so misaligned
operands pay in intensity.

Loads can also cost issue slots inside the SM. ``narrow_loads`` counts a GEMM's warp-wide load
instructions at the copy width NVIDIA's kernel libraries actually use: they ship matrix kernels
for 16-byte and 4-byte copies (CUTLASS ``align8``/``align2`` for 16-bit types) and, below 4
bytes, one element per load; one kernel serves A, B and C, so the narrowest operand decides, and
an 8-byte alignment runs a 4-byte kernel. On an H200 bf16 Linear layers at m ≥ 2048 sustain
about 790 TFLOP/s with every operand aligned to 16 bytes, 265 at 4 or 8 bytes and 106–142 at 2
bytes, and the misaligned ones ran Ampere and Turing kernels
(``cutlass_80_…_align2``, ``cutlass_75_…_align1``): their time follows the load count once it
outgrows the MMA time. The hybrid makes these loads a roof of their own below 16 bytes
(hybrid.py); m = 1 or n = 1 runs GEMV kernels, which peel misaligned rows and stay exempt.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tiles import TileGrid

__all__ = ["TileTraffic", "intensity", "library_vector_bytes", "narrow_loads", "tile_traffic"]

WARP = 32  # lanes per warp-wide load instruction


@dataclass(frozen=True)
class TileTraffic:
    """Per (GEMM, candidate), (N, C)."""

    ops: torch.Tensor  # 2·Tm·Tn·k_slice
    mem_bytes: torch.Tensor  # A and B panels read, C tile written (rows and columns that exist)
    read_inst: torch.Tensor
    write_inst: torch.Tensor


def library_vector_bytes(align_bytes: torch.Tensor) -> torch.Tensor:
    """The copy width kernel libraries use for an operand aligned to ``align_bytes``: 16 bytes
    from 16, 4 bytes from 4 (8-byte alignment included), else the alignment itself.

    >>> library_vector_bytes(torch.tensor([1., 2., 4., 8., 16., 32.])).tolist()
    [1.0, 2.0, 4.0, 4.0, 16.0, 16.0]
    """
    return torch.where(align_bytes >= 16.0, torch.full_like(align_bytes, 16.0),
                       torch.where(align_bytes >= 4.0, torch.full_like(align_bytes, 4.0),
                                   align_bytes))


def tile_traffic(
    grid: TileGrid,
    in_bytes: torch.Tensor,
    out_bytes: torch.Tensor,
    a_align: torch.Tensor,
    b_align: torch.Tensor,
    c_align: torch.Tensor,
    b_elem_bytes: torch.Tensor | None = None,
) -> TileTraffic:
    """A tile's operand traffic and load/store instructions, (N, C). ``b_elem_bytes`` (N,):
    B's stored element size where it differs from A's (a quantized weight, its scales
    included); ``in_bytes`` when None."""
    eb, ob = in_bytes.unsqueeze(1), out_bytes.unsqueeze(1)
    bb = eb if b_elem_bytes is None else b_elem_bytes.unsqueeze(1)
    # NB: split-K partials are written in fp32 and reduced later; the reduce kernel is not modelled.
    c_elem = torch.where(grid.split_k > 1.0, torch.clamp(ob, min=4.0), ob)
    # a tile past the edge of A, B or C issues its loads and stores predicated off: they take
    # issue slots (the instruction counts are the whole tile's) but move no bytes, so the bytes
    # are those of the rows and columns that exist (grid.rows, grid.cols); the MMAs still run
    # on the whole tile (ops)
    read_inst = (grid.tile_m * grid.k_slice * eb / a_align.unsqueeze(1)
                 + grid.tile_n * grid.k_slice * bb / b_align.unsqueeze(1))
    write_inst = grid.tile_m * grid.tile_n * c_elem / c_align.unsqueeze(1)
    mem = (grid.rows * eb + grid.cols * bb) * grid.k_slice + grid.rows * grid.cols * c_elem
    ops = 2.0 * grid.tile_m * grid.tile_n * grid.k_slice
    return TileTraffic(ops, mem, read_inst, write_inst)


def narrow_loads(grid: TileGrid, batch: torch.Tensor, m: torch.Tensor, n: torch.Tensor,
                 k: torch.Tensor, in_bytes: torch.Tensor, width: torch.Tensor) -> torch.Tensor:
    """Warp-wide loads of A and B over the whole GEMM at copy ``width`` bytes, (N, C): every A
    row once per column of tiles, every B column once per row of tiles (split-K slices share
    the k extent). Dims and ``width`` are (N,).

    >>> from .tiles import tile_grid
    >>> t = lambda v: torch.tensor([float(v)])
    >>> g = tile_grid(t(1), t(256), t(256), t(64), torch.tensor([1]), t(100), t(262144.))
    >>> float(narrow_loads(g, t(1), t(256), t(256), t(64), t(2), t(2))[0, 10])
    2048.0

    (candidate 10 is 128×128 without split-K: A 256·64 elements × 2 column tiles + B 256·64 ×
    2 row tiles = 65536 elements of 2 bytes, 2 bytes a lane, 32 lanes a warp: 2048 loads)
    """
    b, mm, nn, kk = (x.unsqueeze(1) for x in (batch, m, n, k))
    elements = b * kk * (mm * torch.ceil(nn / grid.tile_n) + nn * torch.ceil(mm / grid.tile_m))
    return elements * (in_bytes / width / WARP).unsqueeze(1)


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
