"""A collective profile: the NCCL collectives one cluster was measured to run, priced from the
measurement instead of the collective model where it covers a call.

nccl-tests (github.com/NVIDIA/nccl-tests) report each message size's time and two bandwidths:
the algorithm bandwidth ``algbw = size / time`` and the bus bandwidth ``busbw = algbw ×
factor``, the factor making busbw comparable with a link's speed whatever the GPU count
(doc/PERFORMANCE.md): 2(n−1)/n for an all-reduce, (n−1)/n for an all-gather, a
reduce-scatter and an all-to-all, 1 for a send/receive. ``measured/nccl_tests.py`` reads their
logs into a ``CommProfile``; ``predict_collective_ms(..., comm_profile=)`` prices a call from
it: the bus bandwidth of the call's (collective, GPUs, GPUs per node) interpolated linearly in
log-size between the two measured sizes around it, the time then ``size × factor / busbw``.
Outside the measured sizes, or for a group the profile did not measure, the collective model
(the prior) prices the call.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["COMM_PROFILE_FORMAT", "COMM_PROFILE_VERSION", "CommMeasurement", "CommProfile",
           "bus_factor", "load_comm_profile"]

COMM_PROFILE_FORMAT = "torch_gemm_cost.comm_profile"
COMM_PROFILE_VERSION = 1
_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "send_recv")


def bus_factor(collective: str, num_gpus: int) -> float:
    """nccl-tests' busbw / algbw for ``collective`` over ``num_gpus`` GPUs.

    >>> bus_factor("all_reduce", 8)   # 2 · 7 / 8
    1.75
    >>> bus_factor("send_recv", 2)
    1.0
    """
    n = num_gpus
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    if collective == "send_recv":
        return 1.0
    raise ValueError(f"unknown collective {collective!r}; one of {', '.join(_COLLECTIVES)}")


@dataclass(frozen=True)
class CommMeasurement:
    """One row of an nccl-tests log: a message of ``size_bytes`` (nccl-tests' size) over
    ``num_gpus`` GPUs, ``gpus_per_node`` of them a node, timed out of place (and in place, where
    the test ran it)."""

    collective: str
    num_gpus: int
    gpus_per_node: int
    size_bytes: float
    time_us: float
    in_place_time_us: float | None = None

    @property
    def busbw_bytes_per_s(self) -> float:
        """Bus bandwidth of the out-of-place run, from the time (not the log's rounded one)."""
        return self.size_bytes * bus_factor(self.collective, self.num_gpus) / (
            self.time_us * 1e-6)


@dataclass(frozen=True)
class CommProfile:
    """The collectives one cluster ran: every measured row, the GPU the logs name, and the
    logs it was read from."""

    measurements: tuple[CommMeasurement, ...]
    gpu_name: str | None = None
    sources: tuple[str, ...] = ()

    def groups(self) -> tuple[tuple[str, int, int], ...]:
        """The (collective, GPUs, GPUs per node) the profile measured, sorted."""
        return tuple(sorted({(m.collective, m.num_gpus, m.gpus_per_node)
                             for m in self.measurements}))

    def size_range(self, collective: str, num_gpus: int, gpus_per_node: int
                   ) -> tuple[float, float] | None:
        """The smallest and largest message measured for the group, or None."""
        sizes = [s for s, _ in self._curve(collective, num_gpus, gpus_per_node)]
        return (sizes[0], sizes[-1]) if sizes else None

    def time_ms(self, collective: str, size_bytes: float, num_gpus: int, gpus_per_node: int
                ) -> float | None:
        """The call's time from the measured bus bandwidth interpolated in log-size; None
        outside the measured sizes or for a group the profile lacks."""
        curve = self._curve(collective, num_gpus, gpus_per_node)
        if not curve or not curve[0][0] <= size_bytes <= curve[-1][0]:
            return None
        for (s0, b0), (s1, b1) in itertools.pairwise(curve):
            if s0 <= size_bytes <= s1:
                w = 0.0 if s1 == s0 else math.log(size_bytes / s0) / math.log(s1 / s0)
                busbw = b0 + w * (b1 - b0)
                break
        else:  # a single measured size, met exactly
            busbw = curve[0][1]
        return 1e3 * size_bytes * bus_factor(collective, num_gpus) / busbw

    def _curve(self, collective: str, num_gpus: int, gpus_per_node: int
               ) -> list[tuple[float, float]]:
        """(size, busbw) of the group, by size; several runs of one size: their median."""
        by_size: dict[float, list[float]] = {}
        for m in self.measurements:
            if (m.collective, m.num_gpus, m.gpus_per_node) == (collective, num_gpus,
                                                                gpus_per_node):
                by_size.setdefault(m.size_bytes, []).append(m.busbw_bytes_per_s)
        return [(s, statistics.median(b)) for s, b in sorted(by_size.items())]

    def to_dict(self) -> dict[str, Any]:
        return {"format": COMM_PROFILE_FORMAT, "version": COMM_PROFILE_VERSION,
                "gpu_name": self.gpu_name, "sources": list(self.sources),
                "measurements": [asdict(m) for m in self.measurements]}

    def save(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CommProfile:
        """A profile from ``to_dict``'s data, its format and version checked; a ValueError
        names the bad entry."""
        if not isinstance(doc, Mapping) or doc.get("format") != COMM_PROFILE_FORMAT:
            got = doc.get("format") if isinstance(doc, Mapping) else type(doc).__name__
            raise ValueError(f"format is {got!r}, expected {COMM_PROFILE_FORMAT!r} (write one "
                             "with `torch-gemm-cost calibrate-comm`)")
        if doc.get("version") != COMM_PROFILE_VERSION:
            raise ValueError(f"version is {doc.get('version')!r}, this reader knows "
                             f"{COMM_PROFILE_VERSION}")
        rows = doc.get("measurements")
        if not isinstance(rows, Sequence) or not rows:
            raise ValueError("no measurements")
        out = []
        for i, row in enumerate(rows):
            try:
                m = CommMeasurement(**row)
            except TypeError as e:
                raise ValueError(f"measurement {i}: {e}") from None
            if m.collective not in _COLLECTIVES:
                raise ValueError(f"measurement {i}: unknown collective {m.collective!r}")
            if not (m.size_bytes > 0 and m.time_us > 0 and m.num_gpus >= 2
                    and 1 <= m.gpus_per_node <= m.num_gpus):
                raise ValueError(f"measurement {i}: sizes, times and GPU counts must be "
                                 f"positive, got {row}")
            out.append(m)
        return cls(tuple(out), doc.get("gpu_name"), tuple(doc.get("sources") or ()))


def load_comm_profile(profile: CommProfile | str | os.PathLike[str]) -> CommProfile:
    """A profile as given, or read from its JSON file; a bad file raises a ValueError that
    names it."""
    if isinstance(profile, CommProfile):
        return profile
    if not isinstance(profile, (str, os.PathLike)):
        raise TypeError(f"comm_profile must be a CommProfile or a JSON file's path, got "
                        f"{type(profile).__name__}")
    path = Path(profile)
    if not path.is_file():
        raise FileNotFoundError(f"comm profile {str(profile)!r}: no such file")
    try:
        return CommProfile.from_dict(json.loads(path.read_text()))
    except json.JSONDecodeError as e:
        raise ValueError(f"comm profile {path}: not valid JSON ({e.msg} at line {e.lineno})"
                         ) from None
    except ValueError as e:
        raise ValueError(f"comm profile {path} is invalid: {e}") from None
