"""A report's GEMMs on its device's roofline: the points (one per row of the per-GEMM table,
so a point and its row say the same bound), and the plot drawn with matplotlib (the ``plot``
extra), imported only when a plot is drawn. The page draws the same points as SVG
(``svg_roofline``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .record import ReportRecord
from .tree import module_rows

__all__ = ["LABELLED", "PLOT_INSTALL", "RooflinePoint", "plot_roofline", "pyplot",
           "roofline_figure",
           "roofline_points"]

LABELLED = 5  # the costliest points a plot names
# torch_gemm_cost is installed from a checkout (no package index has it): its plot extra is
# matplotlib
PLOT_INSTALL = ("pip install matplotlib (from a checkout of torch_gemm_cost: "
                "pip install -e '.[plot]')")


@dataclass(frozen=True)
class RooflinePoint:
    """One row of the per-GEMM table on the roofline: its GEMMs' FLOPs per compulsory byte and
    their FLOP rate at the predicted time; ``bound`` is the row's, by the same intensity."""

    label: str  # the row's label, unique in the table
    shape: tuple[int, ...]  # B×M×N×K of one of its GEMMs
    count: int  # repeats the row folds
    intensity: float  # FLOP per compulsory DRAM byte
    tflops: float  # predicted TFLOP/s
    time_ms: float  # all its repeats
    bound: str  # "compute" or "memory"


def roofline_points(report: ReportRecord) -> list[RooflinePoint]:
    """The points of the report's GEMM rows that have a time of their own (a GEMM run inside
    a fused attention kernel has none), costliest first."""
    return [
        RooflinePoint(r["label"], tuple(r["shape"]), r["count"], r["intensity"],
                      r["flops"] / (r["gemm_ms"] * 1e-3) / 1e12, r["time_ms"], r["bound"])
        for r in module_rows(report)
        if r["bound"] in ("compute", "memory") and r["gemm_ms"] > 0 and r["intensity"]
    ]


def pyplot(caller: str) -> Any:
    """matplotlib.pyplot on the Agg backend, or an ImportError naming the extra to install."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(f"{caller} needs matplotlib: {PLOT_INSTALL}") from e
    return plt


def plot_roofline(report: ReportRecord, path: str | Path) -> Path:
    """Draw every GEMM row on the device's roofline (point area ∝ time, colour by bound, the
    costliest named), ridge marked; save to path.

    Needs matplotlib (``pip install matplotlib``; from a checkout, ``pip install -e '.[plot]'``).
    """
    plt = pyplot("plot_roofline")
    fig = roofline_figure(report, plt)
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


_COLOURS = {"compute": "#4878b0", "memory": "#d8873a"}


def roofline_figure(report: ReportRecord, plt: Any) -> Any:
    """The roofline plot as a matplotlib figure (``plt`` is ``matplotlib.pyplot``)."""
    ridge = report.ridge_flops_per_byte
    bw = report.device.dram_bw_bytes_per_s
    peak = ridge * bw
    pts = roofline_points(report)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lo = min([p.intensity for p in pts] + [ridge]) / 4
    hi = max([p.intensity for p in pts] + [ridge]) * 4
    xs = [lo, ridge, hi]
    ax.plot(xs, [min(peak, x * bw) / 1e12 for x in xs], color="k", lw=1.5, label="roofline")
    ax.axvline(ridge, color="grey", ls="--", lw=1)
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak / 1e12), textcoords="offset points",
                xytext=(5, -14), fontsize=8)
    tmax = max((p.time_ms for p in pts), default=1.0)
    for bound, colour in _COLOURS.items():
        mine = [p for p in pts if p.bound == bound]
        if mine:
            ax.scatter([p.intensity for p in mine], [p.tflops for p in mine],
                       s=[10 + 290 * p.time_ms / tmax for p in mine], alpha=0.5, color=colour,
                       label=f"{bound}-bound GEMMs")
    for p in pts[:LABELLED]:
        ax.annotate(p.label, (p.intensity, p.tflops), textcoords="offset points", xytext=(4, 4),
                    fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
    ax.set_ylabel("predicted TFLOP/s")
    ax.set_title(f"{report.model} on {report.device.id}, {report.dtype} ({report.predictor})")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig
