"""The public entry points: ``estimate``, ``annotate`` and ``compare``.

Each runs the pipeline forward, each stage once: the arguments are checked here, at the
boundary, before anything is traced; then capture -> gemms (records) -> predict (every GEMM in
one batched call per device and dtype, keeping the predictor's details) -> advise (padding) ->
report, which renders what it is handed.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from tqdm import tqdm

from .advise import PaddingAdvice, padding_advice
from .capture.core import CAPTURE_METHODS, DEFAULT_REAL_BYTES_LIMIT, Captured, capture, unwrap_model
from .capture.graph import tensor_leaves
from .compiled.attention_rewrite import rewrite_attention
from .compiled.fusion import fuse_kernels
from .hardware.catalog import DeviceLike, DeviceSpec, check_dtype_on_device
from .hardware.dtypes import DTYPES, FP8_MULTIPLE, ComputeDtype, resolve_dtype
from .hardware.target import Target, resolve_target
from .predict import Predictor, default_predictor
from .predict.call import TIMINGS, CallTime, call_time, kernel_sequence
from .predict.host import HostCosts, HostPrior, host_prior, point_prior
from .predict.intervals import ReportUncertainty
from .predict.price import GemmEstimate, OpEstimate, price_records, total_ms
from .predict.profile import profile_predictor
from .records import GemmSite, OtherOp, extract, optimizer_ops
from .records.memory import MemoryEstimate, memory_estimate, uses_kv_cache
from .records.saved import checkpointed_modules, graph_memory
from .records.sizing import on_device
from .records.types import FusedKernel
from .report import Comparison, CostReport
from .report.inputs import ReportInputs, device_origin, tensor_inputs
from .suggest import check_choice

__all__ = ["DEFAULT_TIMING", "MODES", "TIMINGS", "annotate", "compare", "estimate"]

log = logging.getLogger(__name__)

MODES: tuple[str, ...] = ("inference", "train", "forward")
DEFAULT_TIMING = "event"  # what a user's event pair around model(*inputs) measures
_T = TypeVar("_T")


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
    compiled: bool = False,
    real_bytes_limit: int = DEFAULT_REAL_BYTES_LIMIT,
    timing: str | None = None,
    host: HostPrior | HostCosts | None = None,
) -> CostReport:
    """Predict the GPU time of ``model(*args, **kwargs)`` on ``device``, GEMM by GEMM.

    ``device`` is a catalog id, a driver name, a ``DeviceSpec``, the path of a spec file (a GPU
    the catalog lacks, from its datasheet: ``torch-gemm-cost devices --template``), or the path
    of a calibration profile (``torch-gemm-cost calibrate``), whose fitted predictor is used
    unless ``predictor`` is given. A file's content says which it is.

    ``dtype`` is the compute dtype of every GEMM (None: the model's floating parameter dtype,
    or its inputs' for a model without parameters).
    ``mode`` says which run is priced: ``"inference"`` one forward with every module in eval
    mode (BatchNorm on its running statistics, dropout off); ``"train"`` a training step, every
    module in training mode, with the backward pass; ``"forward"`` one forward without autograd
    with each module's ``training`` flag as the model has it, as ``with torch.no_grad():
    model(*args)`` runs a model built without ``.eval()``: a BatchNorm in training mode computes
    its batch statistics (a pass over its input, then the normalizing one) and updates its
    running statistics, a dropout draws its mask. ``optimizer`` (``"adamw"``, ``"adam"``,
    ``"sgd"``, ``"none"`` or a torch.optim.AdamW, Adam or SGD) adds a train step's update and
    its states.

    ``report.memory`` holds the run's memory on the device (``records.memory``): weights,
    gradients, optimizer states with the fp32 master weights of mixed precision, the
    activations the backward pass holds (honouring the model's activation checkpointing), the
    KV cache of a generating model, the peak, whether it fits and the largest batch that does;
    a run that does not fit is warned of.

    ``capture_method`` is ``"auto"`` (the fake-tensor recorder, then ``torch.export``, then an
    eager run), or one of ``"dispatch"``, ``"export"``, ``"eager"`` (see ``capture``). The model
    is left as it was. The eager run (code that reads tensor values: ``.item()``, a shape that
    follows the data) runs a meta model on real CPU tensors of the same shapes, and stops with a
    ``CaptureError`` once it would allocate more than ``real_bytes_limit`` bytes (4 GiB).

    ``compiled=True`` prices the model as ``torch.compile`` (inductor, default mode) runs it:
    the non-GEMM ops fused into kernels by inductor's scheduler rules (``compiled.fusion``), each
    kernel one launch moving what it reads from outside and what it writes for outside; each
    op's ``OpEstimate.kernel`` names its kernel. Hand-written attention that inductor replaces
    with SDPA (``compiled.attention_rewrite``) is priced as that SDPA call. On a GPU, SDPA is one
    FlashAttention-class kernel whether compiled or not (``predict.attention.sdpa``).

    ``timing`` says what ``report.total_ms`` measures (``predict.call``): ``"event"`` (the
    default) a CUDA event pair around the call, the host's Python, dispatch and launch of each
    op overlapped with the GPU as one stream allows (with ``compiled=True``, inductor's
    kernels launched by its generated code after dynamo's guards); ``"kernel"`` the kernels'
    sum, as a profiler shows it; ``"graph"`` a CUDA graph replay (``mode="reduce-overhead"``,
    the ``cudagraphs`` backend): its floor, the copy of the inputs into the graph's buffers,
    the kernels. The host's costs are the median of the hosts fitted on KernelBench's newest
    software generation whose GPU is another chip (every generation's range the interval
    ``report.call``), or a calibration profile's
    measured host (``torch-gemm-cost calibrate --host``). ``report.gpu_ms`` is the kernels'
    sum whatever the timing, and the table's rows sum to it. ``host`` replaces those costs
    (``predict.host.HostCosts``, or a ``HostPrior`` with a range).
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
        compiled=compiled,
        real_bytes_limit=real_bytes_limit,
        timing=timing,
        host=host,
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
    real_bytes_limit: int = DEFAULT_REAL_BYTES_LIMIT,
) -> torch.fx.GraphModule:
    """The captured graph, each node's records in ``node.meta["torch_gemm_cost"]`` (a tuple of
    ``GemmSite`` / ``OtherOp``; forward records first, then that node's backward ones)."""
    plan = _plan(model, [device], [dtype], mode, capture_method, inputs=(args, kwargs))
    captured = _capture(model, args, kwargs, mode, capture_method, real_bytes_limit)
    extract(captured, plan.dtypes[0], mode=_records_mode(mode), native_dtype=plan.native)
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
    progress: bool = False,
    compiled: bool = False,
    real_bytes_limit: int = DEFAULT_REAL_BYTES_LIMIT,
    timing: str | None = None,
    host: HostPrior | HostCosts | None = None,
) -> Comparison:
    """One report per (device, dtype), devices outer, from a single capture of the model.

    The result is a list of ``CostReport``; printing it shows totals and the top layers side by
    side. ``progress`` shows a progress bar on stderr (``tqdm``) once the work passes a second:
    the capture, then each (device, dtype)'s pricing and padding advice. ``compiled``,
    ``real_bytes_limit``, ``timing`` and ``host``: as in ``estimate``."""
    plan = _plan(model, devices, dtypes, mode, capture_method, predictor, optimizer,
                 inputs=(args, kwargs))
    if not isinstance(compiled, bool):
        raise TypeError(f"compiled must be True or False, got {compiled!r}")
    timing = _check_timing(DEFAULT_TIMING if timing is None else timing, plan.targets)
    if isinstance(host, HostCosts):
        host = point_prior(host, "given")
    elif host is not None and not isinstance(host, HostPrior):
        raise TypeError(f"host must be a HostCosts or a HostPrior, got {host!r}")
    bar = tqdm(total=1 + 2 * len(plan.targets) * len(plan.dtypes), desc="estimating",
               unit="step", file=sys.stderr, delay=1.0, leave=False, disable=not progress)
    inner = unwrap_model(model)  # what capture traces (a torch.compile wrapper's module)
    captured = _step(bar, _capture(model, args, kwargs, mode, capture_method, real_bytes_limit))
    # what a graph replay copies into its static buffers each call: the tensor inputs
    input_bytes = sum(t.numel() * t.element_size() for t in tensor_leaves((args, kwargs)))
    records: dict[str, tuple[tuple[GemmSite, ...], tuple[OtherOp, ...]]] = {}
    kernels: dict[str, tuple[FusedKernel, ...]] = {}
    order: dict[str, dict[str, int]] = {}  # each dtype's graph: node name -> its position
    passes = _records_mode(mode)  # a forward without autograd has no backward records
    rewrite = compiled and passes == "inference"  # inductor's attention rewrite, no autograd
    for cd in plan.dtypes:  # fusion reads the records extract has just put on the graph
        graph = rewrite_attention(captured, cd.name)[0] if rewrite else captured
        order[cd.name] = {n.name: i for i, n in enumerate(graph.graph_module.graph.nodes)}
        sites, others = extract(graph, cd, mode=passes, native_dtype=plan.native)
        kernels[cd.name] = ()
        if compiled:
            others, kernels[cd.name] = fuse_kernels(graph, others, cd, mode=passes,
                                                    native_dtype=plan.native)
        records[cd.name] = (sites, others)
    optimizer_records = optimizer_ops(optimizer, list(model.parameters())) if optimizer else ()
    memory = _memory(inner, captured, kwargs or {}, plan, mode, optimizer)
    # each device's GEMMs as it runs them (TF32 where PyTorch's flags allow it and it has them)
    run_sites = [on_device(records[cd.name][0], cd, target.spec)
                 for target, cd in itertools.product(plan.targets, plan.dtypes)]
    runs = [_Run(target.spec, _predictor_of(predictor, target), cd, target.source)
            for target, cd in itertools.product(plan.targets, plan.dtypes)]
    # back-to-back calls find a working set that fits in L2 there: each run's peak memory
    priced = [_step(bar, price_records(device_sites,
                                       (*records[run.cd.name][1], *optimizer_records),
                                       run.spec, run.predictor, kernels=kernels[run.cd.name],
                                       resident_bytes=mem.peak_bytes))
              for run, device_sites, mem in zip(runs, run_sites, memory, strict=True)]
    calls = [call_time(kernel_sequence(p.gemms, p.ops, order[run.cd.name], compiled=compiled,
                                       input_bytes=input_bytes),
                       timing, host or _host_of(target), run.spec)
             for (target, _), run, p in zip(itertools.product(plan.targets, plan.dtypes),
                                            runs, priced)]
    advice = [_step(bar, tuple(padding_advice(p.gemms, run.predictor, run.spec,
                                              model_ms=total_ms(p.gemms, p.ops),
                                              config=captured.config)))
              for run, p in zip(runs, priced)]
    bar.close()
    _warn_unmodelled(captured.model_name, priced[0].ops)
    for name, (sites, _) in records.items():
        _warn_fp8_off_16(captured.model_name, name, sites)
    asked = _asked(model, args, kwargs, optimizer)
    return Comparison(_report(captured, run, p.gemms, p.ops, mode, adv, compiled,
                              p.uncertainty, mem, asked, call)
                      for run, p, adv, mem, call in zip(runs, priced, advice, memory, calls))


def _capture(model: torch.nn.Module, args: Any, kwargs: Mapping[str, Any] | None, mode: str,
             method: str, real_bytes_limit: int) -> Captured:
    """The capture of the run ``mode`` prices: every module in eval mode (``"inference"``), in
    training mode with autograd (``"train"``), or as the model has its flags, without autograd
    (``"forward"``)."""
    flags = {"inference": False, "train": True, "forward": None}[mode]
    with torch.no_grad() if mode == "forward" else contextlib.nullcontext():
        return capture(model, args, kwargs, train=flags, method=method,
                       real_bytes_limit=real_bytes_limit)


def _records_mode(mode: str) -> str:
    """The passes ``extract``, ``fuse_kernels`` and the memory count for ``mode``: a train
    step's backward, else the forward alone (``"forward"`` prices its ops as captured)."""
    return "train" if mode == "train" else "inference"


def _memory(model: torch.nn.Module, captured: Captured, kwargs: Mapping[str, Any], plan: _Plan,
            mode: str, optimizer: Any) -> list[MemoryEstimate]:
    """The memory of each (device, dtype), devices outer, from one reading of the graph: a
    train step's, or a forward's (``"inference"``, ``"forward"``)."""
    train = mode == "train"
    facts = graph_memory(captured, checkpointed_modules(model) if train else frozenset(),
                         train=train)
    kv_config = model.config if not train and uses_kv_cache(model, kwargs) else None
    params = list(model.parameters())
    out = []
    for target, cd in itertools.product(plan.targets, plan.dtypes):
        out.append(memory_estimate(facts, params, cd, plan.native, mode=mode,
                                   optimizer=optimizer, device_bytes=target.spec.mem_bytes,
                                   kv_config=kv_config))
        _warn_memory(captured.model_name, target.spec, cd.name, out[-1])
    return out


def _step(bar: tqdm, result: _T) -> _T:
    """``result``, one step of ``bar`` done."""
    bar.update()
    return result


@dataclass(frozen=True)
class _Plan:
    """The checked arguments of one call: each device resolved (its spec, and the predictor a
    calibration profile brings), the compute dtypes, and the model's own floating dtype."""

    targets: list[Target]
    dtypes: list[ComputeDtype]
    native: torch.dtype


@dataclass(frozen=True)
class _Run:
    """One report's device, predictor and compute dtype, and where the device came from
    (``Target.source``)."""

    spec: DeviceSpec
    predictor: Predictor
    cd: ComputeDtype
    source: str


def _plan(model: torch.nn.Module, devices: Iterable[DeviceLike],
          dtypes: Iterable[str | torch.dtype | ComputeDtype | None], mode: str,
          capture_method: str, predictor: Predictor | None = None,
          optimizer: Any = None, inputs: Any = None) -> _Plan:
    """Check every argument once, before anything is traced. A device is a catalog id, a
    driver name, a DeviceSpec, a spec file's path (a datasheet record: the device with no
    predictor of its own) or a calibration profile's path, which brings its own predictor
    (``predictor``, when given, replaces it)."""
    targets = [resolve_target(d) for d in _as_list(devices, "devices")]
    native = _model_dtype(model, inputs)
    cds = [resolve_dtype(d if d is not None else native) for d in _as_list(dtypes, "dtypes")]
    check_choice("mode", mode, MODES)
    check_choice("capture_method", capture_method, CAPTURE_METHODS)
    for target, cd in itertools.product(targets, cds):
        # fp8 without fp8 units: ValueError naming both; bf16 without bf16 tensor cores warns
        check_dtype_on_device(target.spec, cd)
    if predictor is not None and not callable(getattr(predictor, "predict", None)):
        raise TypeError(f"predictor must have a predict(gemms, device) method, got {predictor!r}")
    if optimizer not in (None, "none") and mode != "train":
        raise ValueError(f"optimizer={optimizer!r} needs mode='train', got mode={mode!r}")
    return _Plan(targets, cds, native)


def _check_timing(timing: str, targets: Sequence[Target]) -> str:
    """``timing`` checked at the boundary: one of ``TIMINGS`` (else the error names the
    nearest), and no graph replay on a CPU."""
    check_choice("timing", timing, TIMINGS)
    cpu = [t.spec.name for t in targets if t.spec.architecture == "cpu"]
    if timing == "graph" and cpu:
        raise ValueError(f"timing='graph' is a CUDA graph replay, which {cpu[0]} does not "
                         "run; use timing='event' or 'kernel'")
    return timing


def _host_of(target: Target) -> HostPrior:
    """The host costs of a run: a calibration profile's measured host, else the fitted
    hosts' prior without the target GPU's chip."""
    return host_prior(target.profile, target.spec)


def _predictor_of(given: Predictor | None, target: Target) -> Predictor:
    """The predictor of a run: the one given, else the profile's, else the default."""
    if given is not None:
        return given
    return profile_predictor(target) or default_predictor()


def _asked(model: torch.nn.Module, args: Any, kwargs: Mapping[str, Any] | None,
           optimizer: Any) -> dict[str, Any]:
    """What the call asked that every report of it shares: the input tensors and the sizes
    read off them, the model's attention implementation (an HF model's), the optimizer."""
    attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return {**tensor_inputs(args, kwargs),
            "attention": attention if isinstance(attention, str) else None,
            "optimizer": None if optimizer is None else
            optimizer if isinstance(optimizer, str) else type(optimizer).__name__}


def _report(captured: Captured, run: _Run, gemms: tuple[GemmEstimate, ...],
            ops: tuple[OpEstimate, ...], mode: str,
            advice: tuple[PaddingAdvice, ...], compiled: bool = False,
            uncertainty: ReportUncertainty | None = None,
            memory: MemoryEstimate | None = None,
            asked: Mapping[str, Any] | None = None,
            call: CallTime | None = None) -> CostReport:
    name = getattr(run.predictor, "name", type(run.predictor).__name__)
    version = str(getattr(run.predictor, "version", ""))
    origin, file = device_origin(run.source)
    inputs = ReportInputs(model=captured.model_name, dtype=run.cd.name, mode=mode,
                          device=run.spec.id, device_name=run.spec.name, device_origin=origin,
                          device_file=file, predictor=name, predictor_version=version,
                          compiled=compiled,
                          timing="kernel" if call is None else call.timing, **(asked or {}))
    return CostReport(
        model=captured.model_name,
        device=run.spec,
        dtype=run.cd.name,
        mode=mode,
        predictor=name,
        predictor_version=version,
        gemms=gemms,
        others=ops,
        config=captured.config,
        module_types=captured.module_types,
        advice=advice,
        compiled=compiled,
        uncertainty=uncertainty,
        memory=memory,
        inputs=inputs,
        call=call,
    )


def _warn_unmodelled(model: str, ops: Sequence[OpEstimate]) -> None:
    """One warning for all the ops without a cost model (left out of the total), by op."""
    counts = collections.Counter(o.op.op for o in ops if o.time_ms is None)
    if not counts:
        return
    shown = ", ".join(f"{op} x{n}" for op, n in counts.most_common(8))
    more = f" and {len(counts) - 8} more kinds" if len(counts) > 8 else ""
    log.warning(
        "%s: %d ops have no cost model and are left out of the total: %s%s",
        model,
        sum(counts.values()),
        shown,
        more,
    )


def _warn_memory(model: str, spec: DeviceSpec, dtype: str, memory: MemoryEstimate) -> None:
    """One warning for a run whose peak memory does not fit its device, with the largest batch
    that does."""
    if memory.fits is not False or memory.device_bytes is None:
        return
    batch = ("not even a batch of 1 fits" if memory.max_batch == 0 else
             f"the largest batch that fits is {memory.max_batch}" if memory.max_batch else "")
    log.warning("%s does not fit %s in %s: its %s peak is %.1f GiB of the device's %.1f GiB%s",
                model, spec.id, dtype, memory.mode, memory.peak_bytes / 2**30,
                memory.device_bytes / 2**30, f"; {batch} (batch {memory.batch} now)"
                if batch else "")


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


def _model_dtype(model: torch.nn.Module, inputs: Any = None) -> torch.dtype:
    """The most common floating dtype among the parameters; for a model without any (a bare
    attention call), among the floating inputs; else float32."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    counts: dict[torch.dtype, int] = {}
    for p in model.parameters():  # a torch.compile wrapper's are those of the model it holds
        if p.dtype.is_floating_point:
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    if not counts:
        for t in tensor_leaves(inputs):
            if t.dtype.is_floating_point:
                counts[t.dtype] = counts.get(t.dtype, 0) + t.numel()
    return max(counts, key=counts.__getitem__) if counts else torch.float32


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
