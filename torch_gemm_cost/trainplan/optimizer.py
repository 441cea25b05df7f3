"""One GPU's optimizer step over its parameters, as ops the op cost model prices.

- ``adamw`` and ``adam``: torch.optim.AdamW's foreach path as ``records.optimizer`` writes it
  (8 kernels over the fp32 master weights, their gradients and both moments);
- ``fused_adam``: one multi-tensor kernel (apex's FusedAdam, which Megatron-LM runs, and
  torch's ``fused=True``) reading each weight, gradient and both moments once and writing the
  weight and the moments;
- under mixed precision, one more kernel copies the updated fp32 master weights into the
  model's 16-bit weights.
"""

from __future__ import annotations

from ..hardware.catalog import DeviceSpec
from ..predict.ops import OpCostModel
from ..predict.price import estimate_ops
from ..records import OtherOp, adamw_ops

__all__ = ["optimizer_ms", "optimizer_step_ops"]


def optimizer_step_ops(optimizer: str, params: int, tensors: int, act_bytes: int
                       ) -> tuple[OtherOp, ...]:
    """The optimizer step's kernels over ``params`` elements in ``tensors`` tensors of a model
    held in ``act_bytes``-byte elements (fp32 master weights and states)."""
    if params <= 0:
        return ()
    ops: tuple[OtherOp, ...]
    if optimizer == "fused_adam":
        grad = act_bytes
        ops = (OtherOp(module="", module_type="FusedAdam", op="fused_adam",
                       node="optimizer.step", phase="optimizer", op_class="elementwise",
                       dtype="float32", numel=params,
                       dram_bytes=params * (4 + grad + 4 + 4 + 3 * 4)),)
    else:
        ops = adamw_ops(params, tensors, "float32")
    if act_bytes < 4:  # the master weights copied into the model's 16-bit ones
        ops = (*ops, OtherOp(module="", module_type="MixedPrecision", op="aten._to_copy",
                             node="optimizer.copy", phase="optimizer", op_class="copy",
                             dtype="float32", numel=params, dram_bytes=params * (4 + act_bytes)))
    return ops


def optimizer_ms(spec: DeviceSpec, ops: tuple[OtherOp, ...],
                 op_costs: OpCostModel | None = None) -> float:
    """The ops' time on ``spec`` by the op cost model."""
    if not ops:
        return 0.0
    return sum(o.time_ms or 0.0 for o in estimate_ops(ops, spec, op_costs))
