"""The captured forward pass: the record every capture path returns, and what the paths share."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

__all__ = ["NO_GRAD", "Captured", "causal_modules", "tensor_leaves", "type_name"]

NO_GRAD = "torch_gemm_cost_no_grad"  # node.meta key: recorded with grad disabled


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


def causal_modules(model: torch.nn.Module) -> frozenset[str]:
    return frozenset(n for n, m in model.named_modules() if getattr(m, "is_causal", None) is True)


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def tensor_leaves(tree: Any) -> Iterator[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, Mapping):
        for v in tree.values():
            yield from tensor_leaves(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from tensor_leaves(v)
    else:
        leaves, _ = tree_flatten(tree)
        if leaves != [tree]:
            for v in leaves:
                yield from tensor_leaves(v)
