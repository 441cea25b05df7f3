"""The host side of ``kernelbench_accuracy.py --host-calibrated``: each KernelBench host's
costs cross-fitted on its own timings, as a user's calibrated host prices a call.

A host (one board in one problem set's timings, ``train.host.host_name``) is fitted by
``train.host.fit_host_costs`` on its programs of one fold (``fold``: the program number's
parity) and prices the other fold, so no timing is priced with costs fitted on it. The
fitted eager costs stand for what ``torch-gemm-cost calibrate --host`` measures; the compiled
and replay costs either follow them as ``calibrate --host`` writes them (``as_calibrated``) or
are the host's own fit too. Each call is re-timed as ``estimate(..., host=HostCosts(...))``
times it (``calibrated_ms``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from torch_gemm_cost.calibrate.host import HostMeasurement, host_section
from torch_gemm_cost.hardware.catalog import DeviceSpec, get_device
from torch_gemm_cost.predict.call import CallTime, call_time, input_copy_ms
from torch_gemm_cost.predict.host import (
    COST_FIELDS,
    HostCosts,
    load_host_costs,
    point_prior,
)
from torch_gemm_cost.train.host import HostRow, fit_host_costs, host_name


@dataclass(frozen=True)
class Timing:
    """One canonical KernelBench timing."""

    board: str
    gpu: str  # catalog id
    problem_set: str
    tree: str
    level: int
    program: str  # file name in the level folder
    mode: str
    measured_ms: float
    date: str


def fold(program: str) -> int:
    """A program's fold in the host cross-fit: its number's parity (``33_BatchNorm.py`` -> 1),
    so each of KernelBench's runs of like programs (matmuls, activations, norms, ...) is split
    between the two folds."""
    return int(program.split("_")[0]) % 2


def host_rows(scored: Iterable[tuple[Timing, tuple[Any, ...]]]) -> list[HostRow]:
    """The timings as ``train.host`` fits them (``HostRow``, one host per board and problem
    set), each with the issues and kernel times of the call this benchmark priced: the GPU
    side as held out as the column beside it."""
    out = []
    for t, priced in scored:
        call = priced[3]
        if call is None:
            continue
        spec = get_device(t.gpu)
        out.append(HostRow(host_name(t.board, t.problem_set), t.board, t.problem_set, t.date,
                           t.gpu, spec.chip or spec.id, t.mode, t.program, t.measured_ms,
                           call.issues, input_copy_ms(call.issues.input_bytes, spec)))
    return out


def cross_fit_hosts(rows: list[HostRow]) -> dict[tuple[str, int], HostCosts]:
    """(host, fold) -> that host's costs fitted by ``train.host.fit_host_costs`` on its rows of
    the other fold: what pricing the fold's programs may use without having seen them. A cost
    the other fold has too few rows to fit (``fit_host_costs``: 20 a group) is None here."""
    out = {}
    for k in (0, 1):
        table = fit_host_costs([r for r in rows if fold(r.program) != k])
        out.update({(h, k): HostCosts.from_dict(v["costs"]) for h, v in table["hosts"].items()})
    return out


def as_calibrated(fitted: HostCosts, chip: str) -> HostCosts:
    """What ``calibrate --host`` writes for a host whose eager costs are ``fitted``'s: its
    ``host_section`` of them, the compiled and replay costs the fitted hosts' prior scaled by
    the eager op, that prior taken without the hosts of ``chip`` (the shipped table holds the
    host itself, fitted on every program)."""
    table = load_host_costs().without_chips([chip])
    measured = HostMeasurement("fitted", 0, (fitted.eager_op_ms,), (fitted.eager_view_ms,),
                               (fitted.eager_call_ms,))
    return HostCosts.from_dict(host_section(measured, table)["costs"])


def calibrated_ms(call: CallTime, costs: HostCosts, spec: DeviceSpec) -> float:
    """The call's time with a calibrated host's ``costs``, as ``estimate(..., host=costs)``
    times it (``call_time`` at a point prior); a cost ``costs`` lacks (a fold with too few
    compiled programs to fit it) is the default prior's (``call.prior``)."""
    full = replace(costs, **{f: getattr(call.prior.mid, f) for f in COST_FIELDS
                             if getattr(costs, f) is None})
    return call_time(call.issues, call.timing, point_prior(full, "calibrated"), spec).total_ms
