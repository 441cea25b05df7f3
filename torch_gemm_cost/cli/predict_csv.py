"""``torch-gemm-cost predict-csv``: add ``predicted_ms`` to a CSV of GEMMs in the DATA.md schema.

Every input column and the row order are kept. Rows are grouped by ``gpu`` (and by ``timing``
and ``source`` where the file has them and the predictor takes them: launch overhead depends on
how the time was measured), and each group is predicted in one batched call. A malformed row
stops the run with the line and column named (exit 2); with ``--skip-bad`` it gets an ``error``
column instead and no prediction. Rows with ``batch`` 0 cost 0 ms.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import inspect
import logging
import os
import typing
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union

import torch

from . import UsageError

if TYPE_CHECKING:
    from ..devices import DeviceSpec
    from ..gemms.records import GemmBatch
    from ..predict.base import Predictor

logger = logging.getLogger(__name__)

REQUIRED: tuple[str, ...] = ("gpu", "op", "dtype", "batch", "m", "n", "k")
_NAMES = ", ".join(REQUIRED)
# DATA.md's methods, plus calibrate's "wall" (perf_counter around the call: host dispatch
# included, as with "event"); "" = the predictor's default
TIMINGS: tuple[str, ...] = ("", "event", "kernel", "table", "wall")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict-csv",
        help="add predicted_ms to a CSV of GEMMs (columns gpu, op, dtype, batch, m, n, k)",
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
        "--skip-bad", action="store_true",
        help="write an error column for malformed rows instead of stopping",
    )
    p.add_argument(
        "--interval", type=float, default=None, metavar="LEVEL",
        help="also write predicted_lo_ms and predicted_hi_ms, the bounds the measured time "
             "falls between with probability LEVEL (e.g. 0.8)",
    )
    p.set_defaults(run=run)


@dataclass
class _Table:
    header: list[str]
    rows: list[list[str]]
    lines: list[int]  # file line where each row starts (the header is line 1)


def _open_text(path: Path, mode: str, gz: bool) -> typing.IO[str]:
    if gz:
        text_mode: typing.Literal["rt", "wt"] = "wt" if mode == "w" else "rt"
        return gzip.open(path, text_mode, encoding="utf-8", newline="")
    return open(path, mode, encoding="utf-8", newline="")


def _read(path: Path) -> _Table:
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    rows: list[list[str]] = []
    lines: list[int] = []
    line = 1
    try:
        with _open_text(path, "r", path.name.endswith(".gz")) as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header:
                raise UsageError(f"{path}: empty file; expected a header naming {_NAMES}")
            header = [h.strip() for h in header]
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise UsageError(
                    f"{path} line 1: missing column(s) {', '.join(missing)}; "
                    f"required: {_NAMES}"
                )
            line = reader.line_num + 1
            for row in reader:
                if row:
                    rows.append(row)
                    lines.append(line)
                line = reader.line_num + 1
    except (UnicodeDecodeError, EOFError, OSError, csv.Error) as e:
        raise UsageError(
            f"{path} line {line}: unreadable as CSV text ({type(e).__name__}: {e})"
        ) from None
    return _Table(header, rows, lines)


_Target = tuple["DeviceSpec", Union["Predictor", None]]


class _Targets:
    """gpu column value -> (DeviceSpec, Predictor | None); a profile's device names win."""

    def __init__(self, profile: str | None) -> None:
        from ..predict.query import resolve_target

        self._cache: dict[str, _Target | str] = {}
        if profile is not None:
            spec, pred = resolve_target(Path(profile))
            for name in (spec.id, spec.name, *spec.aliases):
                self._cache[name] = (spec, pred)

    def get(self, gpu: str) -> _Target | str:
        """(spec, predictor), or the catalog's error message for an unknown device."""
        from ..devices import get_device

        hit = self._cache.get(gpu)
        if hit is None:
            try:
                hit = (get_device(gpu.strip()), None)
            except ValueError as e:
                hit = str(e)
            self._cache[gpu] = hit
        return hit


# a group: one device, and the timing method and source where the file gives them
_Key = tuple[str, str, str]


def _group_rows(
    table: _Table, targets: _Targets, errors: dict[int, str]
) -> dict[_Key, tuple[_Target, list[int]]]:
    col = {c: table.header.index(c) for c in ("gpu", "timing", "source") if c in table.header}
    groups: dict[_Key, tuple[_Target, list[int]]] = {}
    for i, row in enumerate(table.rows):
        if len(row) != len(table.header):
            errors[i] = f"expected {len(table.header)} fields, got {len(row)}"
            continue
        hit = targets.get(row[col["gpu"]])
        if isinstance(hit, str):
            errors[i] = f"column 'gpu': {hit}"
            continue
        timing = row[col["timing"]].strip() if "timing" in col else ""
        if timing not in TIMINGS:
            errors[i] = f"column 'timing': unknown {timing!r}; known: {', '.join(TIMINGS[1:])}"
            continue
        source = row[col["source"]].strip() if "source" in col else ""
        groups.setdefault((hit[0].id, timing, source), (hit, []))[1].append(i)
    return groups


def _context(predictor: Predictor, timing: str, source: str) -> dict[str, str]:
    """The ``timing``/``source`` keywords the predictor's ``predict`` takes, where given."""
    from ..calibrate.timing import PREDICTOR_TIMING

    params = inspect.signature(predictor.predict).parameters
    given = {"timing": PREDICTOR_TIMING.get(timing, timing), "source": source}
    return {k: v for k, v in given.items() if v and k in params}


def _columns(table: _Table, idx: list[int]) -> dict[str, list[str]]:
    """The GEMM columns of rows ``idx``, as ``gemm_batch_from_columns`` takes them."""
    cols: dict[str, list[str]] = {}
    for name in ("op", "dtype", "batch", "m", "n", "k", "layout", "bias"):
        if name in table.header:
            j = table.header.index(name)
            cols[name] = [table.rows[i][j] for i in idx]
    return cols


def _check_group(table: _Table, idx: list[int], spec: DeviceSpec) -> GemmBatch:
    """A GemmBatch of rows ``idx`` on ``spec``, or a ValueError for the first bad row."""
    from ..dtypes import resolve_dtype
    from ..gemms.measured import gemm_batch_from_columns
    from ..predict.query import check_dtype_on_device

    cols = _columns(table, idx)
    names = [f"line {table.lines[i]}" for i in idx]
    gemms = gemm_batch_from_columns(**cols, row_names=names)
    for dim in ("m", "n", "k"):
        bad = torch.nonzero(getattr(gemms, dim) < 1).flatten()
        if len(bad):
            j = int(bad[0])
            raise ValueError(f"{names[j]}, column {dim!r}: expected a positive integer, got "
                             f"{cols[dim][j]!r}")
    first_row: dict[str, int] = {}
    for j, text in enumerate(cols["dtype"]):
        first_row.setdefault(text, j)
    for text, j in first_row.items():
        try:
            check_dtype_on_device(spec, resolve_dtype(text))
        except ValueError as e:
            raise ValueError(f"{names[j]}, column 'dtype': {e}") from None
    return gemms


def _good_rows(
    table: _Table, idx: list[int], spec: DeviceSpec, errors: dict[int, str]
) -> list[int]:
    """Rows of ``idx`` that pass ``_check_group``; each bad row's message goes to ``errors``.

    Bisects failing groups, so a few bad rows in a large file cost a few dozen batched checks.
    """
    try:
        _check_group(table, idx, spec)
        return idx
    except ValueError as e:
        if len(idx) == 1:
            errors[idx[0]] = str(e).removeprefix(f"line {table.lines[idx[0]]}, ")
            return []
    half = len(idx) // 2
    left = _good_rows(table, idx[:half], spec, errors)
    return left + _good_rows(table, idx[half:], spec, errors)


def _predict_groups(
    table: _Table, targets: _Targets, weights_predictor: Predictor | None, skip_bad: bool,
    path: Path, interval: float | None = None,
    spans: dict[int, tuple[float, float]] | None = None,
) -> tuple[list[float | None], dict[int, str]]:
    """Each row's predicted time and each malformed row's error; with ``interval``, each
    row's (lo, hi) at that level goes to ``spans`` (rows no calibration covers are left out)."""
    from ..predict import default_predictor
    from ..predict.intervals import uncertainty_of

    errors: dict[int, str] = {}
    times: list[float | None] = [None] * len(table.rows)
    batches: dict[_Key, tuple[_Target, list[int], GemmBatch]] = {}
    for key, (target, idx) in _group_rows(table, targets, errors).items():
        try:
            batches[key] = (target, idx, _check_group(table, idx, target[0]))
        except ValueError:
            good = _good_rows(table, idx, target[0], errors)
            if good:
                batches[key] = (target, good, _check_group(table, good, target[0]))
    if errors and not skip_bad:
        first = min(errors)
        raise UsageError(f"{path} line {table.lines[first]}: {errors[first]}")
    fallback = weights_predictor or default_predictor()
    for (_, timing, source), ((spec, profile_predictor), idx, gemms) in batches.items():
        predictor = weights_predictor or profile_predictor or fallback
        context = _context(predictor, timing, source)
        live = gemms.batch > 0  # (N,) zero-size batches cost nothing
        time_ms = torch.zeros(len(gemms), dtype=torch.float64)
        if bool(live.all()):
            time_ms = predictor.predict(gemms, spec, **context).time_ms.to(torch.float64)
        elif bool(live.any()):
            sub = gemms.select(live)
            time_ms[live] = predictor.predict(sub, spec, **context).time_ms.to(torch.float64)
        if not bool(torch.isfinite(time_ms).all()):
            bad = idx[int(torch.nonzero(~torch.isfinite(time_ms))[0])]
            raise RuntimeError(
                f"predictor {predictor.name} gave a non-finite time for {path} line "
                f"{table.lines[bad]}"
            )
        for i, t in zip(idx, time_ms.tolist()):
            times[i] = t
        if interval is not None and spans is not None:
            unc = uncertainty_of(gemms, spec, predictor)
            if unc is None:
                logger.warning("no interval calibration covers predictor %s v%s; its rows get "
                               "no predicted_lo_ms/predicted_hi_ms", predictor.name,
                               predictor.version)
                continue
            lo, hi = unc.gemm_bounds(time_ms, interval)
            for i, a, b in zip(idx, lo.tolist(), hi.tolist()):
                spans[i] = (a, b)
    return times, errors


def _rows_out(
    table: _Table, times: list[float | None], errors: dict[int, str], skip_bad: bool,
    spans: dict[int, tuple[float, float]] | None = None,
) -> Iterator[list[str]]:
    header = list(table.header)
    extra = ["predicted_ms"] + (["error"] if skip_bad else [])
    if spans is not None:
        extra += ["predicted_lo_ms", "predicted_hi_ms"]
    slots = []
    for name in extra:
        if name not in header:
            header.append(name)
        slots.append(header.index(name))
    yield header
    for i, row in enumerate(table.rows):
        out = list(row) + [""] * (len(header) - len(row))
        out[slots[0]] = "" if times[i] is None else f"{times[i]:.6g}"
        if skip_bad:
            out[slots[1]] = errors.get(i, "")
        if spans is not None:
            span = spans.get(i)
            out[slots[-2]] = "" if span is None else f"{span[0]:.6g}"
            out[slots[-1]] = "" if span is None else f"{span[1]:.6g}"
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
    spans: dict[int, tuple[float, float]] | None = None
    if args.interval is not None:
        from ..predict.intervals import check_level

        try:
            check_level(args.interval, "--interval")
        except ValueError as e:
            raise UsageError(str(e)) from None
        spans = {}
    targets = _Targets(args.device_profile)
    table = _read(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        times, errors = _predict_groups(table, targets, weights_predictor, args.skip_bad, path,
                                        args.interval, spans)
    for message in dict.fromkeys(str(w.message) for w in caught):
        logger.warning("%s", message)
    if errors:
        logger.warning("%s: %d of %d rows were malformed; see the error column", path,
                       len(errors), len(table.rows))
    tmp = out_path.with_name(out_path.name + ".tmp")
    try:
        with _open_text(tmp, "w", out_path.name.endswith(".gz")) as fh:
            rows = _rows_out(table, times, errors, args.skip_bad, spans)
            csv.writer(fh, lineterminator="\n").writerows(rows)
        os.replace(tmp, out_path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"--out {out_path}: cannot write ({e.strerror or e})") from None
    logger.info("%s: %d rows predicted -> %s", path, len(table.rows) - len(errors), out_path)
    return 0
