"""A recurrent layer (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) as cuDNN runs it: one ATen call
(``aten.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu``, kept whole by capture) and, per layer
and direction:

- ``rnn_input``: one GEMM projecting every step's input at once, (T·B, in) · W_ihᵀ (G·H, in),
  the biases fused (G gates: 4 for an LSTM, 3 for a GRU, 1 for a plain RNN);
- per step, ``rnn_hidden``: (B, H_out) · W_hhᵀ (G·H, H_out), and for an LSTM with
  ``proj_size`` ``rnn_proj``: (B, H) · W_hrᵀ (H_out, H);
- per step, one elementwise kernel (an ``OtherOp`` of the node, ``rnn_other_ops``) that adds the
  two gate pre-activations and applies the cell: it reads both (B, G·H) pre-activations and the
  previous state and writes the new state (LSTM: c read, h and c written; GRU: h read and
  written; RNN: h written).

The steps of one direction depend on each other, so they are T GEMMs of B rows, not one GEMM
of T·B rows: their kernels run one after another, which is what makes a long recurrence slow.
cuDNN issues them from C++ faster than they run, so each cell kernel costs its kernel time
(``predict.ops``: a fused elementwise kernel's floor), not an eager kernel's launch.

NB: cuDNN's persistent kernels (small hidden sizes, fp16) keep W_hh on chip across steps and
run faster than T launches; not modelled. In training, the weight gradients are recorded per
step as autograd's formulas give them (cuDNN sums them in one GEMM per layer), each cell's
backward as one kernel of its forward bytes; dropout between layers is not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .handlers import (
    ForwardGemm,
    HandlerContext,
    bind_arguments,
    matrix_layout,
    op_name,
    register_gemm_handler,
)
from .sizing import _Ctx
from .types import OtherOp, alignment_bytes

__all__ = ["RNN_GATES", "RNN_STEP", "RnnShape", "rnn_other_ops", "rnn_shape"]

RNN_GATES: dict[str, int] = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
RNN_STEP = "rnn_step"  # an OtherOp node name "<rnn node>.rnn_step.<layer>.<direction>.<t>"
# tensors of (B, H) the cell reads besides the two (B, G·H) pre-activations, and writes
_CELL_IO: dict[str, tuple[int, int]] = {"lstm": (1, 2), "gru": (1, 1), "rnn_tanh": (0, 1),
                                        "rnn_relu": (0, 1)}


@dataclass(frozen=True)
class RnnShape:
    """The sizes of one recurrent call: T ``steps`` of ``batch`` B rows through ``layers`` ×
    ``directions`` cells of ``hidden`` H units with ``gates`` G, each emitting ``out`` (H, or
    ``proj_size``); ``weights`` holds each layer-direction's (W_ih, W_hh, W_hr or None) as the
    node's arguments."""

    kind: str
    steps: int
    batch: int
    layers: int
    directions: int
    hidden: int
    out: int
    gates: int
    bias: bool
    weights: tuple[tuple[Any, Any, Any], ...]


def rnn_shape(kind: str, args: Mapping[str, Any], ctx: HandlerContext) -> RnnShape:
    """The sizes of a recurrent call of ``kind`` (``RNN_GATES``) from its bound arguments."""
    x = ctx.tensor(args["input"])
    params = list(args["params"])
    layers, directions = int(args["num_layers"]), 2 if args["bidirectional"] else 1
    if x.dim() == 3:
        t_dim = 1 if args["batch_first"] else 0
        steps, batch = int(x.shape[t_dim]), int(x.shape[1 - t_dim])
    else:  # unbatched (T, in)
        steps, batch = int(x.shape[0]), 1
    per = len(params) // (layers * directions)
    has_proj = per in (3, 5)  # w_ih, w_hh[, b_ih, b_hh][, w_hr]
    weights = tuple((params[i * per], params[i * per + 1],
                     params[(i + 1) * per - 1] if has_proj else None)
                    for i in range(layers * directions))
    w_hh = ctx.tensor(weights[0][1])  # (G·H, out)
    gates = RNN_GATES[kind]
    return RnnShape(kind, steps, batch, layers, directions, int(w_hh.shape[0]) // gates,
                    int(w_hh.shape[1]), gates, bool(args["has_biases"]), weights)


def _gemm_rnn(kind: str):
    def handler(args: Mapping[str, Any], ctx: HandlerContext) -> list[ForwardGemm]:
        if not isinstance(args.get("params"), (list, tuple)):
            return []  # a packed sequence (the ``.data`` overload): priced as memory-bound
        s = rnn_shape(kind, args, ctx)
        elem = ctx.elem_bytes
        x = ctx.tensor(args["input"])
        upstream = ctx.requires_grad(args["input"])
        out: list[ForwardGemm] = []
        for i, (w_ih, w_hh, w_hr) in enumerate(s.weights):
            layer = i // s.directions
            k_in = int(x.shape[-1]) if layer == 0 else s.directions * s.out
            ih, hh = ctx.tensor(w_ih), ctx.tensor(w_hh)
            g_ih, g_hh = ctx.requires_grad(w_ih), ctx.requires_grad(w_hh)
            row = (False, alignment_bytes(k_in, elem))  # (T·B, in) rows, contiguous
            out.append(ForwardGemm("rnn_input", 1, s.steps * s.batch, s.gates * s.hidden, k_in,
                                   row, matrix_layout(ih, elem, swap=True), bias=s.bias,
                                   grad_a=upstream, grad_b=g_ih, weight_b=True))
            upstream = upstream or g_ih or g_hh
            step = [ForwardGemm("rnn_hidden", 1, s.batch, s.gates * s.hidden, s.out,
                                (False, alignment_bytes(s.out, elem)),
                                matrix_layout(hh, elem, swap=True), grad_a=upstream,
                                grad_b=g_hh, weight_b=True)]
            if w_hr is not None:
                step.append(ForwardGemm("rnn_proj", 1, s.batch, s.out, s.hidden,
                                        (False, alignment_bytes(s.hidden, elem)),
                                        matrix_layout(ctx.tensor(w_hr), elem, swap=True),
                                        grad_a=upstream, grad_b=ctx.requires_grad(w_hr),
                                        weight_b=True))
            out.extend(step * s.steps)  # the steps run one after another, alike
        return out

    return handler


for _kind in RNN_GATES:
    register_gemm_handler(_kind, _gemm_rnn(_kind))


def rnn_other_ops(node: Any, ctx: _Ctx, module: str, module_type: str,
                  handler_ctx: HandlerContext) -> list[OtherOp]:
    """The per-step cell kernels of recurrent ``node`` (module docstring): one elementwise
    ``OtherOp`` per layer, direction and step. Bytes per step, B rows of H at the activation
    size e: 2·G·H read (both pre-activations), the state read and written (LSTM: 11·B·H·e)."""
    kind = op_name(node.target)
    args = bind_arguments(node)
    if not isinstance(args.get("params"), (list, tuple)):
        return []
    s = rnn_shape(kind, args, handler_ctx)
    e = ctx.elem_bytes(handler_ctx.tensor(args["input"]).dtype)
    reads, writes = _CELL_IO[kind]
    step_bytes = s.batch * s.hidden * e * (2 * s.gates + reads + writes)
    return [OtherOp(module=module, module_type=module_type, op=f"aten.{kind}",
                    node=f"{node.name}.{RNN_STEP}.{i // s.directions}.{i % s.directions}.{t}",
                    phase="forward", op_class="elementwise", dtype=ctx.act_name,
                    numel=s.batch * s.hidden, dram_bytes=step_bytes)
            for i in range(len(s.weights)) for t in range(s.steps)]
