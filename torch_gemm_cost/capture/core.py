"""Capture: a model and example inputs in, an FX graph with shapes and module paths out, with
what the model says beyond its graph (each module's class name, its config's dims).

Every capture path produces the same kind of graph: ATen-level ``call_function`` nodes whose
``meta["val"]`` holds the output's fake (or meta) tensor and whose ``meta["nn_module_stack"]``
maps to ``(module path, module type)`` pairs, outermost first. GEMM-like composites
(``aten.linear``, ``aten.matmul``, ``aten.einsum``, ``aten.scaled_dot_product_attention``) stay
whole, so the next stage sees every spelling as written.

- ``"dispatch"``: a recorder made of a ``TorchFunctionMode`` (keeps the composites whole), a
  ``TorchDispatchMode`` (everything else) under ``FakeTensorMode``, and global module hooks for
  the module paths, removed on exit.
- ``"export"``: ``torch.export.export(..., strict=False)``, which records ``nn_module_stack``
  itself and takes code paths that check ``torch.compiler.is_exporting()``.
- ``"eager"``: the recorder without fake tensors. It runs the model's kernels on their own
  device (under ``no_grad``, on cloned buffers and inputs), so value-dependent code such as
  mixture-of-experts routing, ``.item()`` or a data-dependent shape can be captured. A meta
  model or meta inputs run as a copy made of real CPU tensors of the same shapes (``real``:
  made-up values). Either way the run may allocate at most ``real_bytes_limit`` bytes
  (``DEFAULT_REAL_BYTES_LIMIT``, 4 GiB), the copy included; past it the run stops and the
  ``CaptureError`` says so.

``"auto"`` tries the recorder, then export, then eager. The recorder comes first because it is
the faster of the two, with the same GEMMs, and takes more models: it accepts outputs export
refuses (transformers' KV-cache objects when ``use_cache`` is left on).

No weights are allocated (a meta model stays meta). The model is left as it was: per-module
training flags are set for the capture and restored, also on failure.

Captures run one at a time, under a process-wide lock: each one swaps the model's parameters
for the duration (``functional_call``), sets training flags, installs global module hooks and
compiler stances, all state that a concurrent capture would see. Everything after capture
(records, prediction, reports) runs outside the lock, so ``estimate()`` is safe to call from
several threads. NB: running the model itself in another thread during a capture is not.
torch's own reports of a failed trace (fake-tensor tracebacks, export's partial graph) are held
back during a capture; each failure is logged here once, and the ``CaptureError`` names it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from ..suggest import check_choice
from .export import capture_export
from .graph import Captured, tensor_leaves
from .hf_config import config_dims
from .real import (
    DEFAULT_REAL_BYTES_LIMIT,
    AllocationBudget,
    RealBytesLimitError,
    check_real_bytes_limit,
    format_bytes,
    materialize,
)
from .recorder import capture_dispatch

__all__ = [
    "CAPTURE_METHODS",
    "DEFAULT_REAL_BYTES_LIMIT",
    "CaptureError",
    "Captured",
    "api_option",
    "capture",
    "config_dims",
    "module_template",
    "module_types_of",
    "unwrap_model",
]

log = logging.getLogger(__name__)

_LOCK = threading.RLock()  # one capture at a time; see the module docstring
CAPTURE_METHODS: tuple[str, ...] = ("auto", "dispatch", "export", "eager")


def api_option(method: str) -> str:
    """A capture method as the Python API spells it: ``capture_method='eager'``."""
    return f"capture_method={method!r}"


class CaptureError(RuntimeError):
    """Every capture path failed. The message names the stage, the node and what to try, its
    options spelled as the Python API takes them; ``message(option)`` spells them as another
    entry point does (the command line's flags).

    ``hints`` are (text, capture method) pairs: a text with ``{}`` where the method's option
    goes, or (text, None) for a hint that names no option.
    """

    def __init__(self, summary: str, hints: Sequence[tuple[str, str | None]] = ()) -> None:
        self.summary, self.hints = summary, tuple(hints)
        super().__init__(self.message())

    def message(self, option: Callable[[str], str] = api_option) -> str:
        """The error with each suggested capture method spelled by ``option``."""
        if not self.hints:
            return self.summary
        tried = [text.format(option(m)) if m else text for text, m in self.hints]
        return f"{self.summary}. Try: {'; '.join(tried)}"


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The module a ``torch.compile`` wrapper (``OptimizedModule``) holds, else the model."""
    while isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
        model = model._orig_mod  # type: ignore[assignment]
    return model


def capture(
    model: torch.nn.Module,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    train: bool | None = False,
    method: str = "auto",
    real_bytes_limit: int = DEFAULT_REAL_BYTES_LIMIT,
) -> Captured:
    """Trace ``model(*args, **kwargs)`` into an FX graph; only ``method="eager"`` (or ``"auto"``
    once both fake-tensor paths failed) runs real kernels, on real CPU tensors of the same
    shapes where the model or inputs are meta, allocating at most ``real_bytes_limit`` bytes.

    ``train`` sets every module's training flag for the trace (dropout appears, for instance);
    the flags are restored afterwards. ``None`` leaves each module's flag as the model has it
    (a model built and called without ``.eval()`` runs its BatchNorm on batch statistics).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_choice("capture method", method, CAPTURE_METHODS)
    check_real_bytes_limit(real_bytes_limit)
    model = unwrap_model(model)
    if not isinstance(args, tuple):
        args = tuple(args) if isinstance(args, list) else (args,)
    kw: dict[str, Any] = dict(kwargs or {})
    with _LOCK:
        captured = _capture_locked(model, args, kw, train, method, real_bytes_limit)
    return replace(captured, module_types=module_types_of(model),
                   config=config_dims(getattr(model, "config", None)))


def module_types_of(model: torch.nn.Module) -> dict[str, str]:
    """Dotted module path -> class name, for every submodule of a model."""
    return {name: type(mod).__name__ for name, mod in model.named_modules()}


_INDEX = re.compile(r"^\d+$")


def module_template(path: str) -> tuple[str, tuple[int, ...]]:
    """A module path with its container indices pulled out: the repeats of one block share
    the template.

    >>> module_template("a.h.3.mlp")
    ('a.h.*.mlp', (3,))
    """
    parts = path.split(".") if path else []
    idx = tuple(int(p) for p in parts if _INDEX.match(p))
    return ".".join("*" if _INDEX.match(p) else p for p in parts), idx


def _capture_locked(
    model: torch.nn.Module, args: tuple[Any, ...], kw: dict[str, Any], train: bool | None,
    method: str, real_bytes_limit: int,
) -> Captured:
    given = (args, kw)  # a real input stays real where eager runs a meta model for real
    if _all_meta(model):
        args, kw = _to_meta((args, kw))
    methods = (method,) if method != "auto" else ("dispatch", "export", "eager")
    with _quiet_torch_logs():
        return _try_methods(model, args, kw, train, methods, given, real_bytes_limit)


# torch loggers that report a failed trace (with a traceback) that capture handles itself
_TORCH_TRACE_LOGS = ("torch._subclasses.fake_tensor", "torch.fx.experimental.symbolic_shapes")


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """Silence torch's own reports of a failed trace: each failure is logged here, once."""
    loggers = [logging.getLogger(name) for name in _TORCH_TRACE_LOGS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _try_methods(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kw: dict[str, Any],
    train: bool | None,
    methods: tuple[str, ...],
    given: tuple[tuple[Any, ...], dict[str, Any]],
    real_bytes_limit: int,
) -> Captured:
    failures: list[tuple[str, str, BaseException]] = []
    for name in methods:
        try:
            grad = bool(train) or torch.is_grad_enabled()  # backward follows autograd's view
            if name == "eager":
                return _capture_eager(model, given, train, grad, bool(failures),
                                      real_bytes_limit)
            with _training_flags(model, train), torch.set_grad_enabled(grad):
                if name == "export":
                    return capture_export(model, args, kw)
                return capture_dispatch(model, args, kw, fake=True)
        except Exception as e:  # noqa: BLE001 - reported below, chained
            op, frame = getattr(e, "_tgc_node", None), _user_frame(e)
            if op:
                node = f"at node {op}" + (f" ({frame})" if frame else "")
            elif isinstance(e, RealBytesLimitError):
                node = "before running"
            else:
                node = f"in {frame}" if frame else "at an unknown node"
            failures.append((name, node, e))
            log.info("capture via %s failed %s: %s", name, node, _first_line(e))
    raise _capture_error(failures, model) from failures[-1][2]


def _capture_eager(model: torch.nn.Module, given: tuple[tuple[Any, ...], dict[str, Any]],
                   train: bool | None, grad: bool, fallback: bool, limit: int) -> Captured:
    """The eager path: the model run for real, on a copy made of real CPU tensors where the
    model or its inputs are meta (``real.materialize``), allocating at most ``limit`` bytes."""
    args, kw = given
    spent = 0
    if _has_meta(model, given):
        model, (args, kw), spent = materialize(model, given, limit)
    if fallback:  # a fallback, not the method asked for
        log.warning("fake-tensor capture failed; running %s for real%s (at most %s)",
                    type(model).__name__, " on CPU tensors of the same shapes" if spent else "",
                    format_bytes(limit))
    with _training_flags(model, train), torch.set_grad_enabled(grad):
        return capture_dispatch(model, args, kw, fake=False,
                                budget=AllocationBudget(limit, spent))


# ----------------------------------------------------------------------------- helpers


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


_LIBRARY_DIRS = (
    os.path.dirname(torch.__file__),
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # the package root
    sysconfig.get_paths()["stdlib"],
)


def _user_frame(e: BaseException) -> str | None:
    """The innermost frame of the model's own code (not torch, not this package)."""
    frames = [
        f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(_LIBRARY_DIRS)
    ]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.name} at {f.filename}:{f.lineno}"


def _capture_error(
    failures: list[tuple[str, str, BaseException]], model: torch.nn.Module
) -> CaptureError:
    parts = [f"stage {name!r} failed {node}: {_first_line(e)}" for name, node, e in failures]
    tried = {name for name, _, _ in failures}
    hints: list[tuple[str, str | None]] = []
    if any(isinstance(e, RealBytesLimitError) for _, _, e in failures):
        hints.append(("a larger real_bytes_limit (bytes), if the host has the memory", None))
    elif "eager" not in tried:
        hints.append(("{} runs value-dependent code for real", "eager"))
    else:
        hints.append(("check that model(*args, **kwargs) runs as given", None))
    other = [m for m in ("dispatch", "export") if m not in tried]
    if other:
        hints.append(("{}", other[0]))
    hints.append(
        ("or make the value-dependent branch static (e.g. pass the kwargs that select it)", None))
    return CaptureError(f"could not capture {type(model).__name__}: " + "; ".join(parts), hints)


def _has_meta(model: torch.nn.Module, inputs: Any) -> bool:
    tensors = [*model.parameters(), *model.buffers(), *tensor_leaves(inputs)]
    return any(t.is_meta for t in tensors)


def _all_meta(model: torch.nn.Module) -> bool:
    tensors = list(model.parameters()) + list(model.buffers())
    return bool(tensors) and all(t.is_meta for t in tensors)


def _to_meta(tree: Any) -> Any:
    """Copies of the example inputs on the meta device (the user's tensors are not touched)."""
    if isinstance(tree, torch.Tensor):
        return tree if tree.is_meta else tree.to("meta")
    if isinstance(tree, tuple):
        return tuple(_to_meta(x) for x in tree)
    if isinstance(tree, list):
        return [_to_meta(x) for x in tree]
    if isinstance(tree, dict):
        return {k: _to_meta(v) for k, v in tree.items()}
    return tree


class _training_flags:
    """Set every submodule's ``training`` attribute, restoring each one on exit; ``train=None``
    leaves every flag as it is.

    The attribute is set directly, so overridden ``train()`` methods run no side effects.
    """

    def __init__(self, model: torch.nn.Module, train: bool | None) -> None:
        self.modules = list(model.modules())
        self.saved = [m.training for m in self.modules]
        self.train = train

    def __enter__(self) -> None:
        if self.train is None:
            return
        for m in self.modules:
            m.training = self.train

    def __exit__(self, *exc: object) -> None:
        for m, flag in zip(self.modules, self.saved):
            m.training = flag
