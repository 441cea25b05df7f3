"""The catalog GPU most like a spec record, whose figures an error's hints quote."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

from ..catalog import DeviceSpec, _norm, list_devices
from .arch import chip_of
from .record import datasheet_record


def most_similar(rec: Mapping[str, Any]) -> DeviceSpec | None:
    """The catalog GPU most like ``rec``: same chip, then compute capability, architecture and
    vendor, then the closest figures (SMs, clock, bandwidth, fp16 peak) and name. None when
    ``rec`` says none of these."""
    def text(key: str) -> str:
        value = rec.get(key)
        return _norm(value) if isinstance(value, str) else ""

    def number(key: str) -> float | None:
        value = rec.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if value > 0 and math.isfinite(value) else None

    figures = {key: number(key) for key in ("sm_count", "boost_clock_mhz", "mem_bw_gbps",
                                            "peak_tflops_fp16")}

    chip = _norm(chip_of(rec["chip"])) if isinstance(rec.get("chip"), str) else ""
    cc, arch = text("compute_capability"), text("architecture")
    vendor, name = text("vendor"), text("name") or text("id")
    best, best_score = None, -1.0
    for spec in list_devices():
        score = (8.0 * bool(chip and _norm(spec.chip) == chip)
                 + 4.0 * bool(cc and _norm(spec.compute_capability) == cc)
                 + 4.0 * bool(arch and _norm(spec.architecture) == arch)
                 + 2.0 * bool(vendor and _norm(spec.vendor) == vendor)
                 + 2.0 * difflib.SequenceMatcher(None, name, _norm(spec.name)).ratio())
        theirs = datasheet_record(spec)
        for key, mine in figures.items():  # 1 for the same figure, 0 from a factor of e apart
            if mine is not None and theirs.get(key):
                score += max(0.0, 1.0 - abs(math.log(mine / theirs[key])))
        if score > best_score:
            best, best_score = spec, score
    return best if best_score > 0 else None
