"""Measure this host's eager costs (``predict.host.HostCosts``) and write them into a
calibration profile, which ``estimate(device=profile)`` then uses for its event timing.

Three loops through the dispatcher on the local device (``cuda`` when present, else ``cpu``),
each timed ``reps`` times by ``perf_counter`` with the device synchronized at both ends:

- a chain of ``ops`` tiny ``nn.ReLU`` modules on a 16-element tensor: a module call, the
  dispatcher and a kernel launch each, so ``eager_op_ms`` is the chain's time over ``ops``
  (the kernels, a few µs each, run behind the host's issues);
- ``ops`` views of that tensor: ``eager_view_ms``, an issue without a kernel (called from
  Python here, so an upper bound on the C++ dispatcher hop of a composite's inner view, which
  the capture prices alike);
- ``ops`` calls of an empty module: ``eager_call_ms``.

The repeats' median is the profile's point and their range its interval. A compiled program's
and a graph replay's costs are not measured here: they are the prior of the newest fitted hosts
that timed compiled programs (``HostCostTable.prior``), scaled by how much faster or slower this
host issues an eager op than they do (NB: a host's Python and its driver need not scale alike).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..predict.host import HostCosts, HostCostTable, load_host_costs

__all__ = ["HostMeasurement", "host_section", "local_device", "measure_host"]


@dataclass(frozen=True)
class HostMeasurement:
    """What ``measure_host`` timed: each cost's repeats (ms per op), on ``device``."""

    device: str
    ops: int
    op_ms: tuple[float, ...]
    view_ms: tuple[float, ...]
    call_ms: tuple[float, ...]


def local_device() -> str:
    """``cuda`` where a GPU is visible, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _per_call_ms(fn: Callable[[], Any], calls: int, device: str) -> float:
    """ms per call of ``fn`` run ``calls`` times, the device idle at both ends."""
    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) * 1e3 / calls


def measure_host(device: str | None = None, ops: int = 200, reps: int = 7,
                 warmup: int = 2) -> HostMeasurement:
    """Time the three loops (the module's docstring) ``reps`` times on ``device`` (None: the
    local one)."""
    if ops < 1 or reps < 1:
        raise ValueError(f"ops and reps must be at least 1, got ops={ops}, reps={reps}")
    dev = device or local_device()
    x = torch.ones(16, device=dev)
    chain = torch.nn.Sequential(*[torch.nn.ReLU() for _ in range(ops)]).to(dev)
    empty = torch.nn.Identity()

    def views() -> None:
        y = x
        for _ in range(ops):
            y = y.view(-1)

    with torch.no_grad():
        loops = {"op": (lambda: chain(x), ops), "view": (views, ops),
                 "call": (lambda: empty(x), 1)}
        out: dict[str, list[float]] = {k: [] for k in loops}
        for rep in range(warmup + reps):
            for name, (fn, per) in loops.items():
                # the call loop runs ``ops`` single calls; the others one pass of ``ops`` ops
                t = (_per_call_ms(fn, ops, dev) if per == 1
                     else _per_call_ms(fn, 1, dev) / per)
                if rep >= warmup:
                    out[name].append(t)
    return HostMeasurement(dev, ops, tuple(out["op"]), tuple(out["view"]), tuple(out["call"]))


def host_section(m: HostMeasurement, table: HostCostTable | None = None) -> dict[str, Any]:
    """The profile's ``host`` section of a measurement: costs at the repeats' median, lo and
    hi at their ends; the compiled and graph costs the fitted hosts' prior scaled by this
    host's eager op against the prior's."""
    prior = _reference(table or load_host_costs())

    def costs(pick: Callable[[tuple[float, ...]], float]) -> HostCosts:
        op = pick(m.op_ms)
        scaled = prior.scaled(op / prior.eager_op_ms)
        return HostCosts(pick(m.call_ms), op, pick(m.view_ms), scaled.compiled_call_ms,
                         scaled.compiled_kernel_ms, scaled.graph_call_ms)

    return {"costs": costs(statistics.median).to_dict(), "lo": costs(min).to_dict(),
            "hi": costs(max).to_dict(), "device": m.device, "ops": m.ops,
            "reps": len(m.op_ms), "torch": torch.__version__,
            "scaled": "compiled_* and graph_call_ms: the median of the newest fitted hosts "
                      "that timed compiled programs, times this host's eager_op_ms over "
                      "theirs"}


def _reference(table: HostCostTable) -> HostCosts:
    """The prior of the newest generation whose hosts timed compiled programs, so that the
    compiled and replay costs and the eager op they are scaled by come from the same hosts
    (KernelBench's v0.1 hosts timed too few compiled programs to fit them)."""
    timed = [h for h, c in table.hosts.items() if c.compiled_kernel_ms is not None]
    newest = max(timed, key=lambda h: (table.dates.get(h, ""), h)) if timed else None
    return table.prior(generation=table.generation(newest) if newest else None).mid


def with_host(profile: Mapping[str, Any], section: Mapping[str, Any]) -> dict[str, Any]:
    """``profile`` with its ``host`` section set to ``section``."""
    return {**profile, "host": dict(section)}
