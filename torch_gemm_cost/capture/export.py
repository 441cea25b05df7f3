"""The ``"export"`` capture path: ``torch.export.export(..., strict=False)``, its wrapped
regions (grad and autocast modes) inlined into one graph."""

from __future__ import annotations

import contextlib
import io
import logging
from typing import Any

import torch

from .graph import NO_GRAD, Captured, causal_modules

__all__ = ["capture_export"]

log = logging.getLogger(__name__)


def capture_export(model: torch.nn.Module, args: tuple, kwargs: dict) -> Captured:
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
    return Captured(gm, "export", type(model).__name__, requires_grad, causal_modules(model))


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


