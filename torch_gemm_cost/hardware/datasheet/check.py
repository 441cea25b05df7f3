"""Checking a spec record field by field: types, plausible ranges (naming the unit a value was
likely written in), identity, and clocks against peaks; one SpecError lists every problem, each
with the value the most similar catalog GPU has."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...suggest import unknown
from ..catalog import BOARD_CLASSES, DeviceSpec, board_class_from_name
from .arch import FP16_FLOPS_PER_CLK_BY_CC
from .fields import (
    FIELDS,
    NODE_FABRICS,
    PEAK_FIELDS,
    SPEC_FIELDS,
    VENDORS,
    SpecError,
    SpecField,
    _fmt,
)
from .record import datasheet_record
from .similar import most_similar

# A half-precision peak over these multiples of the fp16 (or bf16) one is not dense: bf16 runs
# at the fp16 rate or below (CDNA1: half), tf32 at half of it, fp8 at twice, int8 at most four
# times (GA102 GeForce, whose fp16 figure is the fp32-accumulate rate). 5% for rounding.
_RATIO_TO_HALF: dict[str, float] = {"bf16": 1.0, "tf32": 0.5, "fp8": 2.0, "int8": 4.0}


def _type_error(f: SpecField, value: Any) -> str | None:
    """Why ``value`` is not of the field's kind, or None."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if f.kind == "str":
        ok = isinstance(value, str) and value.strip() != ""
        want = "a non-empty string"
    elif f.kind == "int":
        ok = number and math.isfinite(value) and float(value).is_integer()
        want = "a whole number"
    elif f.kind == "float":
        ok = number and math.isfinite(value)
        want = "a number"
    elif f.kind == "bool":
        ok = isinstance(value, bool)
        want = "true or false"
    else:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        want = "a list of strings"
    if ok:
        return None
    return f"is {json.dumps(value)} ({type(value).__name__}); expected {want}"


def _range_error(f: SpecField, value: float) -> str | None:
    """Why ``value`` is implausible for the field, with the unit it was likely written in."""
    if f.lo is None or f.hi is None:
        return None
    if value < 0 or (value == 0 and f.lo > 0):
        return f"= {_fmt(value)}: must be {'positive' if f.lo > 0 else 'zero or more'}"
    if f.lo <= value <= f.hi:
        return None
    unit = f.unit.split(",")[0]
    why = f"= {_fmt(value)}: outside the plausible {_fmt(f.lo)}-{_fmt(f.hi)} {unit}"
    for factor, misread_unit in f.misread:
        if f.lo <= value * factor <= f.hi:
            fixed = value * factor
            if f.kind == "int":
                fixed = round(fixed)
            return f"{why}; it looks like {misread_unit}: {_fmt(fixed)} {unit}"
    return why


@dataclass(frozen=True)
class _Problems:
    """Errors found in one record, and the catalog GPU the hints quote."""

    where: str
    similar: DeviceSpec | None
    errors: list[str]

    def add(self, field: str, message: str, hint: bool = True) -> None:
        f = FIELDS.get(field)
        unit = f" ({f.unit})" if f is not None and f.unit else ""
        text = f"{field}{unit} {message}"
        if (hint and self.similar is not None and f is not None and f.role != "ignored"
                and field not in ("id", "name", "aliases")):
            known = datasheet_record(self.similar)
            if field in known:
                have = known[field]
                shown = ("none" if have is None else _fmt(have) if isinstance(have, float)
                         else json.dumps(have))
                text += f"; {self.similar.id} has {shown}"
        self.errors.append(text)

    def raise_if_any(self) -> None:
        if not self.errors:
            return
        about = ""
        if self.similar is not None:
            s = self.similar
            about = (f" (hints quote the most similar catalog GPU, {s.id}: {s.name}, "
                     f"{s.architecture}, {s.compute_capability})")
        lines = "\n".join(f"  - {e}" for e in self.errors)
        n = len(self.errors)
        raise SpecError(f"{self.where}: {n} problem{'s' if n > 1 else ''}{about}:\n{lines}")


def _check(rec: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The fields of ``rec`` that are given (whole numbers as ``int``, other numbers as they
    are), or a SpecError listing every missing, mistyped or impossible value."""
    if not isinstance(rec, Mapping):
        raise SpecError(f"{where}: a spec record is a JSON object of gpus.json fields, got "
                        f"{type(rec).__name__}")
    problems = _Problems(where, most_similar(rec), [])
    for key in rec:
        if key not in FIELDS and not str(key).startswith("_"):
            problems.errors.append(f"{unknown('spec record field', key, FIELDS)} Keys "
                                   "starting with '_' are comments.")
    good: dict[str, Any] = {}
    for f in SPEC_FIELDS:
        value = rec.get(f.name)
        if value is None:
            if f.role == "required":
                problems.add(f.name, f"is missing: {f.help}")
            continue
        bad = _type_error(f, value)
        if bad is None and f.kind in ("int", "float"):
            bad = _range_error(f, float(value))
        if bad is not None:
            problems.add(f.name, bad)
        else:
            good[f.name] = int(value) if f.kind == "int" else value
    _check_identity(good, problems)
    _check_clocks_and_peaks(good, problems)
    problems.raise_if_any()
    return good


def _check_identity(good: Mapping[str, Any], problems: _Problems) -> None:
    vendor = good.get("vendor")
    if vendor is not None and vendor not in VENDORS:
        fixed = next((v for v in VENDORS if v.lower() == str(vendor).lower()), None)
        problems.add("vendor", f"= {vendor!r}: the predictor models "
                     f"{' and '.join(map(repr, VENDORS))} GPUs"
                     + (f"; write {fixed!r}" if fixed else ""))
    cc = good.get("compute_capability")
    if cc is not None and vendor in VENDORS:
        pattern, example = ((r"\d+\.\d+", "'9.0'") if vendor == "NVIDIA"
                            else (r"gfx[0-9a-f]+", "'gfx942'"))
        if not re.fullmatch(pattern, cc):
            problems.add("compute_capability", f"= {cc!r}: {vendor} writes it as {example}")
    board = good.get("board_class")
    if board is not None and board not in BOARD_CLASSES:
        problems.add("board_class", f"= {board!r}: one of {', '.join(BOARD_CLASSES)}")
    fabric = good.get("node_fabric")
    if fabric is not None and fabric not in NODE_FABRICS:
        problems.add("node_fabric", f"= {fabric!r}: one of {', '.join(NODE_FABRICS)}")
    if good.get("tensor_figures_are_dense") is False:
        problems.add("tensor_figures_are_dense", "is false: every peak_tflops_* must be dense; "
                     "halve with-sparsity figures, or give them as peak_tflops_*_sparse",
                     hint=False)


def _check_clocks_and_peaks(good: Mapping[str, Any], problems: _Problems) -> None:
    boost, base = good.get("boost_clock_mhz"), good.get("base_clock_mhz")
    if boost is not None and base is not None and base > boost:
        problems.add("base_clock_mhz", f"= {_fmt(base)} is above boost_clock_mhz = "
                     f"{_fmt(boost)}: the base clock is the lower one")
    gemm = good.get("gemm_clock_mhz")
    if boost is not None and gemm is not None and gemm > boost:
        problems.add("gemm_clock_mhz", f"= {_fmt(gemm)} is above boost_clock_mhz = "
                     f"{_fmt(boost)}: a GEMM at the power limit runs at most the boost clock")
    implied = good.get("tensor_peak_implied_clock_mhz")
    if boost is not None and implied is not None and implied > 1.05 * boost:
        problems.add("tensor_peak_implied_clock_mhz", f"= {_fmt(implied)} is above "
                     f"boost_clock_mhz = {_fmt(boost)}: the dense fp16 peak cannot need a "
                     "clock the GPU never reaches")
    for key in ("tf32", "fp16", "bf16", "fp8", "int8"):
        dense_field = PEAK_FIELDS[key]
        dense, sparse = good.get(dense_field), good.get(f"{dense_field}_sparse")
        if dense is not None and sparse is not None and dense > sparse:
            problems.add(dense_field, f"= {_fmt(dense)} is above {dense_field}_sparse = "
                         f"{_fmt(sparse)}: the dense figure is the smaller one (half the "
                         "sparse one on 2:4-sparse tensor cores)")
    _check_geforce_half_rate(good, problems)
    half_field = "peak_tflops_fp16" if "peak_tflops_fp16" in good else "peak_tflops_bf16"
    half = good.get(half_field)
    sms, cc = good.get("sm_count"), good.get("compute_capability")
    per_clk = good.get("fp16_dense_flops_per_clk_per_sm") or FP16_FLOPS_PER_CLK_BY_CC.get(cc or "")
    if half is not None and sms and per_clk and boost:
        need_mhz = half * 1e6 / (sms * per_clk)
        if need_mhz > 1.1 * boost:
            problems.add(half_field, f"= {_fmt(half)} needs a tensor clock of "
                         f"{need_mhz:.0f} MHz at {per_clk} FLOP/clk on {sms} SMs, above the "
                         f"boost clock ({_fmt(boost)} MHz): it looks like a with-sparsity "
                         f"figure (dense: half, {_fmt(half / 2)})")
            return  # the ratios below would only repeat it
        if need_mhz < 0.3 * boost:
            problems.add(half_field, f"= {_fmt(half)} needs only {need_mhz:.0f} MHz at "
                         f"{per_clk} FLOP/clk on {sms} SMs, under a third of the boost clock: "
                         f"a unit 1000 times off? ({_fmt(half)} PFLOP/s is "
                         f"{_fmt(half * 1e3)} TFLOP/s)")
            return
    if half is None:
        return
    for key, ratio in _RATIO_TO_HALF.items():
        field = PEAK_FIELDS[key]
        value = good.get(field)
        if field != half_field and value is not None and value > 1.05 * ratio * half:
            problems.add(field, f"= {_fmt(value)} is over {_fmt(ratio)}x {half_field} "
                         f"({_fmt(half)}), more than any GPU runs {key} against it: it looks "
                         f"like a with-sparsity figure (dense: half, {_fmt(value / 2)})")


def _check_geforce_half_rate(good: Mapping[str, Any], problems: _Problems) -> None:
    """A GeForce board runs fp16 and bf16 with fp32 accumulation (what PyTorch's cuBLAS calls
    and vLLM's kernels use) at half its fp16-accumulate tensor rate (GA102 and Ada
    whitepapers: RTX 3090 71 against 142, RTX 4090 165.2 against 330.3 TFLOP/s dense), and
    peak_tflops_fp16 is the fp32-accumulate figure. Given both, the first at more than about
    half the second is the marketing figure."""
    name = good.get("name")
    board = good.get("board_class") or (board_class_from_name(name) if name else None)
    fp16, fp16acc = good.get("peak_tflops_fp16"), good.get("peak_tflops_fp16_fp16acc")
    if board != "geforce" or fp16 is None or fp16acc is None or fp16 <= 0.55 * fp16acc:
        return
    problems.add("peak_tflops_fp16", f"= {_fmt(fp16)} on a GeForce board is more than half of "
                 f"peak_tflops_fp16_fp16acc = {_fmt(fp16acc)}: GeForce tensor cores run fp16 "
                 "with fp32 accumulation, which PyTorch and vLLM use, at half the "
                 f"fp16-accumulate rate (dense: {_fmt(fp16acc / 2)})")
