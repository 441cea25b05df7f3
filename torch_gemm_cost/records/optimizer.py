"""The optimizer: its step, as ops of phase ``optimizer``, and the states it keeps per
parameter."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..hardware.dtypes import DTYPES
from ..suggest import unknown
from .types import OtherOp

__all__ = ["OPTIMIZERS", "adamw_ops", "optimizer_name", "optimizer_ops", "optimizer_states",
           "sgd_ops"]

# the optimizer's update: torch.optim.AdamW's default foreach path, per parameter element
# (reads + writes of param, grad, exp_avg, exp_avg_sq and the sqrt temporary, in 8 kernels)
_ADAMW_PASSES: tuple[tuple[str, int], ...] = (
    ("aten._foreach_mul_", 2),  # p *= 1 - lr·wd
    ("aten._foreach_lerp_", 3),  # m = lerp(m, g, 1 - β1)
    ("aten._foreach_mul_", 2),  # v *= β2
    ("aten._foreach_addcmul_", 3),  # v += (1 - β2)·g·g
    ("aten._foreach_sqrt", 2),  # s = sqrt(v)
    ("aten._foreach_div_", 2),  # s /= sqrt(bias correction)
    ("aten._foreach_add_", 2),  # s += eps
    ("aten._foreach_addcdiv_", 4),  # p -= step·m / s
)
# torch.optim.SGD's foreach path with momentum (its buffer b), and without
_SGD_PASSES: tuple[tuple[str, int], ...] = (
    ("aten._foreach_mul_", 2),  # b *= momentum
    ("aten._foreach_add_", 3),  # b += (1 - dampening)·g
    ("aten._foreach_add_", 3),  # p -= lr·b
)
_SGD_PLAIN_PASSES: tuple[tuple[str, int], ...] = (("aten._foreach_add_", 3),)  # p -= lr·g
_FOREACH_TENSORS_PER_LAUNCH = 110  # NB: multi_tensor_apply's depth-4 chunking, roughly


def adamw_ops(n_params: int, n_tensors: int, dtype: str = "float32") -> tuple[OtherOp, ...]:
    """The update of ``torch.optim.AdamW`` (foreach path) over ``n_params`` elements held in
    ``n_tensors`` tensors, as ops of phase ``optimizer``; one record per kernel group."""
    return _step_ops(_ADAMW_PASSES, "AdamW", n_params, n_tensors, dtype)


def sgd_ops(n_params: int, n_tensors: int, dtype: str = "float32",
            momentum: bool = True) -> tuple[OtherOp, ...]:
    """The update of ``torch.optim.SGD`` (foreach path), with a momentum buffer or without."""
    passes = _SGD_PASSES if momentum else _SGD_PLAIN_PASSES
    return _step_ops(passes, "SGD", n_params, n_tensors, dtype)


def _step_ops(kernels: tuple[tuple[str, int], ...], module_type: str, n_params: int,
              n_tensors: int, dtype: str) -> tuple[OtherOp, ...]:
    """One record per kernel group of an update that passes over every element ``kernels``
    times (each entry: the op and the tensors it reads and writes)."""
    if n_params < 0 or n_tensors < 0:
        raise ValueError(f"n_params and n_tensors must be >= 0, got {n_params}, {n_tensors}")
    elem = DTYPES[dtype].in_bytes if dtype in DTYPES else 4
    launches = max(1, -(-n_tensors // _FOREACH_TENSORS_PER_LAUNCH))
    out = []
    for name, passes in kernels:
        for i in range(launches):
            share = n_params // launches + (1 if i < n_params % launches else 0)
            out.append(
                OtherOp(
                    module="",
                    module_type=module_type,
                    op=name,
                    node="optimizer.step",
                    phase="optimizer",
                    op_class="elementwise",
                    dtype=dtype,
                    numel=share,
                    dram_bytes=passes * share * elem,
                )
            )
    return tuple(out)


OPTIMIZERS: tuple[str, ...] = ("adamw", "adam", "sgd", "none")
# the states each keeps per parameter element: Adam's exp_avg and exp_avg_sq, SGD's momentum
# buffer (an SGD instance without momentum keeps none)
_STATES = {"adamw": 2, "adam": 2, "sgd": 1, "none": 0}


def optimizer_name(optimizer: Any) -> str:
    """The name in ``OPTIMIZERS`` of ``optimizer``: a name, None (``"none"``), or a
    ``torch.optim.AdamW`` / ``Adam`` / ``SGD`` instance."""
    if optimizer is None:
        return "none"
    for cls, name in ((torch.optim.AdamW, "adamw"), (torch.optim.Adam, "adam"),
                      (torch.optim.SGD, "sgd")):
        if isinstance(optimizer, cls):
            return name
    if isinstance(optimizer, str) and optimizer.lower() in OPTIMIZERS:
        return optimizer.lower()
    raise ValueError(f"{unknown('optimizer', optimizer, OPTIMIZERS)} Or pass a "
                     "torch.optim.AdamW / Adam / SGD instance.")


def optimizer_states(optimizer: Any) -> int:
    """The states ``optimizer`` keeps per trained parameter element: 2 for AdamW and Adam (3
    with ``amsgrad``), 1 for SGD with momentum (a name: with), 0 for SGD without and none."""
    name = optimizer_name(optimizer)
    if isinstance(optimizer, torch.optim.Optimizer):
        group = optimizer.param_groups[0] if optimizer.param_groups else {}
        if name == "sgd":
            return int(bool(group.get("momentum", 0)))
        return _STATES[name] + int(bool(group.get("amsgrad", False)))
    return _STATES[name]


def optimizer_ops(
    optimizer: Any, params: Iterable[torch.Tensor] | None = None
) -> tuple[OtherOp, ...]:
    """The update step of ``optimizer`` over ``params`` (those with ``requires_grad``).

    ``optimizer`` is a name in ``OPTIMIZERS`` (then ``params`` is required) or a
    ``torch.optim.AdamW`` / ``Adam`` / ``SGD`` instance (its own parameters); ``"none"`` has no
    step. NB: Adam without weight decay skips the first kernel; it is priced as AdamW.
    """
    name = optimizer_name(optimizer)
    if name == "none":
        return ()
    if isinstance(optimizer, torch.optim.Optimizer):
        params = [p for g in optimizer.param_groups for p in g["params"]]
    elif params is None:
        raise ValueError(
            f"optimizer={optimizer!r} needs the model's parameters to size its update"
        )
    trained = [p for p in params if p.requires_grad]
    dtype = str(trained[0].dtype).removeprefix("torch.") if trained else "float32"
    n_params, n_tensors = sum(p.numel() for p in trained), len(trained)
    if name == "sgd":
        return sgd_ops(n_params, n_tensors, dtype, momentum=optimizer_states(optimizer) > 0)
    return adamw_ops(n_params, n_tensors, dtype)
