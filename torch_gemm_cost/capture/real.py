"""Real CPU tensors where meta ones cannot go, within a bound on the memory they take.

A model that reads tensor values (``.item()``, a data-dependent shape, a branch on a value)
cannot be traced on meta or fake tensors. ``materialize`` makes a copy of such a meta model and
its meta inputs out of real CPU tensors of the same shapes and dtypes, so the ``"eager"`` path
can run it; ``AllocationBudget`` counts every byte that run allocates and stops it with a
``RealBytesLimitError`` once the total passes ``real_bytes_limit``, rather than letting a large
model take the host's memory.

NB: the values are made up: each of torch's own modules' ``reset_parameters`` where it has one, else
uniform in [-0.1, 0.1) for floating tensors and zeros for integer and boolean ones (an index is
then always in range; a mask keeps everything). Floating inputs are standard normal. A branch
on a value takes the path those values select; shapes that follow the values (``nonzero``) are
those of the made-up data.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "DEFAULT_REAL_BYTES_LIMIT",
    "AllocationBudget",
    "RealBytesLimitError",
    "check_real_bytes_limit",
    "format_bytes",
    "materialize",
]

# 4 GiB: a laptop's spare memory. Every KernelBench program that needs it (Swin's value-built
# tables, say) fits in far less; a 7B model's weights (13 GiB in bf16) do not, on purpose.
DEFAULT_REAL_BYTES_LIMIT = 4 << 30


class RealBytesLimitError(RuntimeError):
    """A real-tensor capture would allocate more than its ``real_bytes_limit``."""


def format_bytes(n: int) -> str:
    """``n`` bytes in GiB, MiB or bytes.

    >>> format_bytes(4 << 30), format_bytes(3 << 19), format_bytes(144)
    ('4.00 GiB', '1.5 MiB', '144 B')
    """
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} B"


def check_real_bytes_limit(limit: Any) -> int:
    """``limit`` as a positive int of bytes, or a ValueError naming it."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        default = DEFAULT_REAL_BYTES_LIMIT
        raise ValueError(f"real_bytes_limit must be a positive number of bytes, got {limit!r}; "
                         f"the default is {default} ({format_bytes(default)})")
    return limit


def _over(what: str, total: int, limit: int) -> RealBytesLimitError:
    return RealBytesLimitError(
        f"{what} would take the real-tensor capture to {format_bytes(total)}, past "
        f"real_bytes_limit = {format_bytes(limit)}; raise real_bytes_limit (bytes) if the host "
        "has the memory, or make the value-dependent code static so meta tensors can trace it")


class AllocationBudget(TorchDispatchMode):
    """Counts the bytes every op's new outputs take (views and in-place results share their
    input's storage and count nothing), starting from ``spent_bytes``; raises
    ``RealBytesLimitError`` naming the op once the total passes ``limit_bytes``.

    NB: it counts what is allocated, not what is alive; the recorder keeps every tensor of the
    run alive until it finishes, so the two are close."""

    def __init__(self, limit_bytes: int, spent_bytes: int = 0) -> None:
        super().__init__()
        self.limit_bytes = limit_bytes
        self.spent_bytes = spent_bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        out = func(*args, **(kwargs or {}))
        schema = getattr(func, "_schema", None)
        aliased = schema is not None and any(r.alias_info is not None for r in schema.returns)
        if not aliased:
            self.spent_bytes += sum(t.numel() * t.element_size() for t in _leaves(out)
                                    if not t.is_meta)
            if self.spent_bytes > self.limit_bytes:
                raise _over(f"running {func} for real", self.spent_bytes, self.limit_bytes)
        return out


def _leaves(x: Any) -> Iterator[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _leaves(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)


def _meta_attributes(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, Any]]:
    """(module, attribute, value) of every meta tensor a module holds outside its parameters
    and buffers (``self.h0 = torch.randn(...)`` built under a meta device), lists of tensors
    included."""
    found = []
    for m in model.modules():
        for name, value in vars(m).items():
            if name.startswith("_"):
                continue
            if any(t.is_meta for t in _leaves(value)):
                found.append((m, name, value))
    return found


def _nbytes(tensors: Iterator[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _made_up(t: torch.Tensor, inputs: bool = False) -> torch.Tensor:
    """A real CPU tensor of ``t``'s shape and dtype, with made-up values (module docstring)."""
    out = torch.empty(t.shape, dtype=t.dtype, device="cpu")
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return out.normal_() if inputs else out.uniform_(-0.1, 0.1)
    return out.zero_()


def _real_tree(x: Any, inputs: bool) -> Any:
    if isinstance(x, torch.Tensor):
        return _made_up(x, inputs).requires_grad_(x.requires_grad) if x.is_meta else x
    if isinstance(x, tuple):
        return tuple(_real_tree(v, inputs) for v in x)
    if isinstance(x, list):
        return [_real_tree(v, inputs) for v in x]
    if isinstance(x, dict):
        return {k: _real_tree(v, inputs) for k, v in x.items()}
    return x


def materialize(model: torch.nn.Module, inputs: Any, limit_bytes: int
                ) -> tuple[torch.nn.Module, Any, int]:
    """A copy of ``model`` and ``inputs`` with every meta tensor replaced by a real CPU one of
    the same shape and dtype (values as the module docstring says), and the bytes they take.
    A model that holds no meta tensor is used as it is (only meta inputs are made).

    Raises ``RealBytesLimitError`` before allocating anything when the parameters, buffers,
    tensor attributes and inputs would take more than ``limit_bytes``. The model is not touched.
    """
    state = [*model.parameters(), *model.buffers()]
    extra = [t for _, _, v in _meta_attributes(model) for t in _leaves(v)]
    meta_inputs = [t for t in _leaves(inputs) if t.is_meta]
    total = _nbytes(t for t in [*state, *extra, *meta_inputs] if t.is_meta)
    if total > limit_bytes:
        raise _over(f"the model's {len(state)} parameters and buffers and its inputs", total,
                    limit_bytes)
    if not any(t.is_meta for t in [*state, *extra]):  # a real model: only its inputs are meta
        return model, _real_tree(inputs, inputs=True), total
    twin = copy.deepcopy(model)
    twin.to_empty(device="cpu")  # parameters and buffers, uninitialised
    with torch.no_grad():
        for t in [*twin.parameters(), *twin.buffers()]:
            t.copy_(_made_up(t))
        for m in twin.modules():  # torch's own modules: a user's reset may want arguments
            reset = getattr(m, "reset_parameters", None)
            if callable(reset) and type(m).__module__.startswith("torch.nn."):
                reset()
    for m, name, value in _meta_attributes(twin):
        setattr(m, name, _real_tree(value, inputs=False))
    return twin, _real_tree(inputs, inputs=True), total
