"""``torch-gemm-cost predict-csv``: add ``predicted_ms`` to a CSV in any measured schema of
DATA.md: GEMMs (``gpu, op, dtype, batch, m, n, k``), non-GEMM ops (the vec schema: ``gpu, op,
dtype, rows, cols``) or attention calls (``gpu, phase, batch, q_len, kv_len, heads, kv_heads,
head_dim, window, dtype, kv_dtype``), told apart by their columns.

Every input column and the row order are kept. GEMM rows are grouped by ``gpu`` (and by
``timing`` and ``source`` where the file has them and the predictor takes them: launch overhead
depends on how the time was measured), and each group is predicted in one batched call. A vec
row is priced as measured: NeuSight's ops (``predict.ops.VEC_OPS``) as event-timed kernels of
their class, vidur's fused ops (``predict.ops.FUSED_OPS``, ``add3``) as kernel-timed fused
kernels; ``add`` and ``gelu``, which both measured, follow the ``source`` column, else the
dtype (16-bit: vidur's). An attention row is priced by the fused-attention model re-run on warm
buffers, as measured, with the kernel its ``kernel`` column names where it has one (else what
vLLM runs on the GPU); prefill rows are causal, and each row is vLLM's attention forward as
the attention schema measures it, the write of its new tokens' K and V into the paged cache
included (``AttentionCall.cache_write``). A malformed row stops the run with the line and
column named (exit 2); with ``--skip-bad`` it gets an ``error`` column instead and no
prediction. Rows with ``batch`` 0 cost 0 ms. ``--interval LEVEL`` adds ``predicted_lo_ms`` and
``predicted_hi_ms`` to GEMM rows (``predict/intervals.py``) and to attention rows (the attention
model's held-out residual quantiles, ``AttentionIntervals``); vec rows have no calibration.

A ``gpu`` is looked up in a calibration profile's device (``--device-profile``), then in the
catalog, then among the records of ``--device-spec FILE`` (a spec file: one gpus.json record or
a list of them) by id, name or alias: a spec file describes the GPUs the catalog lacks.
"""

from __future__ import annotations

import argparse
import csv
import difflib
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
VEC_REQUIRED: tuple[str, ...] = ("gpu", "op", "dtype", "rows", "cols")
ATTENTION_REQUIRED: tuple[str, ...] = ("gpu", "phase", "batch", "q_len", "kv_len", "heads",
                                       "kv_heads", "head_dim", "window", "dtype", "kv_dtype")
# schema -> its required columns, in the order a file's columns are matched against them
SCHEMAS: dict[str, tuple[str, ...]] = {"attention": ATTENTION_REQUIRED, "gemm": REQUIRED,
                                       "vec": VEC_REQUIRED}
_NAMES = ", ".join(REQUIRED)
# DATA.md's methods, plus calibrate's "wall" (perf_counter around the call: host dispatch
# included, as with "event"); "" = the predictor's default
TIMINGS: tuple[str, ...] = ("", "event", "kernel", "table", "wall")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict-csv",
        help="add predicted_ms to a CSV of GEMMs (gpu, op, dtype, batch, m, n, k), ops (gpu, "
             "op, dtype, rows, cols) or attention calls (gpu, phase, batch, q_len, kv_len, ...)",
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


@dataclass
class _Table:
    header: list[str]
    rows: list[list[str]]
    lines: list[int]  # file line where each row starts (the header is line 1)
    schema: str = "gemm"  # a key of SCHEMAS


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
            schema = _schema_of(header)
            missing = [c for c in SCHEMAS[schema] if c not in header]
            if missing:
                others = "; ".join(f"{name}: {', '.join(cols)}" for name, cols in SCHEMAS.items()
                                   if name != schema)
                raise UsageError(
                    f"{path} line 1: missing column(s) {', '.join(missing)}; "
                    f"required: {', '.join(SCHEMAS[schema])} (other schemas: {others})"
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
    return _Table(header, rows, lines, schema)


def _schema_of(header: list[str]) -> str:
    """The schema whose required columns the header holds, else the one it comes closest to
    (most columns present; GEMM on a tie)."""
    for name, cols in SCHEMAS.items():
        if all(c in header for c in cols):
            return name
    return max(("gemm", "attention", "vec"), key=lambda n: sum(c in header for c in SCHEMAS[n]))


_Target = tuple["DeviceSpec", Union["Predictor", None]]


class _Targets:
    """gpu column value -> (DeviceSpec, Predictor | None): a profile's device names win, then
    the catalog, then the spec file's records (for the GPUs the catalog lacks)."""

    def __init__(self, profile: str | None, spec_file: str | None = None) -> None:
        from ..datasheet import load_spec_file
        from ..devices import _norm, get_device
        from ..predict.query import resolve_target

        self._cache: dict[str, _Target | str] = {}
        if profile is not None:
            spec, pred = resolve_target(Path(profile))
            for name in (spec.id, spec.name, *spec.aliases):
                self._cache[name] = (spec, pred)
        self._specs: dict[str, DeviceSpec] = {}
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
                self._specs.setdefault(_norm(name), spec)

    def get(self, gpu: str) -> _Target | str:
        """(spec, predictor), or the catalog's error message for an unknown device."""
        from ..devices import _norm, get_device

        hit = self._cache.get(gpu)
        if hit is None:
            try:
                hit = (get_device(gpu.strip()), None)
            except ValueError as e:
                spec = self._specs.get(_norm(gpu))
                if spec is not None:
                    hit = (spec, None)
                elif self._spec_file is not None:
                    hit = f"{e} Nor does --device-spec {self._spec_file} name it."
                else:
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


def _cell(table: _Table, i: int, col: str) -> str:
    return table.rows[i][table.header.index(col)].strip() if col in table.header else ""


def _int_cell(table: _Table, i: int, col: str, lowest: int) -> int:
    text = _cell(table, i, col)
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"column {col!r}: expected an integer, got {text!r}") from None
    if value < lowest:
        raise ValueError(f"column {col!r}: expected an integer ≥ {lowest}, got {value}")
    return value


def _by_device(table: _Table, targets: _Targets, errors: dict[int, str]
               ) -> dict[str, tuple[DeviceSpec, list[int]]]:
    """Rows grouped by device; rows of the wrong length or an unknown gpu go to ``errors``."""
    groups: dict[str, tuple[DeviceSpec, list[int]]] = {}
    for i, row in enumerate(table.rows):
        if len(row) != len(table.header):
            errors[i] = f"expected {len(table.header)} fields, got {len(row)}"
            continue
        hit = targets.get(_cell(table, i, "gpu"))
        if isinstance(hit, str):
            errors[i] = f"column 'gpu': {hit}"
            continue
        groups.setdefault(hit[0].id, (hit[0], []))[1].append(i)
    return groups


def _predict_vec(table: _Table, targets: _Targets) -> tuple[list[float | None], dict[int, str]]:
    """Vec rows: every op of DATA.md's vec files, as measured (see the module docstring)."""
    from ..dtypes import resolve_dtype
    from ..predict.ops import FUSED_ALIASES, FUSED_OPS, VEC_OPS, measured_op_times_ms

    errors: dict[int, str] = {}
    times: list[float | None] = [None] * len(table.rows)
    fused_names = set(FUSED_OPS) | set(FUSED_ALIASES)
    known = sorted(set(VEC_OPS) | fused_names)
    for spec, idx in _by_device(table, targets, errors).values():
        good: list[tuple[int, str, int, int, int, bool]] = []
        for i in idx:
            op = _cell(table, i, "op")
            try:
                if op not in known:
                    close = difflib.get_close_matches(op, known, n=1, cutoff=0.0)
                    raise ValueError(f"column 'op': unknown op {op!r}; did you mean "
                                     f"{close[0]!r}?")
                try:
                    cd = resolve_dtype(_cell(table, i, "dtype"))
                except ValueError as e:
                    raise ValueError(f"column 'dtype': {e}") from None
                r, c = _int_cell(table, i, "rows", 0), _int_cell(table, i, "cols", 0)
            except ValueError as e:
                errors[i] = str(e)
                continue
            source = _cell(table, i, "source")
            fused = op not in VEC_OPS or (op in fused_names and (
                source == "vidur" if source else cd.in_bytes == 2))
            good.append((i, op, cd.in_bytes, r, c, fused))
        if good:
            t_ms = measured_op_times_ms([g[1] for g in good], [g[2] for g in good],
                                        [g[3] for g in good], [g[4] for g in good],
                                        [g[5] for g in good], spec)
            for g, t in zip(good, t_ms):
                times[g[0]] = t
    return times, errors


def _predict_attention(table: _Table, targets: _Targets, interval: float | None = None,
                       spans: dict[int, tuple[float, float]] | None = None,
                       ) -> tuple[list[float | None], dict[int, str]]:
    """Attention rows, prefill causal, re-run warm as measured (see the module docstring);
    with ``interval``, each row's (lo, hi) at that level goes to ``spans`` (the attention
    model's held-out residual quantiles, ``AttentionPredictor.bounds``)."""
    from ..predict.attention import AttentionBatch, AttentionCall, AttentionPredictor
    from ..predict.attention_measured import KERNEL_OF

    errors: dict[int, str] = {}
    times: list[float | None] = [None] * len(table.rows)
    predictor = AttentionPredictor.shipped()
    for spec, idx in _by_device(table, targets, errors).values():
        calls: list[tuple[int, AttentionCall]] = []
        for i in idx:
            kernel = _cell(table, i, "kernel")
            try:
                if kernel and kernel not in KERNEL_OF:
                    close = difflib.get_close_matches(kernel, sorted(KERNEL_OF), n=1, cutoff=0.0)
                    raise ValueError(f"column 'kernel': unknown kernel {kernel!r}; did you mean "
                                     f"{close[0]!r}?")
                size = {c: _int_cell(table, i, c, 0 if c == "window" else 1)
                        for c in ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim",
                                  "window")}
                calls.append((i, AttentionCall(
                    phase=_cell(table, i, "phase"), batch=size["batch"], q_len=size["q_len"],
                    kv_len=size["kv_len"], heads=size["heads"], kv_heads=size["kv_heads"],
                    head_dim=size["head_dim"], window=size["window"],
                    dtype=_cell(table, i, "dtype"), kv_dtype=_cell(table, i, "kv_dtype"),
                    kernel=KERNEL_OF.get(kernel, "auto"))))
            except ValueError as e:
                errors[i] = str(e)
        if calls:
            pred = predictor.predict(AttentionBatch.from_calls([c for _, c in calls],
                                                               warm_l2=True), spec)
            for (i, _), t in zip(calls, pred.time_ms.tolist()):
                times[i] = t
            if interval is not None and spans is not None:
                decode = torch.tensor([float(c.phase == "decode") for _, c in calls])
                lo, hi = predictor.bounds(pred.time_ms, decode, interval)
                for (i, _), a, b in zip(calls, lo.tolist(), hi.tolist()):
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
    if args.device_spec is not None and not Path(args.device_spec).is_file():
        raise UsageError(f"--device-spec {args.device_spec}: no such file")
    spans: dict[int, tuple[float, float]] | None = None
    if args.interval is not None:
        from ..predict.intervals import check_level

        try:
            check_level(args.interval, "--interval")
        except ValueError as e:
            raise UsageError(str(e)) from None
        spans = {}
    table = _read(path)
    if spans is not None and table.schema == "vec":
        raise UsageError(f"--interval: intervals are calibrated for GEMM and attention rows; "
                         f"{path} holds vec rows")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        targets = _Targets(args.device_profile, args.device_spec)
        if table.schema == "gemm":
            times, errors = _predict_groups(table, targets, weights_predictor, args.skip_bad,
                                            path, args.interval, spans)
        else:
            if table.schema == "vec":
                times, errors = _predict_vec(table, targets)
            else:
                times, errors = _predict_attention(table, targets, args.interval, spans)
            if errors and not args.skip_bad:
                first = min(errors)
                raise UsageError(f"{path} line {table.lines[first]}: {errors[first]}")
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
