"""Every GEMM of a report on its device's roofline, with matplotlib (the ``plot`` extra),
imported only when a plot is drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..hardware.dtypes import resolve_dtype
from .record import ReportRecord

__all__ = ["PLOT_INSTALL", "plot_roofline", "pyplot", "roofline_figure"]

# torch_gemm_cost is installed from a checkout (no package index has it): its plot extra is
# matplotlib
PLOT_INSTALL = ("pip install matplotlib (from a checkout of torch_gemm_cost: "
                "pip install -e '.[plot]')")


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
    """Draw every GEMM on the device's roofline (point area ∝ time), ridge marked; save to path.

    Needs matplotlib (``pip install matplotlib``; from a checkout, ``pip install -e '.[plot]'``).
    """
    plt = pyplot("plot_roofline")
    fig = roofline_figure(report, plt)
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def roofline_figure(report: ReportRecord, plt: Any) -> Any:
    """The roofline plot as a matplotlib figure (``plt`` is ``matplotlib.pyplot``)."""
    peak = report.device.peak_flops_per_s(resolve_dtype(report.dtype))
    bw = report.device.dram_bw_bytes_per_s
    ridge = peak / bw
    pts = [
        (g.site.flops / g.site.dram_bytes, g.site.flops / (g.time_ms * 1e-3), g.time_ms)
        for g in report.gemms
        if g.site.dram_bytes > 0 and g.time_ms > 0
    ]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lo = min([p[0] for p in pts] + [ridge]) / 4
    hi = max([p[0] for p in pts] + [ridge]) * 4
    xs = [lo, ridge, hi]
    ax.plot(xs, [min(peak, x * bw) / 1e12 for x in xs], color="k", lw=1.5, label="roofline")
    ax.axvline(ridge, color="grey", ls="--", lw=1)
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak / 1e12), textcoords="offset points",
                xytext=(5, -14), fontsize=8)
    if pts:
        tmax = max(p[2] for p in pts)
        ax.scatter([p[0] for p in pts], [p[1] / 1e12 for p in pts],
                   s=[10 + 290 * p[2] / tmax for p in pts], alpha=0.5, label="GEMMs")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
    ax.set_ylabel("predicted TFLOP/s")
    ax.set_title(f"{report.model} on {report.device.id}, {report.dtype} ({report.predictor})")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig
