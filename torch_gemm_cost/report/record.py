"""The cost report's record: every estimate of one model run on one device, and its totals.

Everything here is a pure accessor over the estimates (totals, intervals, the fused kernels);
the tree, the text, the exports, the plot and the page are built from it in the modules beside
this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..advise import PaddingAdvice
from ..hardware.catalog import DeviceSpec
from ..hardware.dtypes import resolve_dtype
from ..predict.attention.sdpa import FLASH_PREFIX
from ..predict.call import CallTime
from ..predict.intervals import DEFAULT_LEVEL, ReportUncertainty, check_level
from ..predict.price import GemmEstimate, OpEstimate, gemm_ms, other_ms, total_ms
from ..records.memory import MemoryEstimate
from .inputs import ReportInputs

__all__ = ["ReportRecord", "roofline_bound", "rows_interval", "totals_of"]


@dataclass(frozen=True)
class ReportRecord:
    """Every GEMM (and non-GEMM op) of one model run on one device, with predicted times.

    ``predictor`` and ``predictor_version`` name the predictor that priced the GEMMs.
    ``config`` holds the model's recognizable config dims and ``module_types`` the class name
    of every module path (names blocks in ``table(depth=N)``), both from the capture.
    ``advice`` is the padding advice (``advise.padding_advice``); None where none was made.
    ``compiled``: the non-GEMM ops were fused as ``torch.compile`` runs them; each op's
    ``OpEstimate.kernel`` names its kernel (``kernels()``, ``kernel_table()``).
    ``uncertainty`` holds what the intervals need (``predict/intervals.py``); None where no
    calibration covers the predictor, and then no interval is shown.
    ``memory`` is the run's memory on the device (``records.memory``); None where not made.
    ``inputs`` is the question the report answers (``ReportInputs``), filled by the entry
    point (``estimate``, ``compare``, the command line); ``question()`` reads it, or, in a
    report built by hand, the one the other fields say.
    ``call`` is the call's time under the timing the entry point was asked for
    (``predict.call.CallTime``): ``total_ms`` is its total; None (a report built by hand, the
    serving planner's) times the kernels' sum. The rows, phases and classes sum to ``gpu_ms``.
    """

    model: str  # class name of the estimated model
    device: DeviceSpec
    dtype: str
    mode: str  # "inference", "train" or "forward" (api.MODES)
    predictor: str
    predictor_version: str
    gemms: tuple[GemmEstimate, ...]
    others: tuple[OpEstimate, ...] = ()
    config: Mapping[str, int] = field(default_factory=dict, compare=False)
    module_types: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    advice: tuple[PaddingAdvice, ...] | None = field(default=None, compare=False, repr=False)
    compiled: bool = field(default=False, compare=False)
    uncertainty: ReportUncertainty | None = field(default=None, compare=False, repr=False)
    memory: MemoryEstimate | None = field(default=None, compare=False, repr=False)
    inputs: ReportInputs | None = field(default=None, compare=False, repr=False)
    call: CallTime | None = field(default=None, compare=False, repr=False)

    def question(self) -> ReportInputs:
        """What the report answers: ``inputs`` where the entry point filled it, else the
        record the other fields say (no task, no sizes)."""
        if self.inputs is not None:
            return self.inputs
        return ReportInputs(
            model=self.model, dtype=self.dtype, mode=self.mode, device=self.device.id,
            device_name=self.device.name, device_origin=self.device.origin.replace("_", " "),
            predictor=self.predictor, predictor_version=self.predictor_version,
            compiled=self.compiled)

    # ------------------------------------------------------------------ totals

    @property
    def gemm_ms(self) -> float:
        return gemm_ms(self.gemms)

    @property
    def other_ms(self) -> float:
        return other_ms(self.others)

    @property
    def gpu_ms(self) -> float:
        """The kernels' sum: GEMMs and modelled ops, what the table's rows sum to."""
        return total_ms(self.gemms, self.others)

    @property
    def total_ms(self) -> float:
        """The call's time as ``timing`` measures it (``call``), else the kernels' sum."""
        return self.gpu_ms if self.call is None else self.call.total_ms

    @property
    def timing(self) -> str:
        """What ``total_ms`` measures: ``event``, ``kernel`` or ``graph`` (``predict.call``)."""
        return "kernel" if self.call is None else self.call.timing

    @property
    def host_ms(self) -> float:
        """The host's own time in the call (``CallTime.host_ms``); 0 without a call."""
        return 0.0 if self.call is None else self.call.host_ms

    @property
    def total_flops(self) -> int:
        return sum(g.site.flops for g in self.gemms)

    @property
    def achieved_tflops(self) -> float:
        """GEMM FLOPs over the whole predicted time, in TFLOP/s."""
        return self.total_flops / (self.total_ms * 1e-3) / 1e12 if self.total_ms else 0.0

    @property
    def ridge_flops_per_byte(self) -> float:
        """The roofline's ridge in this report's dtype: the device's peak over its DRAM
        bandwidth. A GEMM left of it (fewer FLOPs per compulsory byte) is memory-bound."""
        return (self.device.peak_flops_per_s(resolve_dtype(self.dtype))
                / self.device.dram_bw_bytes_per_s)

    @property
    def unmodelled(self) -> tuple[OpEstimate, ...]:
        return tuple(o for o in self.others if o.time_ms is None)

    # ------------------------------------------------------------------ intervals

    @property
    def total_interval_ms(self) -> tuple[float, float] | None:
        """(lo, hi) of ``total_ms`` at 80%: the GPU interval and, under an event or graph
        timing, the host costs' range; None where neither is known."""
        if self.uncertainty is None:
            if self.call is None or self.call.timing == "kernel":
                return None
            return self.call.lo_ms, self.call.hi_ms
        return self.interval(DEFAULT_LEVEL)

    def interval(self, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
        """(lo, hi) of ``total_ms``: the kernels' time falls inside its interval with
        probability ``level`` (calibrated on GPUs held out of the fit; see
        ``predict/intervals.py``); under an event or graph timing the call is evaluated with
        every kernel at those ends and the host costs at the ends of their range."""
        lo, hi = self.gpu_interval(level)
        if self.call is None or self.call.timing == "kernel":
            return lo, hi
        return self.call.bounds(lo, hi)

    def gpu_interval(self, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
        """(lo, hi) of ``gpu_ms``, the kernels' sum, at ``level``."""
        level = check_level(level, "level")
        if self.uncertainty is None:
            raise ValueError(
                f"this report holds no intervals: predictor {self.predictor} "
                f"v{self.predictor_version} has no interval calibration (the shipped hybrid "
                "predictor and calibration profiles have one)")
        times = torch.tensor([g.time_ms for g in self.gemms], dtype=torch.float64)
        att_ms, decode = _attention(self, range(len(self.others)))
        return self.uncertainty.total_bounds(times, self.other_ms - float(att_ms.sum()), level,
                                             attention_ms=att_ms, attention_decode=decode)

    # ------------------------------------------------------------------ kernels and advice

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

    def padding_advice(self) -> list[PaddingAdvice]:
        """Padding suggestions ranked by predicted whole-model saving (see ``advise``)."""
        if self.advice is None:
            raise ValueError(
                f"this report of {self.model} holds no padding advice: it is made by estimate() "
                "and compare(), or by advise.padding_advice(report.gemms, predictor, ...)")
        return list(self.advice)


def roofline_bound(flops: float, dram_bytes: float, ridge_flops_per_byte: float) -> str:
    """``compute`` where ``flops`` over ``dram_bytes`` (the intensity the roofline plot draws)
    reaches the ridge, else ``memory``: the one rule of every table's and plot's bound."""
    return "compute" if flops >= ridge_flops_per_byte * dram_bytes else "memory"


def totals_of(report: ReportRecord, gemm_index: Sequence[int],
              other_index: Sequence[int]) -> dict[str, Any]:
    """The numbers of one table row holding the report's GEMMs at ``gemm_index`` and its
    other ops at ``other_index``: counts, FLOPs, times, share of the total, 80% interval, and
    its bound by ``roofline_bound`` over the GEMMs with a time of their own (``fused`` where
    every GEMM runs inside an attention kernel, ``-`` where it holds none)."""
    gemms = [report.gemms[i] for i in gemm_index]
    others = [report.others[i] for i in other_index]
    priced = [g for g in gemms if g.bound != "fused"]
    gemm_ms = sum(g.time_ms for g in gemms)
    other_ms = sum(o.time_ms or 0.0 for o in others)
    flops = sum(g.site.flops for g in priced)
    dram_bytes = sum(g.site.dram_bytes for g in priced)
    bound = ("-" if not gemms else "fused" if not priced
             else roofline_bound(flops, dram_bytes, report.ridge_flops_per_byte))
    span = rows_interval(report, gemm_index, other_ms, other_index)
    return {
        "gemms": len(gemms),
        "ops": sum(o.time_ms is not None for o in others),
        "unmodelled": sum(o.time_ms is None for o in others),
        "flops": sum(g.site.flops for g in gemms),
        "gemm_ms": gemm_ms,
        "other_ms": other_ms,
        "time_ms": gemm_ms + other_ms,
        "pct_of_total": 100.0 * (gemm_ms + other_ms) / (report.gpu_ms or 1.0),
        "intensity": flops / dram_bytes if dram_bytes else None,  # FLOP per compulsory byte
        "bound": bound,
        "lo_ms": None if span is None else span[0],
        "hi_ms": None if span is None else span[1],
    }


def _attention(report: ReportRecord, index: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Times (M,) and phases (M,: 1 for a one-token query) of the fused-attention kernels
    among the report's others at ``index``."""
    att = [(o.time_ms, float(o.op.attention.q_len == 1))
           for o in (report.others[i] for i in index)
           if o.kernel.startswith(FLASH_PREFIX) and o.time_ms is not None
           and o.op.attention is not None]
    t = torch.tensor(att, dtype=torch.float64).reshape(-1, 2)
    return t[:, 0], t[:, 1]


def rows_interval(report: ReportRecord, index: Sequence[int], other: float,
                  other_index: Sequence[int] = (),
                  level: float = DEFAULT_LEVEL) -> tuple[float, float] | None:
    """(lo, hi) of the report's GEMMs at ``index`` and ``other`` ms of its ops at
    ``other_index`` (their fused-attention kernels with their own calibration); None without
    intervals."""
    if report.uncertainty is None:
        return None
    idx = torch.tensor(list(index), dtype=torch.long)
    times = torch.tensor([report.gemms[i].time_ms for i in index], dtype=torch.float64)
    att_ms, decode = _attention(report, other_index)
    return report.uncertainty.total_bounds(times, other - float(att_ms.sum()), level, idx,
                                           attention_ms=att_ms, attention_decode=decode)
