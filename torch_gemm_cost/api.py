"""The public entry points: ``estimate``, ``annotate`` and ``compare``.

Each one runs the pipeline capture -> gemms -> predict -> report; arguments are checked here,
at the boundary, before anything is traced.
"""

from __future__ import annotations

import collections
import difflib
import itertools
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from .capture import CAPTURE_METHODS, Captured, capture, unwrap_model
from .devices import DeviceSpec
from .dtypes import DTYPES, FP8_MULTIPLE, ComputeDtype, resolve_dtype
from .gemms import GemmSite, OtherOp, extract, optimizer_ops
from .gemms.records import GemmBatch
from .predict import Predictor, default_predictor
from .predict.ops import op_times_ms
from .predict.query import DeviceLike, check_dtype_on_device, resolve_target
from .report import Comparison, CostReport, GemmEstimate, OpEstimate

__all__ = ["MODES", "annotate", "compare", "estimate"]

log = logging.getLogger(__name__)

MODES: tuple[str, ...] = ("inference", "train")


def estimate(
    model: torch.nn.Module,
    args: Any = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    device: DeviceLike,
    dtype: str | torch.dtype | ComputeDtype | None = None,
    mode: str = "inference",
    predictor: Predictor | None = None,
    optimizer: Any = None,
    capture_method: str = "auto",
) -> CostReport:
    """Predict the GPU time of ``model(*args, **kwargs)`` on ``device``, GEMM by GEMM.

    ``device`` is a catalog id, a driver name, a ``DeviceSpec`` or the path of a calibration
    profile (``torch-gemm-cost calibrate``), whose fitted predictor is used unless
    ``predictor`` is given.

    ``dtype`` is the compute dtype of every GEMM (None: the model's floating parameter dtype).
    ``mode="train"`` adds the backward pass. ``optimizer`` is passed to the non-GEMM cost model.
    ``capture_method`` is ``"auto"`` (the fake-tensor recorder, then ``torch.export``, then, for
    a real model with real inputs only, an eager run), or one of ``"dispatch"``, ``"export"``,
    ``"eager"`` (see ``capture``). The model is left as it was.
    """
    return compare(
        model,
        args,
        kwargs,
        devices=[device],
        dtypes=[dtype],
        mode=mode,
        predictor=predictor,
        optimizer=optimizer,
        capture_method=capture_method,
    )[0]


def annotate(
    model: torch.nn.Module,
    args: Any = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    device: DeviceLike,
    dtype: str | torch.dtype | ComputeDtype | None = None,
    mode: str = "inference",
    capture_method: str = "auto",
) -> torch.fx.GraphModule:
    """The captured graph, each node's records in ``node.meta["torch_gemm_cost"]`` (a tuple of
    ``GemmSite`` / ``OtherOp``; forward records first, then that node's backward ones)."""
    spec, _ = resolve_target(device)
    _check_mode(mode)
    _check_method(capture_method)
    native = _model_dtype(model)
    cd = resolve_dtype(dtype if dtype is not None else native)
    check_dtype_on_device(spec, cd)
    captured = capture(model, args, kwargs, train=mode == "train", method=capture_method)
    extract(captured, cd, mode=mode, native_dtype=native)
    return captured.graph_module


def compare(
    model: torch.nn.Module,
    args: Any = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    devices: Iterable[DeviceLike],
    dtypes: Iterable[str | torch.dtype | ComputeDtype | None] = (None,),
    mode: str = "inference",
    predictor: Predictor | None = None,
    optimizer: Any = None,
    capture_method: str = "auto",
) -> Comparison:
    """One report per (device, dtype), devices outer, from a single capture of the model.

    The result is a list of ``CostReport``; printing it shows totals and the top layers side by
    side."""
    # a device is a catalog id, a driver name, a DeviceSpec or a calibration profile's path,
    # which brings its own predictor
    targets = [resolve_target(d) for d in _as_list(devices, "devices")]
    specs = [spec for spec, _ in targets]
    native = _model_dtype(model)
    cds = [resolve_dtype(d if d is not None else native) for d in _as_list(dtypes, "dtypes")]
    _check_mode(mode)
    _check_method(capture_method)
    for spec, cd in itertools.product(specs, cds):
        # fp8 without fp8 units: ValueError naming both; bf16 without bf16 tensor cores warns
        check_dtype_on_device(spec, cd)
    if predictor is not None and not callable(getattr(predictor, "predict", None)):
        raise TypeError(f"predictor must have a predict(gemms, device) method, got {predictor!r}")
    predictors = [
        predictor if predictor is not None else own if own is not None else default_predictor()
        for _, own in targets
    ]
    if optimizer is not None and mode != "train":
        raise ValueError(f"optimizer={optimizer!r} needs mode='train', got mode={mode!r}")
    inner = unwrap_model(model)
    optimizer_records = optimizer_ops(optimizer, list(inner.parameters())) if optimizer else ()
    captured = capture(model, args, kwargs, train=mode == "train", method=capture_method)
    records: dict[str, tuple[tuple[GemmSite, ...], tuple[OtherOp, ...]]] = {}
    for cd in cds:
        if cd.name not in records:
            records[cd.name] = extract(captured, cd, mode=mode, native_dtype=native)
    reports = Comparison(
        _report(captured, *records[cd.name], spec, cd, mode, pred, optimizer_records).with_model(
            inner,
            pred,  # module class names, config dims and the predictor, for advice
        )
        for (spec, pred), cd in itertools.product(zip(specs, predictors), cds)
    )
    _warn_unmodelled(reports[0])
    for name, (sites, _) in records.items():
        _warn_fp8_off_16(captured.model_name, name, sites)
    return reports


def _warn_unmodelled(report: CostReport) -> None:
    """One warning for all the ops without a cost model (left out of the total), by op."""
    counts = collections.Counter(o.op.op for o in report.unmodelled)
    if not counts:
        return
    shown = ", ".join(f"{op} x{n}" for op, n in counts.most_common(8))
    more = f" and {len(counts) - 8} more kinds" if len(counts) > 8 else ""
    log.warning(
        "%s: %d ops have no cost model and are left out of the total: %s%s",
        report.model,
        sum(counts.values()),
        shown,
        more,
    )


def _warn_fp8_off_16(model: str, dtype: str, sites: Sequence[GemmSite]) -> None:
    """One warning for the fp8 GEMMs whose weight dims (n, k) fp8 kernels refuse."""
    if DTYPES[dtype].peak_key != "fp8":
        return
    off = [s for s in sites if s.phase == "forward"
           and (s.n % FP8_MULTIPLE or s.k % FP8_MULTIPLE)]
    if not off:
        return
    shown = ", ".join(f"{s.module or '(top)'} (n = {s.n}, k = {s.k})" for s in off[:4])
    more = f" and {len(off) - 4} more" if len(off) > 4 else ""
    many = len(off) > 1
    log.warning(
        "%s: %d %s GEMM%s n or k off a multiple of %d, which fp8 kernels refuse: %s%s. "
        "%s priced as if %s ran; the padding advice pads to a multiple of %d",
        model, len(off), dtype, "s have" if many else " has", FP8_MULTIPLE, shown, more,
        "They are" if many else "It is", "they" if many else "it", FP8_MULTIPLE,
    )


def _report(
    captured: Captured,
    sites: tuple[GemmSite, ...],
    others: tuple[OtherOp, ...],
    device: DeviceSpec,
    cd: ComputeDtype,
    mode: str,
    predictor: Predictor,
    optimizer_records: tuple[OtherOp, ...],
) -> CostReport:
    gemms: tuple[GemmEstimate, ...] = ()
    if sites:
        pred = predictor.predict(GemmBatch.from_sites(sites), device)  # one call per report
        times = pred.time_ms.tolist()
        bound = pred.compute_bound.tolist()
        gemms = tuple(
            GemmEstimate(s, float(t), "compute" if b else "memory")
            for s, t, b in zip(sites, times, bound)
        )
    return CostReport(
        model=captured.model_name,
        device=device,
        dtype=cd.name,
        mode=mode,
        predictor=getattr(predictor, "name", type(predictor).__name__),
        predictor_version=str(getattr(predictor, "version", "")),
        gemms=gemms,
        others=_cost_other_ops(others + optimizer_records, device),
    )


def _cost_other_ops(others: Sequence[OtherOp], device: DeviceSpec) -> tuple[OpEstimate, ...]:
    """Times of the non-GEMM ops (``predict.ops``); ops of class ``other`` keep None."""
    ops = tuple(others)
    times = op_times_ms(ops, device)
    return tuple(OpEstimate(op, t) for op, t in zip(ops, times))


def _model_dtype(model: torch.nn.Module) -> torch.dtype:
    """The most common floating dtype among the parameters (float32 when there are none)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    counts: dict[torch.dtype, int] = {}
    for p in unwrap_model(model).parameters():
        if p.dtype.is_floating_point:
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return max(counts, key=counts.__getitem__) if counts else torch.float32


def _check_choice(what: str, value: Any, choices: Sequence[str]) -> None:
    if value in choices:
        return
    close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.3)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"{what} must be one of {', '.join(map(repr, choices))}, got {value!r}{hint}")


def _check_mode(mode: str) -> None:
    _check_choice("mode", mode, MODES)


def _check_method(method: str) -> None:
    _check_choice("capture_method", method, CAPTURE_METHODS)


def _as_list(values: Any, what: str) -> list[Any]:
    if (
        isinstance(values, (str, os.PathLike, DeviceSpec, torch.dtype, ComputeDtype))
        or values is None
    ):
        return [values]
    out = list(values)
    if not out:
        raise ValueError(f"{what} is empty; give at least one")
    return out
