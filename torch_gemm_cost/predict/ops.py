"""The non-GEMM op cost model: a time for every other op, as bytes / (η·DRAM bandwidth) + launches.

Per op class (elementwise, norm, softmax, ...) two constants are fitted on measured ops
(``train/ops.py``, shipped in ``data/op_costs.json``): η, the fraction of the datasheet DRAM
bandwidth the class's kernels reach, and the event-timed floor of one isolated kernel. Inside a
model, kernels run back to back on one stream, so each pays ``launch_ms``, the gap between
consecutive kernels, instead of that floor.

- Views and metadata ops cost nothing; ops of class ``other`` are unmodelled (time None).
- Backward ops are priced from the forward op of the same node, with the traffic of the
  kernels autograd runs for it (``BACKWARD``); one without a forward twin (a bias gradient,
  say) is one kernel moving its own ``dram_bytes``.
- The softmax inside a fused SDPA kernel never touches DRAM for its scores: it costs its FLOPs
  at the device's vector fp32 rate, plus any explicit mask it reads, and launches nothing.
- The optimizer's update (``gemms.extract.optimizer_ops``) is ops of phase ``optimizer``.

NB: every tensor is assumed to come from DRAM; on large-L2 GPUs (A100: 40 MB) small
activations partly hit L2, so such ops run faster than predicted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from ..devices import DeviceSpec
from ..dtypes import DTYPES
from ..gemms import OtherOp

__all__ = [
    "BACKWARD",
    "OP_CLASSES",
    "OpCostModel",
    "load_op_costs",
    "memory_time_ms",
    "op_times_ms",
]

OP_CLASSES: tuple[str, ...] = (
    "elementwise",
    "norm",
    "softmax",
    "reduction",
    "copy",
    "embedding",
    "view",
    "attention",
    "other",
)
_FREE = ("view",)
_UNMODELLED = ("other",)

# Backward of a forward op, by ATen base name: (bytes as a multiple of the forward op's bytes,
# kernels). E.g. gelu reads x, writes y (2 tensor passes); its backward reads dy and x and writes
# dx (3 passes): 1.5x in one kernel. Names missing here use _BACKWARD_DEFAULT.
BACKWARD: dict[str, tuple[float, int]] = {
    # dx = dy (and dy for the other operand): no kernel. Where a residual stream forked,
    # autograd sums the branch's gradient into the stream's: a record of its own at the fork
    # (gemms.extract, ``<node>.grad_sum``), not the joining add's. mul/div depend on their
    # operands and are priced in _row.
    "add": (0.0, 0),
    "sub": (0.0, 0),
    "neg": (1.0, 1),
    "gelu": (1.5, 1),
    "relu": (1.5, 1),
    "threshold": (1.5, 1),
    "tanh": (1.5, 1),
    "sigmoid": (1.5, 1),
    "silu": (1.5, 1),
    "erf": (1.5, 1),
    "exp": (1.5, 1),
    "sqrt": (1.5, 1),
    "rsqrt": (1.5, 1),
    "pow": (2.5, 3),  # dy · e · x^(e-1): pow, mul, mul
    "softmax": (1.5, 1),
    "_softmax": (1.5, 1),
    "log_softmax": (1.5, 1),
    "_log_softmax": (1.5, 1),
    "_safe_softmax": (1.5, 1),
    # dx (reads dy, x; writes dx) and dγ/dβ (reads dy, x again): 5 passes against 2
    "native_layer_norm": (2.5, 2),
    "layer_norm": (2.5, 2),
    "rms_norm": (2.5, 2),
    "_fused_rms_norm": (2.5, 2),
    "native_dropout": (1.0, 1),
    "dropout": (1.0, 1),  # dy·mask·scale: same passes as forward
    "embedding": (1.5, 3),  # sort indices, scatter-add rows. NB: the zero fill of dW is not here
}
_BACKWARD_DEFAULT: tuple[float, int] = (1.0, 1)
# backward is a view of the gradient (or nothing): no kernel
_NO_BACKWARD_KERNEL = frozenset({"bernoulli"})

@dataclass(frozen=True)
class OpCostModel:
    """Fitted constants per op class, in ``OP_CLASSES`` order.

    ``eta``: fraction of datasheet DRAM bandwidth (NaN: unmodelled). ``floor_ms``: event-timed
    floor of one isolated kernel (used to score the fit on measured ops). ``launch_ms``: the
    cost of one kernel in a stream of back-to-back kernels.
    """

    eta: tuple[float, ...]
    floor_ms: tuple[float, ...]
    launch_ms: float
    provenance: Mapping[str, Any]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OpCostModel:
        classes = d["classes"]
        missing = [c for c in OP_CLASSES if c not in classes and c not in _FREE + _UNMODELLED]
        if missing:
            raise ValueError(f"op cost table lacks classes {missing}; it has {sorted(classes)}")

        def get(c: str, key: str) -> float:
            if c in _FREE:
                return 1.0 if key == "eta" else 0.0
            if c in _UNMODELLED:
                return float("nan")
            return float(classes[c][key])

        return cls(
            eta=tuple(get(c, "eta") for c in OP_CLASSES),
            floor_ms=tuple(get(c, "floor_ms") for c in OP_CLASSES),
            launch_ms=float(d["launch_ms"]),
            provenance=dict(d.get("provenance", {})),
        )

    @classmethod
    def load(cls, path: str | Path | None = None) -> OpCostModel:
        """The shipped table (``data/op_costs.json``) or one written by ``train.ops``."""
        if path is None:
            return load_op_costs()
        return cls.from_dict(json.loads(Path(path).read_text()))


@lru_cache(maxsize=1)
def load_op_costs() -> OpCostModel:
    text = resources.files("torch_gemm_cost").joinpath("data/op_costs.json").read_text()
    return OpCostModel.from_dict(json.loads(text))


def _class_index(c: str) -> int:
    try:
        return OP_CLASSES.index(c)
    except ValueError:
        return OP_CLASSES.index("other")


def memory_time_ms(
    dram_bytes: torch.Tensor,
    kernels: torch.Tensor,
    eta: torch.Tensor,
    overhead_ms: torch.Tensor | float,
    bw_bytes_per_s: float | torch.Tensor,
) -> torch.Tensor:
    """kernels·overhead + bytes / (η·BW), all (N,); NaN where η is NaN (unmodelled)."""
    return kernels * overhead_ms + dram_bytes / (eta * bw_bytes_per_s) * 1e3


def op_times_ms(
    others: Sequence[OtherOp], device: DeviceSpec, model: OpCostModel | None = None
) -> list[float | None]:
    """A time per op in ms (None where unmodelled), one batched evaluation for all of them."""
    model = model or load_op_costs()
    if not others:
        return []
    forward = {op.node: op for op in others if op.phase == "forward"}
    rows = [_row(op, forward.get(op.node)) for op in others]
    for i, (fused_bytes, fused_kernels) in _dropout_fusion(others).items():
        rows[i] = (rows[i][0], fused_bytes, fused_kernels, 0.0)
    # (N,) each
    cls = torch.tensor([r[0] for r in rows], dtype=torch.long)
    dram = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    kernels = torch.tensor([r[2] for r in rows], dtype=torch.float64)
    on_chip_flops = torch.tensor([r[3] for r in rows], dtype=torch.float64)
    eta = torch.tensor(model.eta, dtype=torch.float64)[cls]
    time = memory_time_ms(dram, kernels, eta, model.launch_ms, device.dram_bw_bytes_per_s)
    vector_flops_per_s = device.peak("fp32") or device.peak_flops_per_s("float32")
    time = time + on_chip_flops / vector_flops_per_s * 1e3
    # an op on an empty tensor launches nothing (PyTorch returns early); the optimizer's update
    # runs over the parameters whatever the batch. NB: a zero-fill of a weight gradient is free
    empty = torch.tensor([op.numel == 0 and op.phase != "optimizer" for op in others])
    time = torch.where(empty & ~torch.isnan(time), torch.zeros_like(time), time)
    return [None if math.isnan(t) else float(t) for t in time.tolist()]


def _row(op: OtherOp, fwd: OtherOp | None) -> tuple[int, float, float, float]:
    """(class index, DRAM bytes, kernels, on-chip FLOPs) of one op."""
    if op.op_class in _FREE or op.phase == "backward" and _base(op) in _NO_BACKWARD_KERNEL:
        return _class_index("view"), 0.0, 0.0, 0.0
    if op.op_class == "attention" or op.op.endswith("scaled_dot_product_attention"):
        # inside the fused kernel: scores stay on chip; the mask (if any) is read
        return _class_index("attention"), float(op.dram_bytes), 0.0, float(op.flops)
    base = _base(op)
    index = _class_index(
        _OTHER_AS.get(base, op.op_class) if op.op_class == "other" else op.op_class
    )
    if op.phase != "backward" or fwd is None:  # a backward kernel recorded with its own bytes
        return index, float(op.dram_bytes), 1.0, 0.0
    fwd_bytes = float(fwd.dram_bytes)
    full = _full_operands(fwd, fwd_bytes)
    if base in ("mul", "div"):
        # two full operands: dy·b and dy·a, 3 passes each; by a scalar: dy·c, as forward
        factor, kernels = (2.0, 2) if full else (1.0, 1)
    else:
        factor, kernels = BACKWARD.get(base, _BACKWARD_DEFAULT)
    return index, factor * fwd_bytes, float(kernels), 0.0


def _base(op: OtherOp) -> str:
    """``aten.add_.Tensor`` / ``aten.add_`` -> ``add``."""
    parts = op.op.split(".")
    name = parts[1] if len(parts) > 1 and parts[0] in ("aten", "prims") else parts[-1]
    return name.rstrip("_")


def _elem_bytes(op: OtherOp) -> int:
    return DTYPES[op.dtype].in_bytes if op.dtype in DTYPES else 4


def _full_operands(fwd: OtherOp, fwd_bytes: float) -> bool:
    """Whether a binary op read two full-size operands (3 tensor passes, not 2)."""
    return fwd_bytes / max(fwd.numel * _elem_bytes(fwd), 1) >= 2.5


# ops of class "other" that run a plain memory-bound kernel
_OTHER_AS: dict[str, str] = {
    "bernoulli": "elementwise",
    "uniform": "elementwise",
    "normal": "elementwise",
    "nll_loss_forward": "reduction",
    "nll_loss_backward": "elementwise",
    "nll_loss2d_forward": "reduction",
    "fill": "elementwise",
    "zero": "elementwise",
    "masked_fill": "elementwise",
    "clamp": "elementwise",
}


def _dropout_fusion(others: Sequence[OtherOp]) -> dict[int, tuple[float, float]]:
    """(DRAM bytes, kernels) overrides for dropout captured as its decomposition.

    On a GPU, training-mode dropout is one fused kernel (``native_dropout``: read x, write y
    and a 1-byte mask) and its backward another (read dy and the mask, write dx). Captured
    off-GPU it shows as ``bernoulli_`` (the mask), ``div_`` (mask / (1 - p)) and ``mul``
    (x · mask): the bernoulli takes the fused kernel's cost, the div and mul are free, and the
    mul's backward becomes the fused backward.
    """
    out: dict[int, tuple[float, float]] = {}
    pending: dict[tuple[str, int], list[str]] = {}  # (module, numel) -> ops still to absorb
    dropout_nodes: set[str] = set()
    for i, op in enumerate(others):
        base, key = _base(op), (op.module, op.numel)
        if op.phase == "forward" and base == "bernoulli":
            out[i] = (float(op.numel * (2 * _elem_bytes(op) + 1)), 1.0)
            pending[key] = ["div", "mul"]
        elif op.phase == "forward" and pending.get(key) and pending[key][0] == base:
            pending[key].pop(0)
            out[i] = (0.0, 0.0)
            if base == "mul":
                dropout_nodes.add(op.node)
        elif op.phase == "backward" and base == "mul" and op.node in dropout_nodes:
            out[i] = (float(op.numel * (2 * _elem_bytes(op) + 1)), 1.0)
    return out
