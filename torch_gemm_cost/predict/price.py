"""The predict stage of ``estimate()``: each record with its predicted time.

Every GEMM of a run is predicted in one batched call, and each ``GemmEstimate`` keeps the
predictor's intermediates for its GEMM (``details``), so advice and explanations read them
instead of predicting again. Non-GEMM ops get their times from the op cost model (``ops``),
kernel by kernel where ``torch.compile`` fuses them (``FusedKernel``). On a GPU an SDPA call is
one fused attention kernel (``sdpa``): its time is on its attention record, and its two GEMMs
are marked ``fused`` with no time of their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..hardware.catalog import DeviceSpec
from ..records.types import FusedKernel, GemmBatch, GemmSite, OtherOp
from .attention.sdpa import runs_fused_attention, sdpa_times_ms, shipped_attention
from .base import Predictor, predict_distinct
from .intervals import ReportUncertainty, uncertainty_of
from .ops import OpBatch, OpCostModel, load_op_costs

__all__ = [
    "GemmEstimate",
    "OpEstimate",
    "PricedRecords",
    "estimate_gemms",
    "estimate_ops",
    "gemm_ms",
    "other_ms",
    "price_gemms",
    "price_records",
    "total_ms",
]


@dataclass(frozen=True)
class GemmEstimate:
    """One GEMM and its predicted time."""

    site: GemmSite
    time_ms: float
    bound: str  # "compute", "memory", or "fused" (its time is its fused attention kernel's)
    # the predictor's intermediates for this GEMM (waves, hit rates, ...), when it gives them
    details: Mapping[str, float] = field(default_factory=dict, compare=False)
    # the 80% interval of the measured time (predict/intervals.py); None where no calibration
    # covers the predictor
    lo_ms: float | None = None
    hi_ms: float | None = None


@dataclass(frozen=True)
class OpEstimate:
    """One non-GEMM op and its predicted time (None while it is unmodelled)."""

    op: OtherOp
    time_ms: float | None
    kernel: str = ""  # the kernel that runs it with others (torch.compile, flash attention)


def estimate_gemms(sites: Sequence[GemmSite], device: DeviceSpec,
                   predictor: Predictor) -> tuple[GemmEstimate, ...]:
    """Every GEMM's time on ``device`` from one batched call of ``predictor``, with its
    details and its 80% interval."""
    return price_gemms(sites, device, predictor)[0]


def price_gemms(sites: Sequence[GemmSite], device: DeviceSpec, predictor: Predictor
                ) -> tuple[tuple[GemmEstimate, ...], ReportUncertainty | None]:
    """``estimate_gemms``, and what a report needs for intervals at any level over these GEMMs
    (None where no calibration covers ``predictor``; see ``predict/intervals.py``)."""
    if not sites:
        return (), None
    batch = GemmBatch.from_sites(sites)
    pred = predict_distinct(predictor, batch, device)
    details = {name: values.tolist() for name, values in pred.details.items()}  # name -> (N,)
    fused = runs_fused_attention(device)
    unc = uncertainty_of(batch, device, predictor)
    if unc is not None and fused:
        unc = replace(unc, attention=shipped_attention().intervals_)
    if len(pred.bound) != len(sites):
        raise ValueError(f"predictor {getattr(predictor, 'name', predictor)!r} says what bounds "
                         f"{len(pred.bound)} of {len(sites)} GEMMs; a GEMM predictor names each "
                         "one's bound (Prediction.bound)")
    none: list[float | None] = [None] * len(sites)
    lo = none if pred.lo_ms is None else pred.lo_ms.tolist()
    hi = none if pred.hi_ms is None else pred.hi_ms.tolist()
    return tuple(
        GemmEstimate(site, float(t), bound,
                     {name: float(values[i]) for name, values in details.items()},
                     lo_ms=lo[i], hi_ms=hi[i])
        if not (fused and _in_attention_kernel(site))
        else GemmEstimate(site, 0.0, "fused", lo_ms=None if unc is None else 0.0,
                          hi_ms=None if unc is None else 0.0)
        for i, (site, t, bound) in enumerate(zip(sites, pred.time_ms.tolist(),
                                                 pred.bound))
    ), unc


def _in_attention_kernel(site: GemmSite) -> bool:
    """A forward GEMM of an SDPA call, which a GPU runs inside one attention kernel."""
    return site.phase == "forward" and site.op in ("sdpa_qk", "sdpa_pv")


def estimate_ops(others: Sequence[OtherOp], device: DeviceSpec,
                 model: OpCostModel | None = None,
                 kernels: Sequence[FusedKernel] = (),
                 resident_bytes: int | None = None) -> tuple[OpEstimate, ...]:
    """Every non-GEMM op's time on ``device``; ops of class ``other`` keep None.

    ``kernels`` (``compiled.fusion.fuse_kernels``) prices the ops they hold as those kernels,
    each op naming its kernel. ``resident_bytes``: every byte the call touches, read from the
    L2 where it fits (``ops.resident_l2_hit``). On a GPU each SDPA call's record carries its
    attention kernel's time (``sdpa.sdpa_times_ms``)."""
    pred = (model or load_op_costs()).predict(
        OpBatch(tuple(others), tuple(kernels), resident_bytes), device)
    times = pred.times_or_none()
    names = list(pred.kernel)
    if runs_fused_attention(device):
        idx = [i for i, o in enumerate(others) if o.attention is not None and o.phase == "forward"]
        attention, kernel = sdpa_times_ms([others[i] for i in idx], device, op_costs=model)
        for j, (i, t, name) in enumerate(zip(idx, attention, kernel)):
            times[i], names[i] = t, f"{name}_{j}"  # one kernel per call
    return tuple(OpEstimate(op, t, name) for op, t, name in zip(others, times, names))


@dataclass(frozen=True)
class PricedRecords:
    """One run's records with their times: every GEMM, every other op, and what a report
    needs for intervals over the GEMMs (None where no calibration covers the predictor)."""

    gemms: tuple[GemmEstimate, ...]
    ops: tuple[OpEstimate, ...]
    uncertainty: ReportUncertainty | None


def price_records(sites: Sequence[GemmSite], others: Sequence[OtherOp], device: DeviceSpec,
                  predictor: Predictor, *, kernels: Sequence[FusedKernel] = (),
                  op_costs: OpCostModel | None = None,
                  resident_bytes: int | None = None) -> PricedRecords:
    """The predict stage of one run, as ``estimate`` and the serving planner both price: the
    GEMMs in one batched call of ``predictor`` (``price_gemms``), the other ops by the op cost
    model (``op_costs``, None: the shipped one), kernel by kernel where ``kernels`` fuse them,
    from the L2 where the call's ``resident_bytes`` fit it (``estimate_ops``)."""
    gemms, uncertainty = price_gemms(sites, device, predictor)
    return PricedRecords(gemms, estimate_ops(others, device, op_costs, kernels=kernels,
                                             resident_bytes=resident_bytes), uncertainty)


def gemm_ms(gemms: Sequence[GemmEstimate]) -> float:
    """The GEMMs' time."""
    return sum(g.time_ms for g in gemms)


def other_ms(others: Sequence[OpEstimate]) -> float:
    """The modelled non-GEMM ops' time (unmodelled ones are left out)."""
    return sum(o.time_ms for o in others if o.time_ms is not None)


def total_ms(gemms: Sequence[GemmEstimate], others: Sequence[OpEstimate]) -> float:
    """The run's time: its GEMMs' and its modelled ops'."""
    return gemm_ms(gemms) + other_ms(others)
