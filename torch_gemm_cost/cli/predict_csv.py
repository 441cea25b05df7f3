"""``torch-gemm-cost predict-csv``: add ``predicted_ms`` to a CSV in any measured schema of
DATA.md: GEMMs (``gpu, op, dtype, batch, m, n, k``), non-GEMM ops (the vec schema: ``gpu, op,
dtype, rows, cols``), attention calls (``gpu, phase, batch, q_len, kv_len, heads, kv_heads,
head_dim, window, dtype, kv_dtype``) or collectives (the comm schema: ``gpu, collective,
num_gpus, size_bytes, dtype``), told apart by their columns.

Every input column and the row order are kept. Each row is read by its schema's reader in
``measured`` and priced by that schema's measured-row path, as the library prices measured
rows: what the row's time holds beyond the kernel (launch overhead by ``timing``, vLLM's fp8
input cast on aiconfigurator's rows, warm re-runs, Vidur's true bytes) is decided there, not
here. ``predicted_ms`` is written in full precision. A malformed row stops the run with the
line and column named (exit 2); with ``--skip-bad`` it gets an ``error`` column instead and no
prediction, as does a collective the model cannot price. Rows with ``batch`` 0 cost 0 ms.
``--interval LEVEL`` adds ``predicted_lo_ms`` and ``predicted_hi_ms`` to GEMM rows
(``predict/intervals.py``) and to attention rows (the attention model's held-out residual
quantiles, ``AttentionIntervals``); vec and comm rows have no calibration.

A ``gpu`` is looked up in a calibration profile's device (``--device-profile``), then in the
catalog, then among the records of ``--device-spec FILE`` (a spec file: one gpus.json record or
a list of them) by id, name or alias: a spec file describes the GPUs the catalog lacks.
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..measured.table import RowError, Table, open_text, read_table
from . import UsageError

if TYPE_CHECKING:
    from ..hardware.catalog import DeviceSpec
    from ..hardware.target import Target
    from ..predict.base import Predictor

logger = logging.getLogger(__name__)

# schema -> its required columns, in the order a file's columns are matched against them
SCHEMAS: dict[str, tuple[str, ...]] = {
    "attention": ("gpu", "phase", "batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim",
                  "window", "dtype", "kv_dtype"),
    "comm": ("gpu", "collective", "num_gpus", "size_bytes", "dtype"),
    "gemm": ("gpu", "op", "dtype", "batch", "m", "n", "k"),
    "vec": ("gpu", "op", "dtype", "rows", "cols"),
}
_NAMES = ", ".join(SCHEMAS["gemm"])


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict-csv",
        help="add predicted_ms to a CSV of GEMMs (gpu, op, dtype, batch, m, n, k), ops (gpu, "
             "op, dtype, rows, cols), attention calls (gpu, phase, batch, q_len, kv_len, ...) "
             "or collectives (gpu, collective, num_gpus, size_bytes, dtype)",
        description="Keep every column and the row order of IN and add predicted_ms.",
    )
    p.add_argument("input", metavar="IN", help="CSV or .csv.gz in the measured-data schema")
    p.add_argument("--out", required=True, metavar="OUT", help="output CSV (.csv.gz compresses)")
    p.add_argument("--weights", metavar="W", help="hybrid predictor weights (JSON)")
    p.add_argument(
        "--device-profile", metavar="P",
        help="calibration profile JSON; rows whose gpu names its device use it",
    )
    p.add_argument(
        "--device-spec", metavar="FILE",
        help="spec file (gpus.json records); rows whose gpu the catalog lacks use its records",
    )
    p.add_argument(
        "--skip-bad", action="store_true",
        help="write an error column for malformed rows instead of stopping",
    )
    p.add_argument(
        "--interval", type=float, default=None, metavar="LEVEL",
        help="also write predicted_lo_ms and predicted_hi_ms, the bounds the measured time "
             "falls between with probability LEVEL (e.g. 0.8)",
    )
    p.set_defaults(run=run)


def _read(path: Path) -> tuple[Table, str]:
    """The file's rows and its schema; a UsageError naming what is wrong with the file."""
    try:
        table = read_table(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except ValueError as e:
        if not path.stat().st_size:
            raise UsageError(f"{path}: empty file; expected a header naming {_NAMES}") from None
        raise UsageError(str(e)) from None
    schema = _schema_of(table.header)
    missing = [c for c in SCHEMAS[schema] if c not in table.header]
    if missing:
        others = "; ".join(f"{name}: {', '.join(cols)}" for name, cols in SCHEMAS.items()
                           if name != schema)
        raise UsageError(f"{path} line 1: missing column(s) {', '.join(missing)}; "
                         f"required: {', '.join(SCHEMAS[schema])} (other schemas: {others})")
    return table, schema


def _schema_of(header: Sequence[str]) -> str:
    """The schema whose required columns the header holds, else the one it comes closest to
    (most columns present; GEMM on a tie)."""
    for name, cols in SCHEMAS.items():
        if all(c in header for c in cols):
            return name
    return max(("gemm", "attention", "vec", "comm"),
               key=lambda n: sum(c in header for c in SCHEMAS[n]))


class _Targets:
    """gpu column value -> its ``Target``: a profile's device names win, then
    ``resolve_target`` (the catalog), then the spec file's records by id, name or alias (the
    GPUs the catalog lacks)."""

    def __init__(self, profile: str | None, spec_file: str | None = None) -> None:
        from ..hardware.catalog import _norm, get_device
        from ..hardware.datasheet import load_spec_file
        from ..hardware.target import Target, resolve_target

        self._cache: dict[str, Target | str] = {}
        if profile is not None:
            target = resolve_target(Path(profile))
            for name in (target.spec.id, target.spec.name, *target.spec.aliases):
                self._cache[name] = target
        self._specs: dict[str, Target] = {}
        self._spec_file = spec_file
        for spec in load_spec_file(spec_file) if spec_file is not None else []:
            try:
                known = get_device(spec.id)
            except ValueError:
                known = None
            if known is not None:
                logger.warning("%s: record %r is the catalog's %s; rows naming it use the "
                               "catalog", spec_file, spec.id, known.id)
                continue
            for name in (spec.id, spec.name, *spec.aliases):
                self._specs.setdefault(_norm(name), Target(spec, f"spec file {spec_file}"))

    def get(self, gpu: str) -> Target | str:
        """The row's target, or the catalog's error message (its close matches) for an unknown
        device."""
        from ..hardware.catalog import _norm
        from ..hardware.target import resolve_target

        hit = self._cache.get(gpu)
        if hit is None:
            try:
                hit = resolve_target(gpu.strip())
            except (ValueError, FileNotFoundError) as e:
                found = self._specs.get(_norm(gpu))
                if found is not None:
                    hit = found
                elif self._spec_file is not None:
                    hit = f"{e} Nor does --device-spec {self._spec_file} name it."
                else:
                    hit = str(e)
            self._cache[gpu] = hit
        return hit


@dataclass
class _Priced:
    """Each row's predicted time, each bad row's error, and with ``--interval`` the bounds."""

    times: list[float | None]
    errors: dict[int, str] = field(default_factory=dict)
    spans: dict[int, tuple[float, float]] = field(default_factory=dict)


def _targets_of(table: Table, targets: _Targets, priced: _Priced
                ) -> dict[str, tuple[Target, list[int]]]:
    """Rows grouped by device; rows of the wrong length or an unknown gpu go to the errors."""
    groups: dict[str, tuple[Target, list[int]]] = {}
    gpus = table.column("gpu")
    for i, row in enumerate(table.rows):
        if len(row) != len(table.header):
            priced.errors[i] = f"expected {len(table.header)} fields, got {len(row)}"
            continue
        hit = targets.get(gpus[i])
        if isinstance(hit, str):
            priced.errors[i] = f"column 'gpu': {hit}"
            continue
        groups.setdefault(hit.spec.id, (hit, []))[1].append(i)
    return groups


def _good(read: Callable[[list[int]], Any], idx: list[int], errors: dict[int, str]) -> list[int]:
    """Rows of ``idx`` that ``read`` takes; each bad row's message goes to ``errors``.

    Bisects failing groups, so a few bad rows in a large file cost a few dozen batched reads.
    """
    try:
        read(idx)
        return idx
    except RowError as e:
        if len(idx) == 1:
            errors[idx[0]] = e.detail
            return []
    half = len(idx) // 2
    return _good(read, idx[:half], errors) + _good(read, idx[half:], errors)


def _read_rows(read: Callable[[list[int]], Any], idx: list[int], priced: _Priced
               ) -> tuple[list[int], Any]:
    """The rows of ``idx`` that read cleanly, and their records (None where none did)."""
    try:
        return idx, read(idx)
    except RowError:
        good = _good(read, idx, priced.errors)
        return good, (read(good) if good else None)


def _gemm_reader(table: Table, spec: DeviceSpec) -> Callable[[list[int]], Any]:
    """Reads GEMM rows on ``spec``, refusing a dtype the device cannot run."""
    from ..hardware.catalog import check_dtype_on_device
    from ..hardware.dtypes import resolve_dtype
    from ..measured.gemm import read_gemms

    def read(idx: list[int]) -> Any:
        rows = read_gemms(table, idx, device=spec, timed=False)
        first: dict[str, int] = {}
        for j, text in enumerate(table.column("dtype", idx)):
            first.setdefault(text, j)
        for text, j in first.items():
            try:
                check_dtype_on_device(spec, resolve_dtype(text))
            except ValueError as e:
                detail = f"column 'dtype': {e}"
                raise RowError(f"{table.where(idx[j])}: {detail}", idx[j], detail) from None
        return rows

    return read


def _predict_gemm(table: Table, targets: _Targets, weights: Predictor | None,
                  interval: float | None, priced: _Priced) -> None:
    from ..measured.gemm import gemm_times_ms
    from ..predict import default_predictor
    from ..predict.intervals import uncertainty_of
    from ..predict.profile import profile_predictor

    fallback = weights or default_predictor()
    for target, idx in _targets_of(table, targets, priced).values():
        spec = target.spec
        idx, rows = _read_rows(_gemm_reader(table, spec), idx, priced)
        if rows is None:
            continue
        predictor = weights or profile_predictor(target) or fallback
        time_ms = gemm_times_ms(rows, predictor)
        if not bool(torch.isfinite(time_ms).all()):
            bad = idx[int(torch.nonzero(~torch.isfinite(time_ms))[0])]
            raise RuntimeError(f"predictor {predictor.name} gave a non-finite time for "
                               f"{table.path} line {table.lines[bad]}")
        for i, t in zip(idx, time_ms.tolist()):
            priced.times[i] = t
        if interval is None:
            continue
        unc = uncertainty_of(rows.gemms, spec, predictor)
        if unc is None:
            logger.warning("no interval calibration covers predictor %s v%s; its rows get no "
                           "predicted_lo_ms/predicted_hi_ms", predictor.name, predictor.version)
            continue
        lo, hi = unc.gemm_bounds(time_ms, interval)
        for i, a, b in zip(idx, lo.tolist(), hi.tolist()):
            priced.spans[i] = (a, b)


def _predict_vec(table: Table, targets: _Targets, priced: _Priced) -> None:
    from ..measured.vec import read_vec, vec_times_ms

    for target, idx in _targets_of(table, targets, priced).values():
        spec = target.spec
        idx, rows = _read_rows(partial(read_vec, table, device=spec, timed=False), idx, priced)
        if rows is not None:
            for i, t in zip(idx, vec_times_ms(rows).tolist()):
                priced.times[i] = t


def _predict_attention(table: Table, targets: _Targets, interval: float | None,
                       priced: _Priced) -> None:
    from ..measured.attention import read_attention
    from ..predict.attention import AttentionPredictor

    predictor = AttentionPredictor.shipped()
    for target, idx in _targets_of(table, targets, priced).values():
        spec = target.spec
        idx, rows = _read_rows(partial(read_attention, table, device=spec, timed=False), idx,
                               priced)
        if rows is None:
            continue
        time_ms = predictor.predict_measured(rows)
        for i, t in zip(idx, time_ms.tolist()):
            priced.times[i] = t
        if interval is not None:
            lo, hi = predictor.bounds(time_ms, rows.calls.decode, interval)
            for i, a, b in zip(idx, lo.tolist(), hi.tolist()):
                priced.spans[i] = (a, b)


def _predict_comm(table: Table, targets: _Targets, priced: _Priced) -> None:
    from ..measured.comm import comm_call, comm_times_ms, read_comm

    rows_of: list[int] = []
    calls, devices = [], []
    for target, idx in _targets_of(table, targets, priced).values():
        spec = target.spec
        idx, rows = _read_rows(partial(read_comm, table, device=spec, timed=False), idx, priced)
        for i, row in zip(idx, rows or []):
            try:
                calls.append(comm_call(row, spec))
            except ValueError as e:
                priced.errors[i] = str(e)
                continue
            devices.append(spec)
            rows_of.append(i)
    if calls:
        for i, t in zip(rows_of, comm_times_ms(calls, devices).tolist()):
            priced.times[i] = t


def _ms(t: float) -> str:
    """The shortest text that reads back as ``t`` exactly (``0`` for zero)."""
    return repr(t).removesuffix(".0")


def _rows_out(table: Table, priced: _Priced, skip_bad: bool, interval: bool
              ) -> Iterator[Sequence[str]]:
    header = list(table.header)
    extra = ["predicted_ms"] + (["error"] if skip_bad else [])
    if interval:
        extra += ["predicted_lo_ms", "predicted_hi_ms"]
    slots = []
    for name in extra:
        if name not in header:
            header.append(name)
        slots.append(header.index(name))
    yield header
    for i, row in enumerate(table.rows):
        out = list(row) + [""] * (len(header) - len(row))
        t = priced.times[i]
        out[slots[0]] = "" if t is None else _ms(t)
        if skip_bad:
            out[slots[1]] = priced.errors.get(i, "")
        if interval:
            span = priced.spans.get(i)
            out[slots[-2]] = "" if span is None else _ms(span[0])
            out[slots[-1]] = "" if span is None else _ms(span[1])
        yield out


def run(args: argparse.Namespace) -> int:
    path = Path(args.input)
    out_path = Path(args.out)
    weights_predictor = None
    if args.weights is not None:
        from ..predict.query import load_weights

        if not Path(args.weights).is_file():
            raise UsageError(f"--weights {args.weights}: no such file")
        weights_predictor = load_weights(args.weights)
    if args.device_profile is not None and not Path(args.device_profile).is_file():
        raise UsageError(f"--device-profile {args.device_profile}: no such file")
    if args.device_spec is not None and not Path(args.device_spec).is_file():
        raise UsageError(f"--device-spec {args.device_spec}: no such file")
    if args.interval is not None:
        from ..predict.intervals import check_level

        try:
            check_level(args.interval, "--interval")
        except ValueError as e:
            raise UsageError(str(e)) from None
    table, schema = _read(path)
    if args.interval is not None and schema in ("vec", "comm"):
        raise UsageError(f"--interval: intervals are calibrated for GEMM and attention rows; "
                         f"{path} holds {schema} rows")
    priced = _Priced([None] * len(table))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        targets = _Targets(args.device_profile, args.device_spec)
        if schema == "gemm":
            _predict_gemm(table, targets, weights_predictor, args.interval, priced)
        elif schema == "vec":
            _predict_vec(table, targets, priced)
        elif schema == "attention":
            _predict_attention(table, targets, args.interval, priced)
        else:
            _predict_comm(table, targets, priced)
    errors = priced.errors
    if errors and not args.skip_bad:
        first = min(errors)
        raise UsageError(f"{path} line {table.lines[first]}: {errors[first]}")
    for message in dict.fromkeys(str(w.message) for w in caught):
        logger.warning("%s", message)
    if errors:
        logger.warning("%s: %d of %d rows were malformed; see the error column", path,
                       len(errors), len(table))
    tmp = out_path.with_name(".tmp-" + out_path.name)  # the same suffix: .gz compresses
    try:
        with open_text(tmp, "w") as fh:
            rows = _rows_out(table, priced, args.skip_bad, args.interval is not None)
            csv.writer(fh, lineterminator="\n").writerows(rows)
        os.replace(tmp, out_path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"--out {out_path}: cannot write ({e.strerror or e})") from None
    logger.info("%s: %d rows predicted -> %s", path, len(table) - len(errors), out_path)
    return 0
