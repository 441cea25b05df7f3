"""The optimizer's step, as ops of phase ``optimizer``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..hardware.dtypes import DTYPES
from ..suggest import unknown
from .types import OtherOp

__all__ = ["OPTIMIZERS", "adamw_ops", "optimizer_ops"]

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
_FOREACH_TENSORS_PER_LAUNCH = 110  # NB: multi_tensor_apply's depth-4 chunking, roughly


def adamw_ops(n_params: int, n_tensors: int, dtype: str = "float32") -> tuple[OtherOp, ...]:
    """The update of ``torch.optim.AdamW`` (foreach path) over ``n_params`` elements held in
    ``n_tensors`` tensors, as ops of phase ``optimizer``; one record per kernel group."""
    if n_params < 0 or n_tensors < 0:
        raise ValueError(f"n_params and n_tensors must be >= 0, got {n_params}, {n_tensors}")
    elem = DTYPES[dtype].in_bytes if dtype in DTYPES else 4
    launches = max(1, -(-n_tensors // _FOREACH_TENSORS_PER_LAUNCH))
    out = []
    for name, passes in _ADAMW_PASSES:
        for i in range(launches):
            share = n_params // launches + (1 if i < n_params % launches else 0)
            out.append(
                OtherOp(
                    module="",
                    module_type="AdamW",
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


OPTIMIZERS: tuple[str, ...] = ("adamw", "adam")


def optimizer_ops(
    optimizer: Any, params: Iterable[torch.Tensor] | None = None
) -> tuple[OtherOp, ...]:
    """The update step of ``optimizer`` over ``params`` (those with ``requires_grad``).

    ``optimizer`` is a name in ``OPTIMIZERS`` (then ``params`` is required) or a
    ``torch.optim.AdamW`` / ``Adam`` instance (its own parameters). NB: Adam without weight
    decay skips the first kernel; it is priced as AdamW.
    """
    if isinstance(optimizer, (torch.optim.AdamW, torch.optim.Adam)):
        params = [p for g in optimizer.param_groups for p in g["params"]]
    elif isinstance(optimizer, str) and optimizer.lower() in OPTIMIZERS:
        if params is None:
            raise ValueError(
                f"optimizer={optimizer!r} needs the model's parameters to size its update"
            )
    else:
        raise ValueError(f"{unknown('optimizer', optimizer, OPTIMIZERS)} Or pass a "
                         "torch.optim.AdamW / Adam instance.")
    trained = [p for p in params if p.requires_grad]
    dtype = str(trained[0].dtype).removeprefix("torch.") if trained else "float32"
    return adamw_ops(sum(p.numel() for p in trained), len(trained), dtype)
