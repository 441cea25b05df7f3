"""A sweep run: its combinations grouped into calls (``rows.group_key``), the calls of one
model structure (``rows.capture_key``) kept on one worker of a local process pool (or one Ray
task), so that each structure is captured once, the rows gathered in the combinations' order
and written as CSV or Parquet.

    rows = run_sweep(read_sweep("sweep.yaml"), workers=2)
    write_rows(rows, "results.csv")
"""

from __future__ import annotations

import csv
import multiprocessing
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from ..suggest import check_choice
from .rows import FIGURES, capture_key, group_key, run_group
from .spec import SweepSpec

__all__ = ["FORMATS", "columns", "run_sweep", "write_rows"]

FORMATS = (".csv", ".parquet")


def _init_worker() -> None:
    """A worker derives every step shape of a model from its base captures (``llm.step``)."""
    from ..llm.step import derive_steps

    derive_steps(True)


def _run_calls(kind: str, calls: Sequence[Sequence[Mapping[str, Any]]]
               ) -> list[list[dict[str, Any]]]:
    """One worker's calls, one after another: they share its captures."""
    return [run_group(kind, call) for call in calls]


def _task(kind: str, calls: Sequence[Sequence[Mapping[str, Any]]]) -> list[list[dict[str, Any]]]:
    _init_worker()
    return _run_calls(kind, calls)


def worker_tasks(kind: str, calls: Sequence[Sequence[Mapping[str, Any]]], workers: int
                 ) -> list[list[int]]:
    """The calls (their positions) each task runs: the calls of one model structure together,
    so that one worker captures it; where there are fewer structures than ``workers``, the
    largest task is halved until there are ``workers`` tasks (or one call each), its
    structure then captured by two workers at once.

    >>> a, b = {"tp": 1}, {"tp": 2}
    >>> worker_tasks("llm", [[a], [b], [a], [b]], 2)
    [[0, 2], [1, 3]]
    >>> worker_tasks("llm", [[a], [a], [a]], 2)
    [[0, 2], [1]]
    """
    by_key: dict[tuple[Any, ...], list[int]] = {}
    for i, call in enumerate(calls):
        by_key.setdefault(capture_key(kind, call[0]), []).append(i)
    tasks = list(by_key.values())
    while len(tasks) < workers:
        tasks.sort(key=len, reverse=True)
        if len(tasks[0]) < 2:
            break
        big = tasks.pop(0)
        tasks[:0] = [big[::2], big[1::2]]
    return tasks


def run_sweep(spec: SweepSpec, *, workers: int | None = None, ray: bool = False,
              ray_address: str | None = None) -> list[dict[str, Any]]:
    """Every combination's row, in the order ``spec.combinations()`` lists them: on
    ``workers`` local processes (None: one per CPU; 1: in this process), or as Ray tasks
    (``ray``; ``ray_address`` joins a running cluster, else Ray starts a local one)."""
    combos = spec.combinations()
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, c in enumerate(combos):
        groups.setdefault(group_key(spec.kind, c), []).append(i)
    calls = [[combos[i] for i in idx] for idx in groups.values()]
    results: list[list[dict[str, Any]]] = [[] for _ in calls]
    pool_size = workers or os.cpu_count() or 1
    if not (ray or ray_address) and pool_size == 1:
        from ..llm.step import derive_steps

        before = derive_steps(True)
        try:
            results = _run_calls(spec.kind, calls)
        finally:
            derive_steps(before)
    else:
        tasks = worker_tasks(spec.kind, calls, pool_size)
        jobs = [[calls[i] for i in task] for task in tasks]
        if ray or ray_address:
            done = _on_ray(spec.kind, jobs, ray_address)
        else:
            # spawned, not forked: a fork of a process that runs threads (torch's, a caller's)
            # can inherit a lock held by one of them and hang
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=pool_size, initializer=_init_worker,
                                     mp_context=context) as pool:
                done = list(pool.map(_run_calls, [spec.kind] * len(jobs), jobs))
        for task, out in zip(tasks, done, strict=True):
            for i, rows_of_call in zip(task, out, strict=True):
                results[i] = rows_of_call
    rows: list[dict[str, Any]] = [{} for _ in combos]
    for idx, result in zip(groups.values(), results):
        for i, row in zip(idx, result):
            rows[i] = row
    return rows


def _on_ray(kind: str, jobs: list[list[list[dict[str, Any]]]], address: str | None
            ) -> list[list[list[dict[str, Any]]]]:
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs Ray: pip install ray (from a checkout of torch_gemm_cost: "
                         "pip install -e '.[ray]'; or leave --ray "
                         "out: the local process pool)") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(_task)
        return list(ray.get([task.remote(kind, job) for job in jobs]))
    finally:
        if started:
            ray.shutdown()


def columns(kind: str, rows: Sequence[Mapping[str, Any]], options: Sequence[str]
            ) -> list[str]:
    """The options, the kind's figures, then ``error``."""
    return [*options, *FIGURES[kind], "error"]


def write_rows(rows: Sequence[Mapping[str, Any]], path: str | Path, cols: Sequence[str]) -> Path:
    """The rows as ``.csv`` or ``.parquet`` (which needs pyarrow), a column each of ``cols``
    (a row without one holds nothing there)."""
    out = Path(path)
    check_choice("output format", out.suffix, FORMATS)
    if not out.parent.exists():
        raise FileNotFoundError(f"--out {path}: directory {out.parent} does not exist")
    if out.suffix == ".csv":
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(cols), extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        return out
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"--out {path}: Parquet needs pyarrow (pip install pyarrow); or write "
                         f"{out.with_suffix('.csv')}") from None
    table = pa.table({c: [_cell(r.get(c)) for r in rows] for c in cols})
    pq.write_table(table, out)
    return out


def _cell(value: Any) -> Any:
    return None if value == "" else value
