"""The ``"dispatch"`` and ``"eager"`` capture paths: a recorder made of a ``TorchFunctionMode``
(the GEMM-like composites kept whole), a ``TorchDispatchMode`` (everything else) and global
module hooks for the module paths, under ``FakeTensorMode`` or on real tensors.

Recurrent layers (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) are kept whole too, as the one cuDNN call
a GPU runs (``aten.lstm`` ...); under fake tensors their outputs are made from the shapes, since
tracing the call would record every step of every layer (``records.rnn`` prices them)."""

from __future__ import annotations

import logging
import operator
import warnings
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .graph import NO_GRAD, Captured, causal_modules, tensor_leaves, type_name
from .real import AllocationBudget

__all__ = ["capture_dispatch"]

log = logging.getLogger(__name__)


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


def _bind_rnn(args: tuple, kwargs: dict) -> tuple:
    return tuple(args)


def _rnn_outputs(op: Any, args: tuple) -> tuple[torch.Tensor, ...]:
    """What a recurrent call returns, made by shape alone: (output, h_n[, c_n]); output is the
    input with its last dim D·H_out (D directions), the states have the initial states' shapes.
    Tracing the call itself would unroll every step of every layer, op by op."""
    x, hx, bidirectional = args[0], args[1], args[7]
    states = tuple(hx) if isinstance(hx, (list, tuple)) else (hx,)
    directions = 2 if bidirectional else 1
    output = x.new_empty((*x.shape[:-1], directions * int(states[0].shape[-1])))
    return (output, *(h.new_empty(h.shape) for h in states))


_VF = torch._C._VariableFunctions
# recurrent layers: fn -> the ATen op recorded whole (the ``.input`` overload only: a packed
# sequence's ``.data`` overload is traced op by op)
_RNNS: dict[Callable[..., Any], Any] = {
    _VF.lstm: _aten.lstm.input,
    _VF.gru: _aten.gru.input,
    _VF.rnn_tanh: _aten.rnn_tanh.input,
    _VF.rnn_relu: _aten.rnn_relu.input,
}

_COMPOSITES: dict[Callable[..., Any], tuple[Any, Callable[[tuple, dict], tuple]]] = {
    F.linear: (_aten.linear.default, _bind_linear),
    torch.matmul: (_aten.matmul.default, _bind_matmul),
    torch.Tensor.matmul: (_aten.matmul.default, _bind_matmul),
    torch.Tensor.__matmul__: (_aten.matmul.default, _bind_matmul),
    torch.Tensor.__rmatmul__: (_aten.matmul.default, _bind_rmatmul),
    torch.einsum: (_aten.einsum.default, _bind_einsum),
    F.scaled_dot_product_attention: (_aten.scaled_dot_product_attention.default, _bind_sdpa),
    **{fn: (op, _bind_rnn) for fn, op in _RNNS.items()},
}


def _is_rnn_input_overload(func: Any, args: tuple) -> bool:
    """Whether a recurrent call is the ``.input`` overload (its params, third, a list)."""
    return func in _RNNS and len(args) > 2 and isinstance(args[2], (list, tuple))


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
        self.stack: list[tuple[str, str]] = [("", type_name(type(model)))]
        self.suppress = 0
        self.track_grad_mode = True  # off for eager capture, which runs under no_grad
        self.fake = True  # fake tensors (no values); False for the eager capture
        self.names: dict[str, int] = {}
        self.current = "?"

    # module tracking (global hooks, removed by the caller's ExitStack)
    def pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        name = self.module_names.get(id(module))
        if name is None:  # a module built during forward: hang it under its parent
            name = f"{self.stack[-1][0]}.<{type(module).__name__}>".lstrip(".")
        self.stack.append((name, type_name(type(module))))

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
        leaves = [x for x in tensor_leaves(out)]
        self.graph.output(tuple(self.nodes[id(t)] for t in leaves if id(t) in self.nodes))
        return torch.fx.GraphModule(torch.nn.Module(), self.graph)


class _FunctionRecorder(TorchFunctionMode):
    def __init__(self, rec: _Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        entry = _COMPOSITES.get(func) if self.rec.suppress == 0 else None
        if func in _RNNS and not _is_rnn_input_overload(func, args):
            entry = None
        if entry is None:
            # NB: the mode is off inside its handler, so composites that a Python-level torch
            # function calls (F.multi_head_attention_forward) reach the dispatch recorder in
            # pieces (t + addmm, the fused SDPA kernels); records/handlers.py reads those too
            return func(*args, **kwargs)
        op, binder = entry
        self.rec.current = self.rec.where(op)
        self.rec.suppress += 1
        try:
            # a fake recurrent call's outputs by shape: running it would trace every step
            out = (_rnn_outputs(op, args) if func in _RNNS and self.rec.fake
                   else func(*args, **kwargs))
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


def capture_dispatch(model: torch.nn.Module, args: tuple, kwargs: dict, *, fake: bool,
                     budget: AllocationBudget | None = None) -> Captured:
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
    rec.track_grad_mode = rec.fake = fake
    try:
        with ExitStack() as stack:
            if budget is not None:  # counts what the eager run allocates
                stack.enter_context(budget)
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
        causal_modules(model),
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
