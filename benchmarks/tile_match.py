"""How often the hybrid's chosen tile is the tile cuBLAS really ran.

    python benchmarks/tile_match.py [--data ../shared/data]

NeuSight recorded the cuBLAS kernel of each GEMM (``ampere_sgemm_128x64_tn``: a 128×64 tile). The
predictor's tile is the minimum of an envelope over candidate tiles, so it is not expected to pick
cuBLAS's kernel; this measures how far apart they are. cuBLAS is column-major: torch's C = A·B runs
as Cᵀ = Bᵀ·Aᵀ, so the kernel's first tile dim covers our n and its second our m. Both readings are
counted. Writes ``benchmarks/results/tile_match.md``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch

from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.measured.gemm import DEFAULT_DATA_DIR, load_gemms
from torch_gemm_cost.predict import default_predictor

TILE = re.compile(r"sgemm_(\d+)x(\d+)")


def tile_of(kernel: str) -> tuple[int, int]:
    """The (m, n) tile a cuBLAS SGEMM kernel's name carries (``volta_sgemm_128x64_nn``)."""
    found = TILE.search(kernel)
    if found is None:
        raise ValueError(f"no sgemm tile in kernel name {kernel!r}")
    return int(found.group(1)), int(found.group(2))
RESULTS = Path(__file__).resolve().parent / "results" / "tile_match.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA_DIR, type=Path)
    args = parser.parse_args()
    data = load_gemms(args.data, sources=["neusight", "neusight-test"])
    predictor = default_predictor()
    gpus = sorted(set(data.gpu))
    table = []
    for gpu in gpus:
        rows = [
            i for i, (g, k) in enumerate(zip(data.gpu, data.kernel)) if g == gpu and TILE.search(k)
        ]
        if not rows:
            continue
        sub = data.select(rows)
        details = predictor.predict(sub.gemms, get_device(gpu)).details
        ours_m, ours_n = details["tile_m"].tolist(), details["tile_n"].tolist()
        theirs = [tile_of(k) for k in sub.kernel]
        as_ours = sum(int(m) == a and int(n) == b for m, n, (a, b) in zip(ours_m, ours_n, theirs))
        colmajor = sum(int(n) == a and int(m) == b for m, n, (a, b) in zip(ours_m, ours_n, theirs))
        either = sum(
            (int(m), int(n)) in ((a, b), (b, a)) for m, n, (a, b) in zip(ours_m, ours_n, theirs)
        )
        area = sum(int(m) * int(n) == a * b for m, n, (a, b) in zip(ours_m, ours_n, theirs))
        total = len(rows)
        table.append((gpu, total, as_ours / total, colmajor / total, either / total, area / total))
    lines = [
        "# Chosen tile against cuBLAS's kernel (NeuSight rows)",
        "",
        (f"Command: `python benchmarks/tile_match.py`; predictor {predictor.name} "
         f"v{predictor.version}, torch {torch.__version__}."),
        "",
        ("The tile is an envelope over candidates, not a kernel picker: these shares say how often "
         "the candidate that bounds the time is the tile cuBLAS ran."),
        "",
        "| gpu | rows | tile_m×tile_n as named | column-major reading | either | same tile area |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {g} | {n} | {a:.1%} | {c:.1%} | {e:.1%} | {s:.1%} |" for g, n, a, c, e, s in table
    ]
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
