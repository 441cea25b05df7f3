"""A report as text: the cost table (tabulate, imported when rendering), its footer, the fused
kernels' table and the padding advice in words."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..advise import PaddingAdvice
from ..compiled.attention_rewrite import REWRITTEN
from ..predict.intervals import DEFAULT_LEVEL
from ..records.op_classes import TIME_CLASSES
from ..suggest import check_choice
from . import tree
from .breakdown import by_op_class, by_phase, op_table_rows
from .inputs import inputs_line
from .memory_text import memory_text
from .record import ReportRecord
from .rows import fold

__all__ = ["BY", "NOVELTY_TEXT", "advice_line", "breakdown_lines", "footer", "format_advice",
           "kernel_table", "render", "span_text", "table", "table_cells", "table_rows"]

BY: tuple[str, ...] = ("module", "op")  # what a cost table's rows are

# how the report names each novelty class of predict/intervals.py
NOVELTY_TEXT = {
    "calibrated": "from this device's own calibration",
    "chip_seen": "its chip was in the fit",
    "family_seen": "its architecture family was in the fit, its chip was not",
    "family_unseen": "neither its chip nor its family was in the fit",
    "generation_unseen": "its vendor's generation was not in the fit; widened",
    "board_unseen": "no board of its class (GeForce, workstation) was in the fit; widened",
    "spec_file": "a device from a spec file, not the catalog; widened",
}


def span_text(lo: float | None, hi: float | None) -> str:
    """An interval as ``lo-hi`` in four significant digits, ``-`` where there is none."""
    return "-" if lo is None or hi is None else f"{lo:.4g}-{hi:.4g}"


def table(report: ReportRecord, depth: int | None = None, top: int | None = None,
          intervals: bool = False, by: str = "module") -> str:
    """The cost table, costliest rows first: by module (``by="module"``), one row per GEMM
    (``depth=None``) or per module at ``depth`` levels; or by operator (``by="op"``).

    Repeated blocks collapse into one row (``GPT2Block × 12``) holding the time of all repeats.
    ``top`` keeps the costliest rows and folds the others into one, so the rows still sum to
    the total. ``intervals`` adds each row's 80% interval (where the report has them).
    """
    from tabulate import tabulate

    headers, body, fmt, _ = table_cells(report, depth, top, intervals, by)
    return tabulate(body, headers=headers, floatfmt=fmt)


def table_rows(report: ReportRecord, depth: int | None = None, top: int | None = None,
               by: str = "module") -> list[dict[str, Any]]:
    """The rows of ``table(report, depth, top, by=by)``, ranked, the folded one last."""
    check_choice("by", by, BY)
    if top is not None and top < 1:
        raise ValueError(f"top must be at least 1, got {top}; try top=10")
    if by == "op":
        if depth is not None:
            raise ValueError(f"depth={depth} cuts the module tree; by='op' has no tree: "
                             "give depth=None or by='module'")
        blank: dict[str, Any] = {"class": "", "phase": ""}
        rows = fold(report, op_table_rows(report), top, blank, "op", summed=("count",))
    else:
        blank = {"module_type": "", "count": 1, "phase": ""}
        rows = fold(report, tree.module_table_rows(report, depth), top, blank, "module")
    return [r.cells for r in rows]


def table_cells(report: ReportRecord, depth: int | None, top: int | None, intervals: bool = False,
                by: str = "module"
                ) -> tuple[list[str], list[list[Any]], tuple[str, ...], list[dict[str, Any]]]:
    """The columns of ``table(report, depth, top, by=by)``: headers, cells, each column's
    number format, and the rows the cells come from. A training step's tables name each row's
    phase."""
    rows = table_rows(report, depth, top, by)
    train = report.mode == "train"

    def kind(r: dict[str, Any], key: str) -> str:
        return r.get(key, "") + (f" × {r['count']}" if r["count"] > 1 else "")

    def phase(r: dict[str, Any]) -> list[Any]:
        return [r["phase"]] if train else []

    tail = ["GFLOP", "time ms", "% total", "bound"]
    tail_fmt = (".2f", ".4f", ".1f", "")

    def numbers(r: dict[str, Any]) -> list[Any]:
        return [r["flops"] / 1e9, r["time_ms"], r["pct_of_total"], r["bound"]]

    if by == "op":
        body = [[r["op"], r["class"], *phase(r), r["count"], *numbers(r)] for r in rows]
        headers = ["op", "class", *(["phase"] if train else []), "count", *tail]
        fmt: tuple[str, ...] = ("", "", *([""] if train else []), "", *tail_fmt)
    elif depth is None:
        body = [
            [r["module"], kind(r, "op_text"), *phase(r),
             "×".join(map(str, r["shape"])) if "shape" in r else "", r.get("dtype", ""),
             *numbers(r)]
            for r in rows
        ]
        headers = ["module", "op", *(["phase"] if train else []), "B×M×N×K", "dtype", *tail]
        fmt = ("", "", *([""] if train else []), "", "", *tail_fmt)
    else:
        body = [[r["module"], kind(r, "module_type"), *phase(r), r["gemms"], *numbers(r)]
                for r in rows]
        headers = ["module", "type", *(["phase"] if train else []), "GEMMs", *tail]
        fmt = ("", "", *([""] if train else []), "", *tail_fmt)
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


# what each fp8 kernel (hardware.dtypes.FP8_KERNELS) means, as the footer says it
FP8_KERNEL_TEXT = {
    "torch_scaled_mm": "torch._scaled_mm (cuBLASLt/hipBLASLt, inputs already in fp8)",
    "vllm_cutlass": "vLLM's CUTLASS scaled-mm after its input cast",
}


def footer(report: ReportRecord) -> str:
    """The lines under the table: the question (``inputs``), the totals, the non-GEMM time by
    op class, a training step's time by phase, the predictor, unmodelled and fused ops."""
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
    fp8 = sorted({g.site.fp8_kernel for g in report.gemms if g.site.dtype.startswith("float8")})
    if fp8:
        notes += "; fp8 GEMMs as " + ", ".join(FP8_KERNEL_TEXT[k] for k in fp8)
    span = ""
    if report.uncertainty is not None:
        lo, hi = report.interval(DEFAULT_LEVEL)
        span = (f" [{DEFAULT_LEVEL:.0%} interval {lo:.3f}-{hi:.3f} ms, "
                f"{NOVELTY_TEXT[report.uncertainty.novelty]}]")
    return "\n".join([
        inputs_line(report.question()),
        (f"{report.model} on {report.device.name} ({report.device.id}), {report.dtype}, "
         f"{report.mode}: total {report.total_ms:.3f} ms{span} {timing_text(report)}, "
         f"{report.achieved_tflops:.1f} TFLOP/s achieved"),
        *breakdown_lines(report),
        (f"predictor {report.predictor} v{report.predictor_version}; "
         f"{len(unmod)} unmodelled ops" + (f" ({shown})" if unmod else "") + notes
         + ("; device from a spec file: its datasheet only, never measured"
            if report.device.origin == "spec_file" else "")),
    ])


_TIMING_TEXT = {"event": "timed by events around the call",
                "kernel": "as the kernels' sum",
                "graph": "timed by events around a CUDA graph replay"}


def timing_text(report: ReportRecord) -> str:
    """What the total measures, and its GPU and host parts side by side."""
    parts = (f"GEMM {report.gemm_ms:.3f} ms in {len(report.gemms)} GEMMs, other "
             f"{report.other_ms:.3f} ms")
    call = report.call
    if call is None:  # a report built by hand: the kernels' sum
        return f"({parts})"
    gpu = f"GPU {report.gpu_ms:.3f} ms: {parts}"
    host = (f"host {call.host_ms:.3f} ms" if call.timing != "graph" else
            f"replay floor {call.host_ms:.3f} ms, input copies {call.copy_ms:.3f} ms")
    spread = f" [{call.lo_ms:.3f}-{call.hi_ms:.3f} ms over the hosts' range]" \
        if call.timing != "kernel" and call.hi_ms > call.lo_ms else ""
    hidden = " (not in this timing)" if call.timing == "kernel" else ""
    return (f"{_TIMING_TEXT[call.timing]}{spread} ({gpu}; {host}{hidden}, costs of "
            f"{call.host})")


def breakdown_lines(report: ReportRecord) -> list[str]:
    """The non-GEMM time by op class, costliest first, and where the report holds more than
    one phase (a training step) the time by phase; each in ms and % of the GPU time."""
    total = report.gpu_ms or 1.0

    def part(name: str, ms: float) -> str:
        return f"{name} {ms:.3f} ms ({100 * ms / total:.1f}%)"

    lines = []
    classes = sorted(by_op_class(report).items(), key=lambda kv: -kv[1])
    if classes:
        lines.append(f"non-GEMM {report.other_ms:.3f} ms by class: "
                     + ", ".join(part(TIME_CLASSES[k], ms) for k, ms in classes))
    phases = by_phase(report)
    if len(phases) > 1:
        lines.append("by phase: " + ", ".join(part(k, ms) for k, ms in phases.items()))
    return lines


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
