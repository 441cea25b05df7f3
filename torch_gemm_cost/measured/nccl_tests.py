"""nccl-tests logs read into a collective profile (``predict.comm_profile.CommProfile``).

The logs are what nccl-tests' binaries print (github.com/NVIDIA/nccl-tests: ``all_reduce_perf``,
``all_gather_perf``, ``reduce_scatter_perf``, ``alltoall_perf``, ``sendrecv_perf``):

- a header of ``#`` lines: the arguments (``# nThread 1 nGpus 1 minBytes 8 ...``), one
  ``#  Rank  r Group  g Pid  p on HOST device  d [BUS] GPU NAME`` line per rank (how many ranks
  and on how many hosts), and newer releases' ``# Collective test starting: all_reduce_perf``;
- the column header, ``# size count type redop root time algbw busbw #wrong time algbw busbw
  #wrong`` (older releases: no ``root``, ``error`` for ``#wrong``), the first ``time`` out of
  place and the second in place, in microseconds;
- one row per message size; ``N/A`` where a test has no in-place run.

The collective is the one the log names, else the one its file name names (nccl-tests' binary
name, as ``all_reduce_perf_8gpu.txt``), else the one the caller gives. A send/receive test
becomes 2-GPU sends (each rank sends to its neighbour), across nodes when the ranks span hosts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from ..predict.comm_profile import CommMeasurement, CommProfile
from ..suggest import unknown

__all__ = ["BINARIES", "parse_nccl_tests", "read_nccl_tests"]

# nccl-tests binary -> the collective's name here
BINARIES: dict[str, str] = {
    "all_reduce_perf": "all_reduce",
    "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "alltoall",
    "sendrecv_perf": "send_recv",
}
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+"
                   r"\s+\[[^\]]*\]\s*(.*)$")
_STARTING = re.compile(r"Collective test starting:\s*(\w+)")


def parse_nccl_tests(text: str, source: str = "<log>", collective: str | None = None
                     ) -> tuple[tuple[CommMeasurement, ...], str | None]:
    """The measured rows of one nccl-tests log, and the GPU its ranks name. A ValueError names
    ``source`` and what the log lacks."""
    name = _collective_of(text, source, collective)
    ranks: dict[int, tuple[str, str]] = {}
    columns: list[str] | None = None
    rows: list[list[str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            m = _RANK.match(stripped)
            if m:
                ranks[int(m.group(1))] = (m.group(2), m.group(3).strip())
                continue
            tokens = stripped.lstrip("#").split()
            if {"size", "count", "type", "time"} <= set(tokens) and columns is None:
                columns = tokens
            continue
        if columns is not None and stripped[0].isdigit():
            rows.append(stripped.split())
    if not ranks:
        raise ValueError(f"{source}: no '#  Rank  N Group ... on HOST device ...' lines; the "
                         "log's header says how many GPUs ran the test and on which hosts")
    if columns is None:
        raise ValueError(f"{source}: no column header ('# size count type ... time algbw "
                         "busbw ...'); is this an nccl-tests log?")
    times = [i for i, c in enumerate(columns) if c == "time"]
    if not rows:
        raise ValueError(f"{source}: no measured rows under the column header")
    n = len(ranks)
    hosts = {host for host, _ in ranks.values()}
    if n % len(hosts):
        raise ValueError(f"{source}: {n} ranks on {len(hosts)} hosts, not as many on each")
    per_node = n // len(hosts)
    if name == "send_recv":  # each rank sends to its neighbour: 2-GPU sends
        n, per_node = 2, 2 if len(hosts) == 1 else 1
    if n < 2:
        raise ValueError(f"{source}: one rank; a collective's profile needs 2 GPUs or more")
    out = []
    for tokens in rows:
        if len(tokens) < len(columns):
            raise ValueError(f"{source}: row {' '.join(tokens)!r} has {len(tokens)} columns, "
                             f"the header {len(columns)}")
        size = float(tokens[0])
        oop = _number(tokens[times[0]], source)
        inp = _number(tokens[times[1]], source) if len(times) > 1 else None
        if size <= 0 or oop is None or oop <= 0:
            continue  # nccl-tests' zero-byte rows time nothing
        out.append(CommMeasurement(name, n, per_node, size, oop, inp))
    gpus = {g for _, g in ranks.values() if g}
    return tuple(out), gpus.pop() if len(gpus) == 1 else None


def read_nccl_tests(paths: Iterable[str | os.PathLike[str]], collective: str | None = None
                    ) -> CommProfile:
    """One profile from several nccl-tests logs (one test each)."""
    measurements: list[CommMeasurement] = []
    gpus: set[str] = set()
    sources = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise FileNotFoundError(f"{p}: no such file")
        rows, gpu = parse_nccl_tests(path.read_text(errors="replace"), str(path), collective)
        measurements += rows
        if gpu:
            gpus.add(gpu)
        sources.append(path.name)
    if not sources:
        raise ValueError("give at least one nccl-tests log")
    return CommProfile(tuple(measurements), ", ".join(sorted(gpus)) or None, tuple(sources))


def _collective_of(text: str, source: str, given: str | None) -> str:
    found = _STARTING.search(text)
    if found and found.group(1) in BINARIES:
        return BINARIES[found.group(1)]
    stem = Path(source).name
    for binary, name in BINARIES.items():
        if binary in stem or stem.startswith(name):
            return name
    if given is not None:
        if given in BINARIES.values():
            return given
        if given in BINARIES:
            return BINARIES[given]
        raise ValueError(unknown("collective", given, [*BINARIES.values(), *BINARIES]))
    raise ValueError(f"{source}: the log does not say which test ran (no 'Collective test "
                     "starting' line, no test name in the file name); name it, e.g. "
                     "--collective all_reduce")


def _number(token: str, source: str) -> float | None:
    if token.upper() == "N/A":
        return None
    try:
        return float(token)
    except ValueError:
        raise ValueError(f"{source}: {token!r} is not a number") from None
