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
- ``"eager"``: the recorder without fake tensors, for a real model and real inputs only. It
  runs the model's kernels on their own device (under ``no_grad``, on cloned buffers and
  inputs), so value-dependent code such as mixture-of-experts routing can be captured.

``"auto"`` tries the recorder, then export, then (real model and inputs only) eager. The
recorder comes first because it is the faster of the two, with the same GEMMs, and takes more
models: it accepts outputs export refuses (transformers' KV-cache objects when ``use_cache`` is
left on).

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
import io
import logging
import operator
import os
import re
import sysconfig
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .hf_config import config_dims
from .suggest import check_choice

__all__ = [
    "CAPTURE_METHODS",
    "CaptureError",
    "Captured",
    "capture",
    "config_dims",
    "module_template",
    "module_types_of",
    "unwrap_model",
]

log = logging.getLogger(__name__)

_LOCK = threading.RLock()  # one capture at a time; see the module docstring
NO_GRAD = "torch_gemm_cost_no_grad"  # node.meta key: recorded with grad disabled
CAPTURE_METHODS: tuple[str, ...] = ("auto", "dispatch", "export", "eager")


class CaptureError(RuntimeError):
    """Every capture path failed. The message names the stage, the node and what to try."""


@dataclass(frozen=True)
class Captured:
    """A captured forward pass, and what the model itself says beyond its graph.

    ``requires_grad`` maps each placeholder node's name to whether gradients flow into it
    (parameters with ``requires_grad``, inputs that require grad). ``module_types`` maps each
    module path to its class name; ``config`` holds the model's recognizable config dims
    (``config_dims``), which padding advice names.
    """

    graph_module: torch.fx.GraphModule
    method: str  # "dispatch", "export" or "eager"
    model_name: str  # class name of the (unwrapped) model
    requires_grad: Mapping[str, bool]
    causal_modules: frozenset[str] = frozenset()  # paths of modules with ``is_causal = True``
    module_types: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, int] = field(default_factory=dict)


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
    train: bool = False,
    method: str = "auto",
) -> Captured:
    """Trace ``model(*args, **kwargs)`` into an FX graph; only ``method="eager"`` (or ``"auto"``
    once both fake-tensor paths failed on a real model) runs real kernels.

    ``train`` sets every module's training flag for the trace (dropout appears, for instance);
    the flags are restored afterwards.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_choice("capture method", method, CAPTURE_METHODS)
    model = unwrap_model(model)
    if not isinstance(args, tuple):
        args = tuple(args) if isinstance(args, list) else (args,)
    kw: dict[str, Any] = dict(kwargs or {})
    with _LOCK:
        captured = _capture_locked(model, args, kw, train, method)
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
    model: torch.nn.Module, args: tuple[Any, ...], kw: dict[str, Any], train: bool, method: str
) -> Captured:
    if _all_meta(model):
        args, kw = _to_meta((args, kw))

    if method != "auto":
        methods: tuple[str, ...] = (method,)
    elif _has_meta(model, (args, kw)):
        methods = ("dispatch", "export")
    else:
        methods = ("dispatch", "export", "eager")
    with _quiet_torch_logs():
        return _try_methods(model, args, kw, train, methods)


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
    train: bool,
    methods: tuple[str, ...],
) -> Captured:
    failures: list[tuple[str, str, BaseException]] = []
    for name in methods:
        if name == "eager":
            if _has_meta(model, (args, kw)):
                raise ValueError(
                    "capture_method='eager' runs the model for real: it needs a "
                    "model and example inputs that are not on the meta device"
                )
            if failures:  # a fallback, not the method asked for
                log.warning(
                    "fake-tensor capture failed; running %s eagerly on its own device",
                    type(model).__name__,
                )
        try:
            grad = train or torch.is_grad_enabled()  # backward follows autograd's view
            with _training_flags(model, train), torch.set_grad_enabled(grad):
                if name == "export":
                    return _capture_export(model, args, kw)
                return _capture_dispatch(model, args, kw, fake=name != "eager")
        except Exception as e:  # noqa: BLE001 - reported below, chained
            op, frame = getattr(e, "_tgc_node", None), _user_frame(e)
            if op:
                node = f"at node {op}" + (f" ({frame})" if frame else "")
            else:
                node = f"in {frame}" if frame else "at an unknown node"
            failures.append((name, node, e))
            log.info("capture via %s failed %s: %s", name, node, _first_line(e))
    raise _capture_error(failures, model, (args, kw)) from failures[-1][2]


# ----------------------------------------------------------------------------- helpers


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


_LIBRARY_DIRS = (
    os.path.dirname(torch.__file__),
    os.path.dirname(__file__),
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
    failures: list[tuple[str, str, BaseException]], model: torch.nn.Module, inputs: Any
) -> CaptureError:
    parts = [f"stage {name!r} failed {node}: {_first_line(e)}" for name, node, e in failures]
    tried = {name for name, _, _ in failures}
    hints = []
    if _has_meta(model, inputs):
        hints.append(
            "code that reads tensor values needs a real (non-meta) model and example "
            "inputs, which capture_method='eager' runs for real"
        )
    elif "eager" not in tried:
        hints.append("capture_method='eager' runs value-dependent code for real")
    else:
        hints.append("check that model(*args, **kwargs) runs as given")
    other = [m for m in ("dispatch", "export") if m not in tried]
    if other:
        hints.append(f"capture_method={other[0]!r}")
    hints.append("or make the value-dependent branch static (e.g. pass the kwargs that select it)")
    return CaptureError(
        f"could not capture {type(model).__name__}: "
        + "; ".join(parts)
        + ". Try: "
        + "; ".join(hints)
    )


def _has_meta(model: torch.nn.Module, inputs: Any) -> bool:
    tensors = [*model.parameters(), *model.buffers(), *_tensor_leaves(inputs)]
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
    """Set every submodule's ``training`` attribute, restoring each one on exit.

    The attribute is set directly, so overridden ``train()`` methods run no side effects.
    """

    def __init__(self, model: torch.nn.Module, train: bool) -> None:
        self.modules = list(model.modules())
        self.saved = [m.training for m in self.modules]
        self.train = train

    def __enter__(self) -> None:
        for m in self.modules:
            m.training = self.train

    def __exit__(self, *exc: object) -> None:
        for m, flag in zip(self.modules, self.saved):
            m.training = flag


def _causal_modules(model: torch.nn.Module) -> frozenset[str]:
    return frozenset(n for n, m in model.named_modules() if getattr(m, "is_causal", None) is True)


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# ----------------------------------------------------------------------------- export


def _capture_export(model: torch.nn.Module, args: tuple, kwargs: dict) -> Captured:
    from torch.export.graph_signature import InputKind

    # export prints the partial graph of a failed trace to stderr; it goes to the debug log.
    # NB: sys.stderr is process-wide, so other threads' writes during an export go there too
    noise = io.StringIO()
    try:
        with contextlib.redirect_stderr(noise):
            ep = torch.export.export(model, args, kwargs, strict=False)
    finally:
        if noise.getvalue().strip():
            log.debug("torch.export said:\n%s", noise.getvalue())
    gm = ep.graph_module
    _inline_wrapped_regions(gm)
    params = dict(model.named_parameters(remove_duplicate=False))
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    requires_grad: dict[str, bool] = {}
    for spec in ep.graph_signature.input_specs:
        name = getattr(spec.arg, "name", None)
        if name is None:
            continue
        if spec.kind == InputKind.PARAMETER:
            p = params.get(spec.target or "")
            requires_grad[name] = bool(p is not None and p.requires_grad)
        elif spec.kind == InputKind.USER_INPUT:
            val = placeholders[name].meta.get("val") if name in placeholders else None
            requires_grad[name] = bool(getattr(val, "requires_grad", False))
        else:
            requires_grad[name] = False
    return Captured(gm, "export", type(model).__name__, requires_grad, _causal_modules(model))


_WRAPPERS = {"wrap_with_set_grad_enabled": 1, "wrap_with_autocast": 4}  # name -> submodule arg


def _inline_wrapped_regions(gm: torch.fx.GraphModule) -> None:
    """Inline the submodules export wraps ``no_grad`` and ``autocast`` regions in, so their
    GEMMs are seen; nodes of a grad-disabled region are marked ``NO_GRAD``."""
    graph = gm.graph
    while True:
        wrapper = next(
            (
                n
                for n in graph.nodes
                if n.op == "call_function" and getattr(n.target, "__name__", "") in _WRAPPERS
            ),
            None,
        )
        if wrapper is None:
            break
        at = _WRAPPERS[wrapper.target.__name__]
        sub_node = wrapper.args[at]
        sub = getattr(gm, sub_node.target)
        no_grad = at == 1 and not wrapper.args[0]
        env: dict[torch.fx.Node, Any] = {}
        operands = iter(wrapper.args[at + 1 :])
        outputs: Any = ()
        with graph.inserting_before(wrapper):
            for sn in sub.graph.nodes:
                if sn.op == "placeholder":
                    env[sn] = next(operands)
                elif sn.op == "output":
                    outputs = torch.fx.node.map_arg(sn.args[0], env.__getitem__)
                elif sn.op == "get_attr":  # a nested region: move its submodule up
                    name = f"{sub_node.target}_{sn.target}"
                    gm.add_submodule(name, getattr(sub, sn.target))
                    env[sn] = graph.get_attr(name)
                else:
                    env[sn] = graph.node_copy(sn, env.__getitem__)
                    if no_grad or sn.meta.get(NO_GRAD):
                        env[sn].meta[NO_GRAD] = True
        for user in list(wrapper.users):
            user.replace_all_uses_with(outputs[user.args[1]])
            graph.erase_node(user)
        graph.erase_node(wrapper)
        if not sub_node.users:
            graph.erase_node(sub_node)
    graph.lint()


# ----------------------------------------------------------------------------- dispatch recorder

# torch-level functions recorded whole, as the ATen composite export keeps: fn -> (op, binder)
_aten = torch.ops.aten


def _bind_matmul(args: tuple, kwargs: dict) -> tuple:
    a = args[0] if args else kwargs["input"]
    b = args[1] if len(args) > 1 else kwargs["other"]
    return (a, b)


def _bind_rmatmul(args: tuple, kwargs: dict) -> tuple:
    return (args[1], args[0])


def _bind_linear(args: tuple, kwargs: dict) -> tuple:
    names = ("input", "weight", "bias")
    vals = list(args) + [kwargs.get(n) for n in names[len(args) :]]
    return tuple(vals[:3])


def _bind_einsum(args: tuple, kwargs: dict) -> tuple:
    equation, *ops = args
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = list(ops[0])
    return (equation, list(ops))


def _bind_sdpa(args: tuple, kwargs: dict) -> tuple:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    defaults = (None, None, None, None, 0.0, False, None, False)
    vals = list(args) + [
        kwargs.get(n, d) for n, d in zip(names[len(args) :], defaults[len(args) :])
    ]
    return tuple(vals)


_COMPOSITES: dict[Callable[..., Any], tuple[Any, Callable[[tuple, dict], tuple]]] = {
    F.linear: (_aten.linear.default, _bind_linear),
    torch.matmul: (_aten.matmul.default, _bind_matmul),
    torch.Tensor.matmul: (_aten.matmul.default, _bind_matmul),
    torch.Tensor.__matmul__: (_aten.matmul.default, _bind_matmul),
    torch.Tensor.__rmatmul__: (_aten.matmul.default, _bind_rmatmul),
    torch.einsum: (_aten.einsum.default, _bind_einsum),
    F.scaled_dot_product_attention: (_aten.scaled_dot_product_attention.default, _bind_sdpa),
}


class _Recorder:
    """Builds an FX graph from the ops it is shown, mapping tensors to the nodes that made them."""

    def __init__(
        self,
        model: torch.nn.Module,
        params: dict[int, tuple[str, bool]],
        buffers: dict[int, str],
    ) -> None:
        self.graph = torch.fx.Graph()
        self.nodes: dict[int, torch.fx.Node] = {}
        self.keep: list[torch.Tensor] = []  # keeps ids unique while the map lives
        self.requires_grad: dict[str, bool] = {}
        self.params = params  # id of the traced tensor -> (name, requires_grad)
        self.buffers = buffers
        self.module_names = {id(m): name for name, m in model.named_modules(remove_duplicate=False)}
        self.stack: list[tuple[str, str]] = [("", _type_name(type(model)))]
        self.suppress = 0
        self.track_grad_mode = True  # off for eager capture, which runs under no_grad
        self.names: dict[str, int] = {}
        self.current = "?"

    # module tracking (global hooks, removed by the caller's ExitStack)
    def pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        name = self.module_names.get(id(module))
        if name is None:  # a module built during forward: hang it under its parent
            name = f"{self.stack[-1][0]}.<{type(module).__name__}>".lstrip(".")
        self.stack.append((name, _type_name(type(module))))

    def post_hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if len(self.stack) > 1:
            self.stack.pop()

    def where(self, op: Any) -> str:
        return f"{op} in module {self.stack[-1][0] or '(top)'!r}"

    def module_stack(self) -> dict[str, tuple[str, str]]:
        return {path or "<root>": (path, typ) for path, typ in self.stack}

    # graph building
    def node_for(self, t: torch.Tensor) -> torch.fx.Node:
        node = self.nodes.get(id(t))
        if node is not None:
            return node
        if id(t) in self.params:
            name, grad = self.params[id(t)]
            name = "p_" + name
        elif id(t) in self.buffers:
            name, grad = "b_" + self.buffers[id(t)], False
        else:
            name, grad = "input", t.requires_grad
        # placeholders go first, under unique names (a tensor may first appear mid-graph)
        first = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        with self.graph.inserting_before(first):
            node = self.graph.placeholder(self._unique(name.replace(".", "_")))
        node.meta["val"] = t
        self.requires_grad[node.name] = bool(grad)
        self.bind(t, node)
        return node

    def _unique(self, name: str) -> str:
        self.names[name] = self.names.get(name, -1) + 1
        return name if self.names[name] == 0 else f"{name}_{self.names[name]}"

    def bind(self, t: torch.Tensor, node: torch.fx.Node) -> None:
        self.nodes[id(t)] = node
        self.keep.append(t)

    def arg(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return self.node_for(x)
        if isinstance(x, list):
            return [self.arg(v) for v in x]
        if isinstance(x, tuple):  # torch.Size and named tuples become plain tuples
            return tuple(self.arg(v) for v in x)
        if x is None or isinstance(
            x, (bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format)
        ):
            return x
        return str(x)  # NB: opaque objects survive as text; no cost depends on them

    def record(self, target: Any, args: tuple, kwargs: dict, out: Any) -> None:
        node = self.graph.call_function(
            target, self.arg(args), {k: self.arg(v) for k, v in kwargs.items()}
        )
        node.meta["val"] = out
        node.meta["nn_module_stack"] = self.module_stack()
        if self.track_grad_mode and not torch.is_grad_enabled():
            node.meta[NO_GRAD] = True
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
        elif isinstance(out, (list, tuple)):
            for i, t in enumerate(out):
                if isinstance(t, torch.Tensor):
                    item = self.graph.call_function(operator.getitem, (node, i))
                    item.meta["val"] = t
                    item.meta["nn_module_stack"] = node.meta["nn_module_stack"]
                    self.bind(t, item)

    def finish(self, out: Any) -> torch.fx.GraphModule:
        leaves = [x for x in _tensor_leaves(out)]
        self.graph.output(tuple(self.nodes[id(t)] for t in leaves if id(t) in self.nodes))
        return torch.fx.GraphModule(torch.nn.Module(), self.graph)


def _tensor_leaves(tree: Any) -> Iterator[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, Mapping):
        for v in tree.values():
            yield from _tensor_leaves(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _tensor_leaves(v)
    else:
        leaves, _ = tree_flatten(tree)
        if leaves != [tree]:
            for v in leaves:
                yield from _tensor_leaves(v)


class _FunctionRecorder(TorchFunctionMode):
    def __init__(self, rec: _Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        entry = _COMPOSITES.get(func) if self.rec.suppress == 0 else None
        if entry is None:
            # NB: the mode is off inside its handler, so composites that a Python-level torch
            # function calls (F.multi_head_attention_forward) reach the dispatch recorder in
            # pieces (t + addmm, the fused SDPA kernels); gemms/handlers.py reads those too
            return func(*args, **kwargs)
        op, binder = entry
        self.rec.current = self.rec.where(op)
        self.rec.suppress += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self.rec.suppress -= 1
        self.rec.record(op, binder(args, kwargs), {}, out)
        return out


def _grouped_mm_any_dtype(func: Any, args: tuple, kwargs: dict) -> Any:
    """``aten._grouped_mm`` whatever the operands' float dtype. Its fake kernel takes bf16 only,
    as the CUDA kernel does, yet transformers routes a float32 model's MoE experts to it on the
    meta device; only the output's shape matters here, so it runs in bf16 and hands back the
    model's dtype."""
    floats = [a for a in args if isinstance(a, torch.Tensor) and a.dtype.is_floating_point]
    if all(a.dtype == torch.bfloat16 for a in floats):
        return func(*args, **kwargs)
    cast = tuple(a.to(torch.bfloat16) if any(a is f for f in floats) else a for a in args)
    return func(*cast, **kwargs).to(floats[0].dtype)


class _DispatchRecorder(TorchDispatchMode):
    def __init__(self, rec: _Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        if self.rec.suppress == 0:
            self.rec.current = self.rec.where(func)
        if func is torch.ops.aten._grouped_mm.default:
            out = _grouped_mm_any_dtype(func, args, kwargs)
        else:
            out = func(*args, **kwargs)
        if self.rec.suppress == 0:
            self.rec.record(func, args, kwargs, out)
        return out


def _capture_dispatch(model: torch.nn.Module, args: tuple, kwargs: dict, *, fake: bool) -> Captured:
    from torch._subclasses.fake_tensor import FakeTensorMode

    # Fake tensors for every model, meta ones too: no real kernels run, and libraries that skip
    # value checks while tracing (transformers' is_tracing) recognise them. Parameters, buffers
    # and inputs are swapped for fake copies, so in-place ops (BatchNorm's running stats)
    # touch the copies, not the user's tensors.
    # Eager (``fake=False``) runs real kernels: parameters are used as they are, buffers and
    # inputs are cloned so in-place ops leave the user's tensors alone.
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else None
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    state = _traced_state(params, buffers, fake_mode)
    fake_args, fake_kwargs = torch.utils._pytree.tree_map(
        lambda x: _traced_copy(x, fake_mode), (args, kwargs))
    rec = _Recorder(
        model,
        params={id(state[n]): (n, p.requires_grad) for n, p in params.items()},
        buffers={id(state[n]): n for n in buffers},
    )
    rec.track_grad_mode = fake
    try:
        with ExitStack() as stack:
            _record_into(rec, stack, fake_mode)
            out = torch.func.functional_call(
                model, state, fake_args, fake_kwargs, tie_weights=True, strict=False
            )
    except Exception as e:
        e._tgc_node = rec.current  # type: ignore[attr-defined]
        raise
    return Captured(
        rec.finish(out),
        "dispatch" if fake else "eager",
        type(model).__name__,
        rec.requires_grad,
        _causal_modules(model),
    )


def _traced_copy(x: Any, fake_mode: Any) -> Any:
    """A tensor as the trace sees it: a fake copy, or (eager) a detached clone."""
    if not isinstance(x, torch.Tensor):
        return x
    if fake_mode is not None:
        return fake_mode.from_tensor(x, static_shapes=True)
    return x.detach().clone().requires_grad_(x.requires_grad)


def _traced_state(params: Mapping[str, torch.Tensor], buffers: Mapping[str, torch.Tensor],
                  fake_mode: Any) -> dict[str, torch.Tensor]:
    """Name -> the tensor the trace uses: fake parameters stay Parameters, so code that
    touches modules in forward (.to()) works; a tied parameter gets one copy under all its
    names. Eager keeps the parameters themselves."""
    copies: dict[int, torch.Tensor] = {}
    for p in params.values():
        if id(p) not in copies:
            copies[id(p)] = (
                p
                if fake_mode is None
                else torch.nn.Parameter(_traced_copy(p, fake_mode), requires_grad=p.requires_grad)
            )
    state = {n: copies[id(p)] for n, p in params.items()}
    state.update({n: _traced_copy(b, fake_mode) for n, b in buffers.items()})
    return state


def _record_into(rec: _Recorder, stack: ExitStack, fake_mode: Any) -> None:
    """Enter, on ``stack``, what records a forward pass into ``rec``: global module hooks for
    the module paths, eager torch.compile, the fake mode (or no_grad for an eager run), then
    the dispatch and function recorders."""
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )

    pre = register_module_forward_pre_hook(rec.pre_hook)
    stack.callback(pre.remove)
    post = register_module_forward_hook(rec.post_hook, always_call=True)
    stack.callback(post.remove)
    if hasattr(torch.compiler, "set_stance"):  # torch.compile'd submodules run eagerly
        stack.enter_context(torch.compiler.set_stance("force_eager"))
    stack.enter_context(warnings.catch_warnings())
    # our global hooks see a compiled submodule twice (wrapper, _orig_mod); paths say so
    warnings.filterwarnings("ignore", message=r".*global hooks on modules")
    if fake_mode is not None:
        stack.enter_context(fake_mode)
    else:
        stack.enter_context(torch.no_grad())
    stack.enter_context(_DispatchRecorder(rec))
    stack.enter_context(_FunctionRecorder(rec))
