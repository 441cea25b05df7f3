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
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..predict.comm_profile import CommMeasurement, CommProfile, bus_factor
from ..suggest import unknown

__all__ = ["BINARIES", "format_nccl_tests", "parse_nccl_tests", "read_nccl_tests"]

# nccl-tests binary -> the collective's name here
BINARIES: dict[str, str] = {
    "all_reduce_perf": "all_reduce",
    "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "alltoall",
    "sendrecv_perf": "send_recv",
}
# nccl-tests' type names by element bytes (src/common.cu: test_typenames), as the log prints them
_TYPES = {1: "int8", 2: "half", 4: "float"}
_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum"}
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


def format_nccl_tests(measurements: Sequence[CommMeasurement], gpu_name: str,
                      element_bytes: int = 2) -> str:
    """``measurements`` of one test (one collective, GPU count and GPUs per node) written as
    nccl-tests prints them: the header with one rank line a GPU (``gpus_per_node`` to a host),
    the column header, a row a size with its out-of-place (and in-place) time in µs and both
    bandwidths. ``parse_nccl_tests`` reads it back to the same rows (times to 0.01 µs)."""
    groups = {(m.collective, m.num_gpus, m.gpus_per_node) for m in measurements}
    if len(groups) != 1:
        raise ValueError(f"one test a log: got {len(groups)} (collective, GPUs, GPUs per node) "
                         f"groups {sorted(groups)}")
    if element_bytes not in _TYPES:
        raise ValueError(f"element_bytes={element_bytes}: nccl-tests types are "
                         f"{', '.join(f'{b} ({t})' for b, t in _TYPES.items())}; nearest good: 2")
    collective, n, per_node = groups.pop()
    binary = next(b for b, c in BINARIES.items() if c == collective)
    rows = sorted(measurements, key=lambda m: m.size_bytes)
    lines = [(f"# nThread 1 nGpus 1 minBytes {int(rows[0].size_bytes)} maxBytes "
              f"{int(rows[-1].size_bytes)} step: 2(factor) warmup iters: 5 iters: 20 agg iters: "
              "1 validation: 1 graph: 0"), "#", f"# Collective test starting: {binary}",
             "# Using devices"]
    lines += [(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on host{r // per_node} device "
               f"{r % per_node:2d} [0x{r:02x}] {gpu_name}") for r in range(n)]
    lines += ["#", ("#       size         count      type   redop    root     time   algbw   "
                    "busbw #wrong     time   algbw   busbw #wrong"),
              ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
               "            (us)  (GB/s)  (GB/s)")]
    factor = bus_factor(collective, n)

    def timed(us: float | None, size: float) -> str:
        if us is None:
            return f"{'N/A':>8} {'N/A':>7} {'N/A':>7} {'N/A':>6}"
        algbw = size / (us * 1e-6) / 1e9
        return f"{us:8.2f} {algbw:7.2f} {algbw * factor:7.2f} {0:6d}"

    for m in rows:
        lines.append(f"{int(m.size_bytes):12d} {int(m.size_bytes) // element_bytes:13d} "
                     f"{_TYPES[element_bytes]:>9} {_REDOP.get(collective, 'none'):>7} "
                     f"{-1:7d} {timed(m.time_us, m.size_bytes)} "
                     f"{timed(m.in_place_time_us, m.size_bytes)}")
    return "\n".join(lines) + "\n"


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
