"""A report as text: the cost table (tabulate, imported when rendering), its footer, the fused
kernels' table and the padding advice in words."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..advise import PaddingAdvice
from ..compiled.attention_rewrite import REWRITTEN
from ..predict.intervals import DEFAULT_LEVEL
from . import tree
from .memory_text import memory_text
from .record import ReportRecord

__all__ = ["NOVELTY_TEXT", "advice_line", "footer", "format_advice", "kernel_table", "render",
           "span_text", "table", "table_cells"]

# how the report names each novelty class of predict/intervals.py
NOVELTY_TEXT = {
    "calibrated": "from this device's own calibration",
    "chip_seen": "its chip was in the fit",
    "family_seen": "its architecture family was in the fit, its chip was not",
    "family_unseen": "neither its chip nor its family was in the fit",
}


def span_text(lo: float | None, hi: float | None) -> str:
    """An interval as ``lo-hi`` in four significant digits, ``-`` where there is none."""
    return "-" if lo is None or hi is None else f"{lo:.4g}-{hi:.4g}"


def table(report: ReportRecord, depth: int | None = None, top: int | None = None,
          intervals: bool = False) -> str:
    """The cost table: one row per GEMM (``depth=None``) or per module at ``depth`` levels.

    Repeated blocks collapse into one row (``GPT2Block × 12``) holding the time of all repeats.
    ``top`` keeps the costliest rows only, sorted by time. ``intervals`` adds each row's 80%
    interval (where the report has them).
    """
    from tabulate import tabulate

    headers, body, fmt, _ = table_cells(report, depth, top, intervals)
    return tabulate(body, headers=headers, floatfmt=fmt)


def table_cells(report: ReportRecord, depth: int | None, top: int | None, intervals: bool = False
                ) -> tuple[list[str], list[list[Any]], tuple[str, ...], list[dict[str, Any]]]:
    """The columns of ``table(report, depth, top)``: headers, cells, each column's number
    format, and the rows the cells come from."""
    rows = tree.top(report, top, depth) if top else tree.module_rows(report, depth)

    def kind(r: dict[str, Any], key: str) -> str:
        return r[key] + (f" × {r['count']}" if r["count"] > 1 else "")

    if depth is None:
        body = [
            [
                r["module"],
                kind(r, "op") if "op" in r else "",
                "×".join(map(str, r["shape"])) if "shape" in r else "",
                r.get("dtype", ""),
                r["flops"] / 1e9,
                r["time_ms"],
                r["pct_of_total"],
                r["bound"],
            ]
            for r in rows
        ]
        headers = ["module", "op", "B×M×N×K", "dtype", "GFLOP", "time ms", "% total", "bound"]
        fmt: tuple[str, ...] = ("", "", "", "", ".2f", ".4f", ".1f", "")
    else:
        body = [
            [r["module"], kind(r, "module_type"), r["gemms"], r["flops"] / 1e9, r["time_ms"],
             r["pct_of_total"], r["bound"]]
            for r in rows
        ]
        headers = ["module", "type", "GEMMs", "GFLOP", "time ms", "% total", "bound"]
        fmt = ("", "", "", ".2f", ".4f", ".1f", "")
    if intervals and report.uncertainty is not None:
        for line, r in zip(body, rows):
            line.append(span_text(r["lo_ms"], r["hi_ms"]))
        headers.append(f"{DEFAULT_LEVEL:.0%} interval ms")
        fmt = (*fmt, "")
    return headers, body, fmt, rows


def kernel_table(report: ReportRecord, top: int | None = None) -> str:
    """The fused kernels as a table: each kernel, its time and the ops fused into it;
    ``top`` keeps the costliest."""
    from tabulate import tabulate

    rows = report.kernels()
    if top:
        rows = sorted(rows, key=lambda r: -r["time_ms"])[:top]
    body = [[r["kernel"], r["phase"], r["module"] or "(top)", len(r["ops"]), r["time_ms"],
             ", ".join(dict.fromkeys(op.rsplit(":", 1)[1] for op in r["ops"]))]
            for r in rows]
    return tabulate(body, headers=["kernel", "phase", "first module", "ops", "time ms",
                                   "ops fused"], floatfmt=("", "", "", "", ".4f", ""))


def footer(report: ReportRecord) -> str:
    """The totals under the table: times, FLOP rate, predictor, unmodelled and fused ops."""
    unmod = report.unmodelled
    names = sorted({o.op.op for o in unmod})
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    kernels = report.kernels()
    fused = [k for k in kernels if not k["kernel"].startswith(("flash_attention_", "("))]
    flash = len(kernels) - len(fused) - sum(k["kernel"].startswith("(") for k in kernels)
    notes = ""
    if report.compiled:
        notes += (f"; torch.compile (inductor): {len(fused)} fused kernels run "
                  f"{sum(len(k['ops']) for k in fused)} ops")
    rewritten = sum(o.op.attention is not None and o.op.phase == "forward"
                    and o.op.node.startswith(REWRITTEN) for o in report.others)
    if flash:
        notes += f"; {flash} SDPA calls as flash attention kernels"
    if rewritten:
        notes += (f", {rewritten} of them hand-written attention that inductor rewrites"
                  if flash else f"; {rewritten} hand-written attentions that inductor "
                  "rewrites into SDPA calls")
    span = ""
    if report.uncertainty is not None:
        lo, hi = report.interval(DEFAULT_LEVEL)
        span = (f" [{DEFAULT_LEVEL:.0%} interval {lo:.3f}-{hi:.3f} ms, "
                f"{NOVELTY_TEXT[report.uncertainty.novelty]}]")
    return (
        f"{report.model} on {report.device.name} ({report.device.id}), {report.dtype}, "
        f"{report.mode}: total {report.total_ms:.3f} ms{span} (GEMM {report.gemm_ms:.3f} ms in "
        f"{len(report.gemms)} GEMMs, "
        f"other {report.other_ms:.3f} ms), {report.achieved_tflops:.1f} TFLOP/s achieved\n"
        f"predictor {report.predictor} v{report.predictor_version}; "
        f"{len(unmod)} unmodelled ops" + (f" ({shown})" if unmod else "") + notes
        + ("; device from a spec file: its datasheet only, never measured"
           if report.device.origin == "spec_file" else "")
    )


def render(report: ReportRecord) -> str:
    """The whole report as text: the per-GEMM table, the footer, the memory and the best three
    padding suggestions."""
    text = f"{table(report)}\n{footer(report)}"
    if report.memory is not None:
        text += "\n" + memory_text(report.memory)
    if report.gemms and report.advice is not None:
        text += "\n" + format_advice(report.advice[:3])
    return text


def advice_line(a: PaddingAdvice) -> str:
    """One padding suggestion in words."""
    what = a.config_field or a.dim
    return (f"{what} {a.current} -> {a.suggested} in {', '.join(a.modules)}: "
            f"whole model {a.model_ms_before:.3f} -> {a.model_ms_after:.3f} ms "
            f"(-{a.saving_pct:.1f}%), {a.extra_flops_pct:+.2f}% FLOPs there. {a.cause}")


def format_advice(advice: Iterable[PaddingAdvice]) -> str:
    """Padding advice as numbered lines, best first."""
    items = list(advice)
    if not items:
        return "padding advice: none (the predictor finds no padding that saves time)"
    lines = ["padding advice (predicted):"]
    lines += [f"  {i}. {advice_line(a)}" for i, a in enumerate(items, 1)]
    return "\n".join(lines)
