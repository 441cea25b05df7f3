"""The Pareto front of a sweep's rows (fewer GPUs or less cost, and less latency, are both
better) and its plot (matplotlib, the ``plot`` extra)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["pareto_front", "plot_pareto"]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value in (None, ""):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _feasible(row: Mapping[str, Any]) -> bool:
    """A row without an error whose memory fits (where it says: a CSV holds "False")."""
    return not row.get("error") and row.get("fits") not in (False, "False")


def pareto_front(rows: Sequence[Mapping[str, Any]], x: str, y: str) -> list[Mapping[str, Any]]:
    """The rows no other row beats on both ``x`` and ``y`` (lower is better on both), by
    ascending ``x``; rows with an error, whose memory does not fit (``fits`` false), or
    without both figures are left out.

    >>> rows = [{"gpus": 1, "ms": 9}, {"gpus": 2, "ms": 5}, {"gpus": 2, "ms": 7},
    ...         {"gpus": 4, "ms": 6}, {"gpus": 8, "ms": 2}]
    >>> [(r["gpus"], r["ms"]) for r in pareto_front(rows, "gpus", "ms")]
    [(1, 9), (2, 5), (8, 2)]
    """
    points = [(_number(r.get(x)), _number(r.get(y)), r) for r in rows if _feasible(r)]
    valid = sorted(((a, b, r) for a, b, r in points if a is not None and b is not None),
                   key=lambda p: (p[0], p[1]))
    front, best = [], math.inf
    for a, b, r in valid:
        if b < best:
            front.append(r)
            best = b
    return front


def plot_pareto(rows: Sequence[Mapping[str, Any]], x: str, y: str, path: str | Path,
                title: str = "") -> Path:
    """Every row as a point of (``x``, ``y``), the Pareto front joined; saved to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("the Pareto plot needs matplotlib: pip install matplotlib "
                         "(from a checkout of torch_gemm_cost: pip install -e '.[plot]')") from None
    pts: list[tuple[float, float]] = []
    for r in rows:
        a, b = _number(r.get(x)), _number(r.get(y))
        if _feasible(r) and a is not None and b is not None:
            pts.append((a, b))
    if not pts:
        raise ValueError(f"no row that fits has both {x!r} and {y!r} (and no error) to plot")
    front = pareto_front(rows, x, y)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([a for a, _ in pts], [b for _, b in pts], s=12, color="0.7",
               label="runs that fit")
    ax.step([float(r[x]) for r in front], [float(r[y]) for r in front], where="post",
            color="C0", marker="o", label="Pareto front")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_yscale("log")
    ax.set_title(title or f"{y} against {x}")
    ax.legend()
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
