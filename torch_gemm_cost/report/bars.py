"""The page's stacked bars: the time by GEMMs and each non-GEMM op class, a training step's
time by phase, and the memory, where the report has a ``memory`` section.

The memory section is read as plain data (``to_dict()``, a dataclass or a mapping): each entry
whose name ends in ``_bytes`` or ``_gib`` is a part of the bar (a part held inside another,
the fp32 master weights among the optimizer's bytes, taken out of it), except the peak
(``peak_``, ``total_``), drawn as a bar of its own, and what the device holds (``device_``,
``capacity_``), which both bars are measured against; anything else is listed as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

from ..records.op_classes import TIME_CLASSES
from .breakdown import by_op_class, by_phase
from .record import ReportRecord

__all__ = ["MemoryBar", "Part", "memory_bar", "time_bars"]

GIB = float(1 << 30)


@dataclass(frozen=True)
class Part:
    """One segment of a stacked bar: its name, its value as text, its share of the bar in
    percent and its colour."""

    name: str
    value: str
    pct: float
    colour: str


@dataclass(frozen=True)
class MemoryBar:
    """The memory as two stacked bars of the device's memory: what the run holds (``parts``;
    not all of it at once) and its ``peak``; and the entries that are neither (``notes``)."""

    parts: tuple[Part, ...]
    peak: tuple[Part, ...]
    notes: tuple[tuple[str, str], ...]


# GEMMs, then each non-GEMM class of TIME_CLASSES, in its order
_CLASS_COLOURS = ("#4878b0", "#6aa84f", "#e69138", "#a64d79", "#c9a227", "#cc4125", "#76a5af",
                  "#8e7cc3", "#999999", "#b7b7b7")
_PHASE_COLOURS = {"fwd": "#4878b0", "dgrad": "#e69138", "wgrad": "#6aa84f", "optim": "#8e7cc3"}
_FREE_COLOUR = "#e8e8e8"
# a part held inside another (the fp32 master weights among the optimizer's bytes): taken out
_WITHIN = {"master weights": "optimizer"}


def time_bars(report: ReportRecord) -> list[tuple[str, list[Part]]]:
    """(heading, parts) of the time: GEMMs, then each non-GEMM class, costliest first; and,
    for a report of more than one phase (a training step), fwd, dgrad, wgrad and optim."""
    total = report.gpu_ms or 1.0
    classes = [("GEMMs", report.gemm_ms)] + [
        (TIME_CLASSES[k], ms) for k, ms in sorted(by_op_class(report).items(),
                                                  key=lambda kv: -kv[1])]
    colours = dict(zip(["GEMMs", *TIME_CLASSES.values()], _CLASS_COLOURS))
    bars = [("Where the time goes", [Part(name, f"{ms:.3f} ms", 100 * ms / total, colours[name])
                                     for name, ms in classes if ms > 0])]
    phases = by_phase(report)
    if len(phases) > 1:
        bars.append(("By phase", [Part(k, f"{ms:.3f} ms", 100 * ms / total, _PHASE_COLOURS[k])
                                  for k, ms in phases.items()]))
    return bars


def _plain(section: Any) -> Mapping[str, Any]:
    if callable(getattr(section, "to_dict", None)):
        return section.to_dict()  # type: ignore[no-any-return]
    if is_dataclass(section) and not isinstance(section, type):
        return asdict(section)
    return section if isinstance(section, Mapping) else {"memory": section}


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _gib(name: str, value: Any) -> float | None:
    """The entry in GiB where its name gives its unit and it is a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    leaf = name.rsplit(".", 1)[-1]
    if leaf.endswith("_bytes"):
        return value / GIB
    return float(value) if leaf.endswith("_gib") else None


def _stem(name: str) -> str:
    leaf = name.rsplit(".", 1)[-1]
    return leaf.removesuffix("_bytes").removesuffix("_gib").replace("_", " ")


def memory_bar(report: ReportRecord) -> MemoryBar | None:
    """The report's ``memory`` section as bars against the device's memory: what the run
    holds, part by part, and its peak; None where the report has none."""
    section = getattr(report, "memory", None)
    if section is None:
        return None
    sizes: dict[str, float] = {}
    notes: list[tuple[str, str]] = []
    peak: float | None = None
    capacity = report.device.mem_bytes / GIB if report.device.mem_bytes else None
    for name, value in _flat(_plain(section)).items():
        gib, leaf = _gib(name, value), name.rsplit(".", 1)[-1]
        if gib is None:
            notes.append((name.replace("_", " "), str(value)))
        elif leaf.startswith(("total", "peak")):
            peak = gib if peak is None else peak
            notes.append((_stem(name), f"{gib:.2f} GiB"))
        elif leaf.startswith(("capacity", "device")):
            capacity = gib
            notes.append((_stem(name), f"{gib:.2f} GiB"))
        else:
            sizes[_stem(name)] = gib
    for inner, outer in _WITHIN.items():
        if inner in sizes and outer in sizes:
            sizes[f"{outer} states"] = sizes.pop(outer) - sizes[inner]
    parts = [(n, g) for n, g in sizes.items() if g > 0]
    colours = {n: _CLASS_COLOURS[i % len(_CLASS_COLOURS)] for i, (n, _) in enumerate(parts)}
    return MemoryBar(_against(parts, capacity, colours),
                     () if peak is None else _against([("peak", peak)], capacity,
                                                       {"peak": "#555555"}),
                     tuple(notes))


def _against(parts: list[tuple[str, float]], capacity: float | None,
             colours: Mapping[str, str]) -> tuple[Part, ...]:
    """``parts`` (GiB) as a bar of the device's memory, the rest of it shown free; of their
    sum where they exceed it."""
    used = sum(g for _, g in parts)
    scale = max(used, capacity or 0.0) or 1.0
    bar = [Part(n, f"{g:.2f} GiB", 100 * g / scale, colours[n]) for n, g in parts]
    if capacity and capacity > used:
        bar.append(Part(f"free of {capacity:.1f} GiB", f"{capacity - used:.2f} GiB",
                        100 * (capacity - used) / scale, _FREE_COLOUR))
    return tuple(bar)
