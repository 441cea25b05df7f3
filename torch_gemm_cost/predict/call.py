"""The time of one call as the user's run has it: the kernels' sum, or an event pair around
``model(*inputs)`` with the host's issue time inside, or a CUDA graph replay.

``kernel_sequence`` orders a run's priced records as the host issues them: in eager mode each
GEMM and each ATen op is one issue (a view issues no kernel, but still costs the host a
dispatcher hop), with
``torch.compile`` each fused kernel and each extern GEMM is one (views cost nothing: inductor's
generated code reinterprets its buffers). Records of one graph node are one issue: one call
through the dispatcher, whatever it launches from C++. ``call_time`` prices the sequence under a timing
(``TIMINGS``) with a host's costs (``host.HostPrior``):

- ``"kernel"``: the kernels' sum, as a profiler's kernel table shows it;
- ``"event"``: CUDA events around the call, the host's issues overlapped with the GPU as one
  stream allows (``host.event_time_ms``); on a CPU, the host runs each op as it issues it;
- ``"graph"``: a CUDA graph replay (``reduce-overhead``, the ``cudagraphs`` backend) timed by
  events: the replay's floor, the copies of the inputs into the graph's static buffers, the
  kernels (``host.graph_time_ms``).

NB: the capture records ATen ops below Python, so it cannot tell a view the user's code calls
(Python and the dispatcher) from one a composite emits in C++ (``matmul``'s ``t``/``expand``,
``batch_norm``'s ``empty``, a ``detach`` after an in-place op: the dispatcher alone): every
issue without a kernel is priced as the latter, ``eager_view_ms``, a few µs against an op's
tens. A composite's inner op that launches a kernel is priced as a whole op.

NB: the issue order follows the captured graph's node order, forward first, backward in reverse;
a backward op, issued by autograd's engine in C++, is priced as an eager op, Python included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..hardware.catalog import DeviceSpec
from ..suggest import check_choice
from .host import HostCosts, HostPrior, event_time_ms, graph_time_ms
from .ops import OP_CLASSES, OpCostModel, dropout_calls, load_op_costs, memory_time_ms
from .price import GemmEstimate, OpEstimate

__all__ = ["ISSUE_KINDS", "TIMINGS", "CallTime", "KernelSequence", "call_time", "check_timing",
           "kernel_sequence"]

TIMINGS: tuple[str, ...] = ("event", "kernel", "graph")
# what one issue is, by what the host pays for it: an eager op that launches a kernel (Python,
# the dispatcher, a launch), an eager op that launches none (a view, an allocation, a detach, a
# composite's inner op: a dispatcher hop), one of a compiled program's kernels (inductor's or an
# extern GEMM)
ISSUE_KINDS: tuple[str, ...] = ("op", "view", "kernel")
_PHASE_RANK = {"forward": 0, "backward": 1, "backward_dx": 1, "backward_dw": 1, "optimizer": 2}


def check_timing(timing: str, device: DeviceSpec) -> str:
    """``timing`` checked: one of ``TIMINGS`` (else the error names the nearest), and no graph
    replay on a CPU."""
    check_choice("timing", timing, TIMINGS)
    if timing == "graph" and device.architecture == "cpu":
        raise ValueError(f"timing='graph' is a CUDA graph replay, which {device.name} does not "
                         "run; use timing='event' or 'kernel'")
    return timing


@dataclass(frozen=True)
class KernelSequence:
    """A call's issues in the order the host makes them, (N,) each: ``gpu_ms`` the kernel
    time of each (0 for a view), ``kind`` its index in ``ISSUE_KINDS``; and the bytes of the
    call's tensor inputs (``input_bytes``: what a graph replay copies); ``compiled``: the
    issues are a compiled program's."""

    gpu_ms: torch.Tensor  # (N,) float64
    kind: torch.Tensor  # (N,) long
    input_bytes: int
    compiled: bool

    def host_ms(self, costs: HostCosts) -> torch.Tensor:
        """(N,) the host's time to issue each, under ``costs``; a compiled kernel without a
        fitted cost takes an eager op's."""
        kernel = (costs.compiled_kernel_ms if costs.compiled_kernel_ms is not None
                  else costs.eager_op_ms)
        per_kind = torch.tensor([costs.eager_op_ms, costs.eager_view_ms, kernel],
                                dtype=torch.float64)
        return per_kind[self.kind]


def kernel_sequence(gemms: Sequence[GemmEstimate], ops: Sequence[OpEstimate],
                    position: Mapping[str, int], *, compiled: bool,
                    input_bytes: int = 0) -> KernelSequence:
    """The issues of a run's priced records (``position``: each graph node's index, which
    orders them). Eager: each graph node is one issue, a call through the dispatcher however
    many kernels it launches from C++ (an LSTM's cuDNN steps, an einsum's bmm calls), a node of
    views only an issue without a kernel, a dropout captured as its decomposition one issue
    (``ops.dropout_calls``: CUDA's ``native_dropout``). Compiled: a fused kernel is one issue
    at its first op, a node inductor leaves to an extern call (a GEMM, an op it does not fuse)
    one, a view none."""
    issues: dict[tuple[str, ...], list[Any]] = {}  # id -> [order key, kind, gpu ms]
    view, op_kind = ISSUE_KINDS.index("view"), ISSUE_KINDS.index("kernel" if compiled else "op")

    def add(node: str, phase: str, kind: int, ms: float, kernel: str = "") -> None:
        # a record derived from a node's call is named after it (an LSTM's
        # ``lstm_input.rnn_step.0.0.3``, a fork's ``<node>.grad_sum``): the same issue
        node = node.partition(".")[0]
        ident = ("kernel", kernel) if kernel else ("node", node, phase)
        if ident not in issues:
            pos = position.get(node, len(position))
            rank = _PHASE_RANK.get(phase, 0)
            issues[ident] = [(rank, -pos if rank == 1 else pos), kind, 0.0]
        entry = issues[ident]
        entry[1] = min(entry[1], kind)  # a node that launches a kernel is an op, not a view
        entry[2] += ms

    for g in gemms:
        if g.bound != "fused":  # not inside an attention kernel
            add(g.site.node, g.site.phase, op_kind, g.time_ms)
    # a dropout captured as bernoulli_, div_ and mul is one native_dropout call on a GPU
    dropout = {} if compiled else dropout_calls([o.op for o in ops])
    for i, o in enumerate(ops):
        if o.op.op_class == "view":
            if not compiled:
                add(o.op.node, o.op.phase, view, 0.0)
        else:
            node = ops[dropout[i]].op.node if i in dropout else o.op.node
            add(node, o.op.phase, op_kind, o.time_ms or 0.0,
                o.kernel if compiled else "")
    ordered = sorted(issues.values(), key=lambda e: e[0])
    return KernelSequence(torch.tensor([e[2] for e in ordered], dtype=torch.float64),
                          torch.tensor([e[1] for e in ordered], dtype=torch.long), input_bytes,
                          compiled)


@dataclass(frozen=True)
class CallTime:
    """One call's time under ``timing``, and its parts.

    ``gpu_ms``: the kernels' sum. ``host_ms``: the host's own time in the call: entering it and
    issuing every op (eager, compiled), or the replay's floor (graph). ``copy_ms``: a graph
    replay's input copies (0 elsewhere). ``total_ms``: what ``timing`` measures; ``lo_ms`` /
    ``hi_ms`` the same over the range of host costs (``host.HostPrior``: the fitted hosts'
    spread, or a measured host's), the GPU times held at their point. ``host``: where the host
    costs come from. ``overlap``: the host issues while the GPU runs (a GPU, not a CPU)."""

    timing: str
    gpu_ms: float
    host_ms: float
    copy_ms: float
    total_ms: float
    lo_ms: float
    hi_ms: float
    host: str
    issues: KernelSequence = field(compare=False, repr=False)
    prior: HostPrior = field(compare=False, repr=False)
    overlap: bool = True

    def bounds(self, gpu_lo_ms: float, gpu_hi_ms: float) -> tuple[float, float]:
        """(lo, hi) of the call with the kernels' sum at ``gpu_lo_ms`` / ``gpu_hi_ms`` (every
        kernel scaled alike, e.g. to the GPU interval's ends) and the host costs at the ends
        of their range."""
        scale_lo = gpu_lo_ms / self.gpu_ms if self.gpu_ms else 1.0
        scale_hi = gpu_hi_ms / self.gpu_ms if self.gpu_ms else 1.0
        lo = _time_ms(self.issues, self.timing, self.prior.lo, self.overlap, self.copy_ms,
                      scale_lo)[0]
        hi = _time_ms(self.issues, self.timing, self.prior.hi, self.overlap, self.copy_ms,
                      scale_hi)[0]
        return lo, hi


def call_time(seq: KernelSequence, timing: str, prior: HostPrior, device: DeviceSpec,
              op_costs: OpCostModel | None = None) -> CallTime:
    """The call of ``seq`` on ``device`` under ``timing``, at the prior's point and range."""
    check_timing(timing, device)
    overlap = device.architecture != "cpu"
    copy = input_copy_ms(seq.input_bytes, device, op_costs) if timing == "graph" else 0.0
    total, host = _time_ms(seq, timing, prior.mid, overlap, copy)
    lo = _time_ms(seq, timing, prior.lo, overlap, copy)[0]
    hi = _time_ms(seq, timing, prior.hi, overlap, copy)[0]
    return CallTime(timing, float(seq.gpu_ms.sum()), host, copy, total, lo, hi, prior.source,
                    seq, prior, overlap)


def _time_ms(seq: KernelSequence, timing: str, costs: HostCosts, overlap: bool, copy_ms: float,
             gpu_scale: float = 1.0) -> tuple[float, float]:
    """(the call's time under ``timing``, the host's own time in it) with ``costs``, every
    kernel's time times ``gpu_scale``."""
    gpu = seq.gpu_ms * gpu_scale  # (N,)
    entry = _entry_ms(costs, seq.compiled)
    if timing == "graph":
        floor = costs.graph_call_ms if costs.graph_call_ms is not None else entry
        return float(graph_time_ms(gpu, copy_ms, floor)), floor
    host = seq.host_ms(costs)  # (N,)
    host_ms = entry + float(host.sum())
    if timing == "event":
        return float(event_time_ms(host, gpu, entry, overlap=overlap)), host_ms
    return float(gpu.sum()), host_ms


def _entry_ms(costs: HostCosts, compiled: bool) -> float:
    """Entering the call: dynamo's guards and the compiled entry, or the eager module call."""
    if compiled and costs.compiled_call_ms is not None:
        return costs.compiled_call_ms
    return costs.eager_call_ms


def input_copy_ms(input_bytes: int, device: DeviceSpec, op_costs: OpCostModel | None = None
                  ) -> float:
    """A graph replay's copy of ``input_bytes`` of inputs into its static buffers: one kernel
    reading and writing them at the copy class's share of the DRAM bandwidth."""
    if input_bytes <= 0:
        return 0.0
    model = op_costs or load_op_costs()
    eta = torch.tensor(model.eta_on(device)[OP_CLASSES.index("copy")], dtype=torch.float64)
    t = memory_time_ms(torch.tensor([2.0 * input_bytes], dtype=torch.float64),
                       torch.ones(1, dtype=torch.float64), eta, model.launch_ms,
                       device.dram_bw_bytes_per_s)
    return float(t[0])
