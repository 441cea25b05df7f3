"""What a record reads off a graph node: its module, its op's qualified name and the tensors
of its value."""

from __future__ import annotations

from typing import Any

import torch

from .handlers import op_name


def _qualified(target: Any) -> str:
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        name = getattr(packet, "_qualified_op_name", "aten::" + op_name(target))
        return str(name).replace("::", ".")
    return getattr(target, "__name__", str(target))


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def _module_of(node: Any, model_name: str) -> tuple[str, str]:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", model_name
    path, typ = list(stack.values())[-1]
    name = typ.__name__ if isinstance(typ, type) else str(typ).rsplit(".", 1)[-1]
    # a torch.compile'd submodule holds the real one as ``_orig_mod``: name it by its own path
    path = ".".join(p for p in str(path).split(".") if p != "_orig_mod")
    return path, name
