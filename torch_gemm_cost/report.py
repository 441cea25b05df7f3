"""CostReport: per-layer cost tables, module-tree aggregation, totals, exports and plots.

This is the only module that formats text, and it renders what it is handed: the estimates,
the model's module types and config dims, and the padding advice, all computed before (see
``api.estimate``). It predicts nothing. Every table's rows sum to the report's totals: repeated
blocks are collapsed into one row carrying the summed time of all repeats.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .advise import PaddingAdvice
from .capture import module_template
from .devices import DeviceSpec
from .dtypes import resolve_dtype
from .gemms.attention_rewrite import REWRITTEN
from .gemms.records import GemmSite
from .predict.estimates import GemmEstimate, OpEstimate, gemm_ms, other_ms, total_ms
from .predict.intervals import DEFAULT_LEVEL, ReportUncertainty, check_level
from .predict.sdpa import FLASH_PREFIX

__all__ = [
    "Comparison",
    "CostReport",
    "GemmExplanation",
    "format_advice",
    "format_comparison",
    "format_device_table",
    "intervals_overlap",
]


@dataclass(frozen=True)
class GemmExplanation:
    """Why one GEMM costs what it does: its record, predicted time and the predictor's stages."""

    site: GemmSite
    time_ms: float
    bound: str
    device: str
    predictor: str
    details: Mapping[str, float]

    def __str__(self) -> str:
        s = self.site
        ai = s.flops / s.dram_bytes if s.dram_bytes else float("nan")
        loads = f"{s.a_align_bytes}/{s.b_align_bytes}/{s.c_align_bytes} B"
        lines = [
            (f"{s.module or '(top)'} [{s.module_type}] {s.op} {s.phase}: "
             f"B×M×N×K = {s.batch}×{s.m}×{s.n}×{s.k} {s.dtype} on {self.device}"),
            (f"  {s.flops / 1e9:.3f} GFLOP, {s.dram_bytes / 1e6:.3f} MB compulsory, "
             f"{ai:.1f} FLOP/byte; loads of {loads} for A/B/C"),
            f"  predicted {self.time_ms:.4f} ms, {self.bound}-bound ({self.predictor})",
        ]
        lines += [f"  {name} = {value:.4g}" for name, value in self.details.items()]
        return "\n".join(lines)


_INDEX = re.compile(r"^\d+$")

# how the report names each novelty class of predict/intervals.py
NOVELTY_TEXT = {
    "calibrated": "from this device's own calibration",
    "chip_seen": "its chip was in the fit",
    "family_seen": "its architecture family was in the fit, its chip was not",
    "family_unseen": "neither its chip nor its family was in the fit",
}


def _span(lo: float | None, hi: float | None) -> str:
    return "-" if lo is None or hi is None else f"{lo:.4g}-{hi:.4g}"


def _levels(module: str) -> list[str]:
    """Split a module path into tree levels; a container index joins its parent ("h.0")."""
    levels: list[str] = []
    for part in module.split(".") if module else []:
        if _INDEX.match(part) and levels:
            levels[-1] = f"{levels[-1]}.{part}"
        else:
            levels.append(part)
    return levels


def _collapsed_name(template: str, indices: Sequence[tuple[int, ...]]) -> str:
    """Name a group of repeated paths: ``h.{0-11}`` for one contiguous index, else ``h.*``."""
    if len(indices) == 1:
        it = iter(indices[0])
        return ".".join(str(next(it)) if p == "*" else p for p in template.split("."))
    if indices and len(indices[0]) == 1:
        vals = sorted(i[0] for i in indices)
        if vals == list(range(vals[0], vals[0] + len(vals))):
            return template.replace("*", f"{{{vals[0]}-{vals[-1]}}}", 1)
    return template


@dataclass
class _Row:
    """A mutable accumulator used only while building a table."""

    key: Any
    first: int
    paths: list[str] = field(default_factory=list)
    gemms: int = 0
    flops: int = 0
    gemm_ms: float = 0.0
    other_ms: float = 0.0
    compute_ms: float = 0.0
    unmodelled: int = 0
    sig: list[Any] = field(default_factory=list)
    gemm_index: list[int] = field(default_factory=list)  # positions in the report's gemms
    other_index: list[int] = field(default_factory=list)  # … and in its others

    @property
    def time_ms(self) -> float:
        return self.gemm_ms + self.other_ms


@dataclass(frozen=True)
class CostReport:
    """Every GEMM (and non-GEMM op) of one model run on one device, with predicted times.

    ``predictor`` and ``predictor_version`` name the predictor that priced the GEMMs.
    ``config`` holds the model's recognizable config dims and ``module_types`` the class name
    of every module path (names blocks in ``table(depth=N)``), both from the capture.
    ``advice`` is the padding advice (``advise.padding_advice``); None where none was made.
    ``compiled``: the non-GEMM ops were fused as ``torch.compile`` runs them; each op's
    ``OpEstimate.kernel`` names its kernel (``kernels()``, ``kernel_table()``).
    ``uncertainty`` holds what the intervals need (``predict/intervals.py``); None where no
    calibration covers the predictor, and then no interval is shown.
    """

    model: str  # class name of the estimated model
    device: DeviceSpec
    dtype: str
    mode: str  # "inference" or "train"
    predictor: str
    predictor_version: str
    gemms: tuple[GemmEstimate, ...]
    others: tuple[OpEstimate, ...] = ()
    config: Mapping[str, int] = field(default_factory=dict, compare=False)
    module_types: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    advice: tuple[PaddingAdvice, ...] | None = field(default=None, compare=False, repr=False)
    compiled: bool = field(default=False, compare=False)
    uncertainty: ReportUncertainty | None = field(default=None, compare=False, repr=False)

    # ------------------------------------------------------------------ totals

    @property
    def gemm_ms(self) -> float:
        return gemm_ms(self.gemms)

    @property
    def other_ms(self) -> float:
        return other_ms(self.others)

    @property
    def total_ms(self) -> float:
        return total_ms(self.gemms, self.others)

    @property
    def total_flops(self) -> int:
        return sum(g.site.flops for g in self.gemms)

    @property
    def achieved_tflops(self) -> float:
        """GEMM FLOPs over the whole predicted time, in TFLOP/s."""
        return self.total_flops / (self.total_ms * 1e-3) / 1e12 if self.total_ms else 0.0

    @property
    def unmodelled(self) -> tuple[OpEstimate, ...]:
        return tuple(o for o in self.others if o.time_ms is None)

    # ------------------------------------------------------------------ intervals

    @property
    def total_interval_ms(self) -> tuple[float, float] | None:
        """(lo, hi) of the whole model's time at 80%; None without a calibration."""
        return None if self.uncertainty is None else self.interval(DEFAULT_LEVEL)

    def interval(self, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
        """(lo, hi) of the whole model's time: the measured time falls inside with probability
        ``level`` (calibrated on GPUs held out of the fit; see ``predict/intervals.py``)."""
        level = check_level(level, "level")
        unc = self._uncertainty()
        times = torch.tensor([g.time_ms for g in self.gemms], dtype=torch.float64)
        att_ms, decode = self._attention(range(len(self.others)))
        return unc.total_bounds(times, self.other_ms - float(att_ms.sum()), level,
                                attention_ms=att_ms, attention_decode=decode)

    def _attention(self, index: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Times (M,) and phases (M,: 1 for a one-token query) of the fused-attention kernels
        among the others at ``index``."""
        att = [(o.time_ms, float(o.op.attention.q_len == 1))
               for o in (self.others[i] for i in index)
               if o.kernel.startswith(FLASH_PREFIX) and o.time_ms is not None
               and o.op.attention is not None]
        t = torch.tensor(att, dtype=torch.float64).reshape(-1, 2)
        return t[:, 0], t[:, 1]

    def _uncertainty(self) -> ReportUncertainty:
        if self.uncertainty is None:
            raise ValueError(
                f"this report holds no intervals: predictor {self.predictor} "
                f"v{self.predictor_version} has no interval calibration (the shipped hybrid "
                "predictor and calibration profiles have one)")
        return self.uncertainty

    def _rows_interval(self, index: Sequence[int], other: float,
                       other_index: Sequence[int] = (),
                       level: float = DEFAULT_LEVEL) -> tuple[float, float] | None:
        """(lo, hi) of the GEMMs at ``index`` and ``other`` ms of the ops at ``other_index``
        (their fused-attention kernels with their own calibration); None without intervals."""
        if self.uncertainty is None:
            return None
        idx = torch.tensor(list(index), dtype=torch.long)
        times = torch.tensor([self.gemms[i].time_ms for i in index], dtype=torch.float64)
        att_ms, decode = self._attention(other_index)
        return self.uncertainty.total_bounds(times, other - float(att_ms.sum()), level, idx,
                                             attention_ms=att_ms, attention_decode=decode)

    # ------------------------------------------------------------------ rows and exports

    def rows(self) -> list[dict[str, Any]]:
        """One dict per GEMM, in execution order."""
        total = self.total_ms or 1.0
        return [
            {
                "module": g.site.module,
                "module_type": g.site.module_type,
                "op": g.site.op,
                "phase": g.site.phase,
                "batch": g.site.batch,
                "m": g.site.m,
                "n": g.site.n,
                "k": g.site.k,
                "dtype": g.site.dtype,
                "flops": g.site.flops,
                "dram_bytes": g.site.dram_bytes,
                "a_align_bytes": g.site.a_align_bytes,
                "b_align_bytes": g.site.b_align_bytes,
                "time_ms": g.time_ms,
                "pct_of_total": 100.0 * g.time_ms / total,
                "bound": g.bound,
                "lo_ms": g.lo_ms,
                "hi_ms": g.hi_ms,
            }
            for g in self.gemms
        ]

    def op_rows(self) -> list[dict[str, Any]]:
        """One dict per non-GEMM op, in execution order, with the kernel that runs it ("" for
        its own)."""
        return [
            {
                "module": o.op.module,
                "module_type": o.op.module_type,
                "op": o.op.op,
                "phase": o.op.phase,
                "op_class": o.op.op_class,
                "dram_bytes": o.op.dram_bytes,
                "time_ms": o.time_ms,
                "kernel": o.kernel,
            }
            for o in self.others
        ]

    def kernels(self) -> list[dict[str, Any]]:
        """The kernels that run several ops (``torch.compile``'s fused kernels, flash attention),
        in order of their first op: name, phase, module of the first op, the ops fused into it
        (``module:op``) and its time (its ops' times summed)."""
        out: dict[str, dict[str, Any]] = {}
        for o in self.others:
            if not o.kernel:
                continue
            k = out.setdefault(o.kernel, {"kernel": o.kernel, "phase": o.op.phase,
                                          "module": o.op.module, "ops": [], "time_ms": 0.0})
            k["ops"].append(f"{o.op.module or '(top)'}:{o.op.op.split('.')[-1]}")
            k["time_ms"] += o.time_ms or 0.0
        return list(out.values())

    def kernel_table(self, top: int | None = None) -> str:
        """The fused kernels as a table: each kernel, its time and the ops fused into it;
        ``top`` keeps the costliest."""
        from tabulate import tabulate

        rows = self.kernels()
        if top:
            rows = sorted(rows, key=lambda r: -r["time_ms"])[:top]
        body = [[r["kernel"], r["phase"], r["module"] or "(top)", len(r["ops"]), r["time_ms"],
                 ", ".join(dict.fromkeys(op.rsplit(":", 1)[1] for op in r["ops"]))]
                for r in rows]
        return tabulate(body, headers=["kernel", "phase", "first module", "ops", "time ms",
                                       "ops fused"], floatfmt=("", "", "", "", ".4f", ""))

    def to_dict(self, advice: bool = True) -> dict[str, Any]:
        """Everything as plain data; ``rows`` holds one dict per GEMM and sums to ``gemm_ms``."""
        out: dict[str, Any] = {
            "model": self.model,
            "device": self.device.id,
            "device_origin": self.device.origin,
            "dtype": self.dtype,
            "mode": self.mode,
            "predictor": self.predictor,
            "predictor_version": self.predictor_version,
            "total_ms": self.total_ms,
            "gemm_ms": self.gemm_ms,
            "other_ms": self.other_ms,
            "total_flops": self.total_flops,
            "achieved_tflops": self.achieved_tflops,
            "unmodelled_ops": len(self.unmodelled),
            "config": dict(self.config),
            "rows": self.rows(),
        }
        if self.compiled:
            out["compiled"] = True
        if any(o.kernel for o in self.others):
            out["kernels"] = self.kernels()
        if self.uncertainty is not None:
            lo, hi = self.interval(DEFAULT_LEVEL)
            out.update(interval_level=DEFAULT_LEVEL, total_lo_ms=lo, total_hi_ms=hi,
                       novelty=self.uncertainty.novelty)
        if advice and self.advice is not None:
            out["padding_advice"] = [
                {**asdict(a), "saving_ms": a.saving_ms, "saving_pct": a.saving_pct}
                for a in self.advice
            ]
        return out

    def to_json(self, path: str | Path | None = None, indent: int = 2) -> str:
        """The report as JSON (see ``to_dict``); also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    def to_csv(self, path: str | Path | None = None) -> str:
        """One CSV line per GEMM (the columns of ``rows()``); also written to ``path`` when given."""
        rows = self.rows()
        buf = io.StringIO()
        fields = list(rows[0]) if rows else ["module", "op", "time_ms"]
        writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        if path is not None:
            Path(path).write_text(buf.getvalue())
        return buf.getvalue()

    def to_dataframe(self) -> Any:
        """``rows()`` as a pandas DataFrame (pandas is optional and imported only here)."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("CostReport.to_dataframe() needs pandas: pip install pandas") from e
        return pd.DataFrame(self.rows())

    # ------------------------------------------------------------------ aggregation

    def _type_of(self, path: str) -> str:
        if path in self.module_types:
            return self.module_types[path]
        for rec in [g.site for g in self.gemms] + [o.op for o in self.others]:
            if rec.module == path:
                return rec.module_type
        return path.rsplit(".", 1)[-1] if path else self.model

    def module_rows(self, depth: int | None = None) -> list[dict[str, Any]]:
        """Times aggregated by the module tree, cut at ``depth`` levels, repeats collapsed.

        ``depth=None`` gives one row per GEMM. Non-GEMM ops count towards their module at a
        finite depth, and towards one ``(non-GEMM ops)`` row otherwise. Rows holding only free ops
        (views) are left out. A collapsed row's ``time_ms`` sums every repeat, so the rows sum to
        ``total_ms``.
        """
        if depth is not None and depth < 1:
            raise ValueError(f"depth must be a positive number of module levels, got {depth}; try 1")
        # collapse rows whose paths differ only in container indices and whose contents match
        merged: dict[Any, list[_Row]] = {}
        for row in self._group(depth).values():
            path, extra = row.key
            tmpl, _ = module_template(path)
            merged.setdefault((tmpl, extra, tuple(sorted(map(repr, row.sig)))), []).append(row)
        # at a finite depth, rows follow module definition order (close to execution order), so
        # rows of non-GEMM ops fall in place; ops of the top-level module come last
        rank = {p: i for i, p in enumerate(self.module_types) if p} if depth is not None else {}
        total = self.total_ms or 1.0
        out = []
        for (tmpl, extra, _), rows in merged.items():
            if not any(r.gemms or r.unmodelled or r.time_ms for r in rows):
                continue  # only free ops (views, metadata): nothing to show
            rec = self._record(tmpl, rows, total)
            rec["first"] = (rank.get(rows[0].paths[0], len(rank)), min(r.first for r in rows))
            if depth is None and extra != "other":
                op, phase, shape, dtype, _ = extra
                rec.update(op=op, phase=phase, shape=shape, dtype=dtype)
            out.append(rec)
        out.sort(key=lambda r: r["first"])
        for r in out:
            del r["first"]
        return out

    def _group(self, depth: int | None) -> dict[Any, _Row]:
        """Every GEMM and op added to its row: its module cut at ``depth`` levels, or with
        ``depth=None`` one row per GEMM and one for all other ops. Rows keep first-seen order."""
        groups: dict[Any, _Row] = {}

        def add(path: str, key_extra: Any, i: int) -> _Row:
            row = groups.get((path, key_extra))
            if row is None:
                row = groups[(path, key_extra)] = _Row(key=(path, key_extra), first=i)
                row.paths.append(path)
            return row

        ordinal: dict[tuple[str, str, str], int] = {}
        for i, g in enumerate(self.gemms):
            s = g.site
            if depth is None:
                okey = (s.module, s.op, s.phase)
                nth = ordinal[okey] = ordinal.get(okey, -1) + 1
                row = add(s.module, (s.op, s.phase, s.shape, s.dtype, nth), i)
            else:
                row = add(".".join(_levels(s.module)[:depth]), None, i)
            row.gemms += 1
            row.gemm_index.append(i)
            row.flops += s.flops
            row.gemm_ms += g.time_ms
            row.compute_ms += g.time_ms if g.bound == "compute" else 0.0
            row.sig.append((s.module[len(row.paths[0]):], s.op, s.phase, s.shape, s.dtype))
        for i, o in enumerate(self.others, start=len(self.gemms)):
            a = o.op.attention
            if depth is None and a is not None and o.kernel:  # a GPU's fused attention kernel
                shape = (a.batch * a.heads, a.q_len, a.kv_len, a.head_dim)
                okey = (o.op.module, "attention", o.op.phase)
                nth = ordinal[okey] = ordinal.get(okey, -1) + 1
                row = add(o.op.module, ("attention", o.op.phase, shape, o.op.dtype, nth), i)
            elif depth is None:
                row = add("(non-GEMM ops)", "other", i)
            else:
                row = add(".".join(_levels(o.op.module)[:depth]), None, i)
                row.sig.append((o.op.module[len(row.paths[0]):], o.op.op, o.op.numel))
            row.other_ms += o.time_ms or 0.0
            row.other_index.append(i - len(self.gemms))
            row.unmodelled += o.time_ms is None
        return groups

    def _record(self, template: str, rows: Sequence[_Row], total_ms: float) -> dict[str, Any]:
        """The table row of one module (or GEMM) and its repeats, of a run of ``total_ms``."""
        paths = [r.paths[0] for r in rows]
        name = (_collapsed_name(template, [module_template(p)[1] for p in paths])
                if len(rows) > 1 else paths[0])
        gemm_ms = sum(r.gemm_ms for r in rows)
        other_ms = sum(r.other_ms for r in rows)
        compute_ms = sum(r.compute_ms for r in rows)
        span = self._rows_interval([i for r in rows for i in r.gemm_index], other_ms,
                                   [i for r in rows for i in r.other_index])
        return {
            "module": name or "(top)",
            "module_type": self._type_of(paths[0]) if paths[0] != "(non-GEMM ops)" else "",
            "count": len(rows),
            "gemms": sum(r.gemms for r in rows),
            "flops": sum(r.flops for r in rows),
            "gemm_ms": gemm_ms,
            "other_ms": other_ms,
            "time_ms": gemm_ms + other_ms,
            "pct_of_total": 100.0 * (gemm_ms + other_ms) / total_ms,
            "bound": "-" if not rows[0].gemms else (
                "compute" if compute_ms >= gemm_ms - compute_ms else "memory"
            ),
            "lo_ms": None if span is None else span[0],
            "hi_ms": None if span is None else span[1],
        }

    def top(self, k: int = 10, depth: int | None = None) -> list[dict[str, Any]]:
        """The ``k`` costliest rows of ``module_rows(depth)``."""
        return sorted(self.module_rows(depth), key=lambda r: -r["time_ms"])[:k]

    def table(self, depth: int | None = None, top: int | None = None,
              intervals: bool = False) -> str:
        """The cost table: one row per GEMM (``depth=None``) or per module at ``depth`` levels.

        Repeated blocks collapse into one row (``GPT2Block × 12``) holding the time of all repeats.
        ``top`` keeps the costliest rows only, sorted by time. ``intervals`` adds each row's 80%
        interval (where the report has them).
        """
        from tabulate import tabulate

        headers, body, fmt, _ = self._table_cells(depth, top, intervals)
        return tabulate(body, headers=headers, floatfmt=fmt)

    def _table_cells(self, depth: int | None, top: int | None, intervals: bool = False
                     ) -> tuple[list[str], list[list[Any]], tuple[str, ...], list[dict[str, Any]]]:
        """The columns of ``table(depth, top)``: headers, cells, each column's number format,
        and the rows the cells come from."""
        rows = self.top(top, depth) if top else self.module_rows(depth)

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
        if intervals and self.uncertainty is not None:
            for line, r in zip(body, rows):
                line.append(_span(r["lo_ms"], r["hi_ms"]))
            headers.append(f"{DEFAULT_LEVEL:.0%} interval ms")
            fmt = (*fmt, "")
        return headers, body, fmt, rows

    def footer(self) -> str:
        unmod = self.unmodelled
        names = sorted({o.op.op for o in unmod})
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        kernels = self.kernels()
        fused = [k for k in kernels if not k["kernel"].startswith(("flash_attention_", "("))]
        flash = len(kernels) - len(fused) - sum(k["kernel"].startswith("(") for k in kernels)
        notes = ""
        if self.compiled:
            notes += (f"; torch.compile (inductor): {len(fused)} fused kernels run "
                      f"{sum(len(k['ops']) for k in fused)} ops")
        rewritten = sum(o.op.attention is not None and o.op.phase == "forward"
                        and o.op.node.startswith(REWRITTEN) for o in self.others)
        if flash:
            notes += f"; {flash} SDPA calls as flash attention kernels"
        if rewritten:
            notes += (f", {rewritten} of them hand-written attention that inductor rewrites"
                      if flash else f"; {rewritten} hand-written attentions that inductor "
                      "rewrites into SDPA calls")
        span = ""
        if self.uncertainty is not None:
            lo, hi = self.interval(DEFAULT_LEVEL)
            span = (f" [{DEFAULT_LEVEL:.0%} interval {lo:.3f}-{hi:.3f} ms, "
                    f"{NOVELTY_TEXT[self.uncertainty.novelty]}]")
        return (
            f"{self.model} on {self.device.name} ({self.device.id}), {self.dtype}, {self.mode}: "
            f"total {self.total_ms:.3f} ms{span} (GEMM {self.gemm_ms:.3f} ms in "
            f"{len(self.gemms)} GEMMs, "
            f"other {self.other_ms:.3f} ms), {self.achieved_tflops:.1f} TFLOP/s achieved\n"
            f"predictor {self.predictor} v{self.predictor_version}; "
            f"{len(unmod)} unmodelled ops" + (f" ({shown})" if unmod else "") + notes
            + ("; device from a spec file: its datasheet only, never measured"
               if self.device.origin == "spec_file" else "")
        )

    def __str__(self) -> str:
        text = f"{self.table()}\n{self.footer()}"
        if self.gemms and self.advice is not None:
            text += "\n" + format_advice(self.advice[:3])
        return text

    # ------------------------------------------------------------------ advice and explanation

    def padding_advice(self) -> list[PaddingAdvice]:
        """Padding suggestions ranked by predicted whole-model saving (see ``advise``)."""
        if self.advice is None:
            raise ValueError(
                f"this report of {self.model} holds no padding advice: it is made by estimate() "
                "and compare(), or by advise.padding_advice(report.gemms, predictor, ...)")
        return list(self.advice)

    def explain(self, row: int | str) -> GemmExplanation:
        """Explain one GEMM: ``row`` is its index in ``rows()`` or its module path (first match).
        The predictor's intermediates are those it gave when it priced the run."""
        if isinstance(row, str):
            hits = [i for i, g in enumerate(self.gemms) if g.site.module == row]
            if not hits:
                mods = list(dict.fromkeys(g.site.module for g in self.gemms))
                close = difflib.get_close_matches(row, mods, n=3)
                raise ValueError(f"no GEMM in module {row!r}; close matches: {close or mods[:3]}")
            row = hits[0]
        if not 0 <= row < len(self.gemms):
            raise ValueError(f"row {row} out of range; the report has rows 0..{len(self.gemms) - 1}")
        g = self.gemms[row]
        return GemmExplanation(g.site, g.time_ms, g.bound, self.device.id, self.predictor,
                               dict(g.details))

    # ------------------------------------------------------------------ plot

    def plot_roofline(self, path: str | Path) -> Path:
        """Draw every GEMM on the device's roofline (point area ∝ time), ridge marked; save to path.

        Needs matplotlib (``pip install torch-gemm-cost[plot]``).
        """
        plt = _pyplot("plot_roofline")
        fig = self._roofline_figure(plt)
        out = Path(path)
        fig.savefig(out, dpi=120)
        plt.close(fig)
        return out

    def _roofline_figure(self, plt: Any) -> Any:
        """The roofline plot as a matplotlib figure (``plt`` is ``matplotlib.pyplot``)."""
        peak = self.device.peak_flops_per_s(resolve_dtype(self.dtype))
        bw = self.device.dram_bw_bytes_per_s
        ridge = peak / bw
        pts = [
            (g.site.flops / g.site.dram_bytes, g.site.flops / (g.time_ms * 1e-3), g.time_ms)
            for g in self.gemms
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
        ax.set_title(f"{self.model} on {self.device.id}, {self.dtype} ({self.predictor})")
        ax.legend(loc="lower right")
        fig.tight_layout()
        return fig

    # ------------------------------------------------------------------ HTML

    def to_html(self, path: str | Path | None = None, depth: int | None = None,
                top: int | None = None) -> str:
        """The report as one self-contained HTML page: totals, the roofline plot (inline SVG,
        where matplotlib is installed), the padding advice and the layer table of
        ``table(depth, top, intervals=True)`` with a bar per row for its time. No script and no network: any
        browser opens the file. Also written to ``path`` when given."""
        from .report_html import HtmlRow, render_html

        headers, body, fmt, rows = self._table_cells(depth, top, intervals=True)
        longest = max((r["time_ms"] for r in rows), default=0.0) or 1.0
        table = [HtmlRow(tuple(format(c, f) if f else str(c) for c, f in zip(cells, fmt)),
                         bound=r["bound"], bar_pct=100.0 * r["time_ms"] / longest)
                 for cells, r in zip(body, rows)]
        unmod = sorted({o.op.op for o in self.unmodelled})
        totals = [
            ("total", f"{self.total_ms:.3f} ms"),
            *([] if self.uncertainty is None else [(
                f"{DEFAULT_LEVEL:.0%} interval",
                "{:.3f}-{:.3f} ms, ".format(*self.interval(DEFAULT_LEVEL))
                + NOVELTY_TEXT[self.uncertainty.novelty])]),
            ("GEMMs", (f"{self.gemm_ms:.3f} ms in {len(self.gemms)} GEMMs, "
                       f"{self.total_flops / 1e9:.2f} GFLOP")),
            ("other ops", f"{self.other_ms:.3f} ms in {len(self.others)} ops"),
            ("achieved", f"{self.achieved_tflops:.1f} TFLOP/s"),
            ("unmodelled ops", f"{len(unmod)}" + (f" ({', '.join(unmod)})" if unmod else "")),
            ("predictor", f"{self.predictor} v{self.predictor_version}"),
        ]
        try:
            plt = _pyplot("to_html")
        except ImportError as e:
            svg, no_plot = None, str(e)
        else:
            fig = self._roofline_figure(plt)
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None})
            plt.close(fig)
            svg, no_plot = buf.getvalue(), ""
        text = render_html(
            title=f"{self.model} on {self.device.name} ({self.device.id})",
            subtitle=f"{self.dtype}, {self.mode}; predicted, not measured",
            totals=totals, headers=headers,
            numeric=[any(isinstance(cells[i], (int, float)) for cells in body)
                     for i in range(len(headers))],
            rows=table, svg=svg, no_plot=no_plot,
            advice=[_advice_line(a) for a in self.advice or ()],
        )
        if path is not None:
            Path(path).write_text(text)
        return text


def _pyplot(caller: str) -> Any:
    """matplotlib.pyplot on the Agg backend, or an ImportError naming the extra to install."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(f"{caller} needs matplotlib: pip install 'torch-gemm-cost[plot]'") from e
    return plt


def _advice_line(a: PaddingAdvice) -> str:
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
    lines += [f"  {i}. {_advice_line(a)}" for i, a in enumerate(items, 1)]
    return "\n".join(lines)


class Comparison(list):  # type: ignore[type-arg]
    """Reports of one model on several devices or dtypes; prints them side by side."""

    def table(self, top: int = 5, depth: int | None = None) -> str:
        return format_comparison(self, top=top, depth=depth)

    def overlaps(self, i: int, j: int, level: float = DEFAULT_LEVEL) -> bool | None:
        """Whether reports ``i`` and ``j`` have overlapping intervals at ``level``, so neither
        is certainly the faster; None where either has no interval."""
        return intervals_overlap(self[i], self[j], level)

    def __str__(self) -> str:
        return self.table()


def format_comparison(reports: Sequence[CostReport], top: int = 5, depth: int | None = None) -> str:
    """Totals and the costliest layers of several reports (devices, dtypes) side by side.

    Speedups are relative to the first report. Layers are ranked by their time in the first report.
    """
    from tabulate import tabulate

    if not reports:
        raise ValueError("format_comparison needs at least one report")
    base = reports[0].total_ms or 1.0
    body = [
        [r.device.id, r.dtype, r.total_ms, r.gemm_ms, r.other_ms, r.achieved_tflops,
         base / r.total_ms if r.total_ms else float("nan"), len(r.unmodelled)]
        for r in reports
    ]
    headers = ["device", "dtype", "total ms", "GEMM ms", "other ms", "TFLOP/s", "speedup",
               "unmodelled"]
    fmt: tuple[str, ...] = ("", "", ".3f", ".3f", ".3f", ".1f", ".2f", "")
    if any(r.uncertainty is not None for r in reports):
        # an overlap means the speedup may go either way: the intervals do not exclude it
        for line, r in zip(body, reports):
            span = r.total_interval_ms
            line.append(_span(*span) if span else "-")
            overlap = intervals_overlap(reports[0], r)
            line.append("-" if r is reports[0] or overlap is None else
                        "intervals overlap" if overlap else "apart")
        headers += [f"{DEFAULT_LEVEL:.0%} interval ms", "vs first"]
        fmt = (*fmt, "", "")
    totals = tabulate(body, headers=headers, floatfmt=fmt)
    per = [{_row_key(row): row for row in r.module_rows(depth)} for r in reports]
    ranked = sorted(per[0].values(), key=lambda row: -row["time_ms"])[:top]
    layer_body = []
    for row in ranked:
        key = _row_key(row)
        label = row["module"] + (f" [{row['op']}]" if "op" in row else "")
        layer_body.append([label] + [p[key]["time_ms"] if key in p else None for p in per])
    layers = tabulate(
        layer_body,
        headers=["top layers (ms)"] + [f"{r.device.id} {_SHORT.get(r.dtype, r.dtype)}"
                                       for r in reports],
        floatfmt=".4f",
        missingval="-",
    )
    return f"{totals}\n\n{layers}"


def intervals_overlap(a: CostReport, b: CostReport, level: float = DEFAULT_LEVEL) -> bool | None:
    """Whether two reports' whole-model intervals at ``level`` overlap; None where either has
    none."""
    if a.uncertainty is None or b.uncertainty is None:
        return None
    lo_a, hi_a = a.interval(level)
    lo_b, hi_b = b.interval(level)
    return lo_a <= hi_b and lo_b <= hi_a


_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8"}


def _row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (row["module"], row.get("op"), row.get("phase"), row.get("shape"))


def format_device_table(devices: Sequence[DeviceSpec]) -> str:
    """The catalog as a table: SMs, DRAM bandwidth, L2 and dense peaks in TFLOP/s."""
    from tabulate import tabulate

    keys = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")

    def tf(value: float | None) -> str:
        return "-" if value is None else f"{value / 1e12:g}"

    body = [
        [d.id, d.name, d.sm_count, "-" if d.mem_bytes is None else f"{d.mem_bytes / 1e9:g}",
         d.dram_bw_bytes_per_s / 1e9, d.l2_bytes / 2**20]
        + [tf(d.peak(k)) for k in keys]
        + [f"{d.ridge_flops_per_byte:.0f}"]
        for d in devices
    ]
    headers = (["id", "name", "SMs", "mem GB", "DRAM GB/s", "L2 MiB"] + [f"{k} TF" for k in keys]
               + ["ridge FLOP/B"])
    return tabulate(body, headers=headers, floatfmt="g")
