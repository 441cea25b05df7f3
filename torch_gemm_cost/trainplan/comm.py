"""A layout's collectives, priced by ``predict.collectives`` on the device's node and network
(or by a cluster's measured profile, ``predict.comm_profile``), and how much of each the step
waits for.

- Tensor parallelism (Megatron, Shoeybi et al. 2019, §3): a forward all-reduce of each
  row-parallel GEMM's output and of the vocabulary embedding's, a backward all-reduce of the
  gradient of each replicated tensor column-parallel GEMMs read, and the vocab-parallel loss's
  three all-reduces of one fp32 value a token. Under sequence parallelism (Korthikanti et al.
  2022, §4.2.2) each becomes a reduce-scatter or an all-gather of the same tensor, and the
  backward pass's re-gather of a column GEMM's input runs under its dX GEMM (not waited for).
  They sit between the layer's kernels: the step waits for all of them. Full recomputation
  runs a layer's forward again, its collectives too.
- Pipeline parallelism: one micro-batch's hidden state sent to the next stage after each
  forward and its gradient back after each backward; across nodes with tp > 1 each rank sends
  its 1/tp share and the receiving node all-gathers it (Narayanan et al. 2021, §4.1).
- Context parallelism (ring attention): each layer passes its K and V chunks around the cp
  ranks, cp - 1 sends forward and twice that backward (dK, dV too), under attention's core.
- Expert parallelism (Megatron-Core's MoE layer, all-to-all token dispatcher): each MoE layer
  sends every token's ``experts_per_token`` copies to the GPUs holding their experts and
  brings the outputs back, two all-to-alls over the ep ranks forward and two (the gradients)
  backward, of each GPU's own tokens (its seq / tp share under sequence parallelism). They sit
  between the router and the experts: the step waits for them.
- Data parallelism: the gradients reduced over the dp·cp ranks once a step: an all-reduce
  (ZeRO 0), a reduce-scatter and, after the optimizer step, an all-gather of the updated 16-bit
  weights (ZeRO 1, 2); ZeRO 3 and FSDP gather each layer's weights before its forward and again
  before its backward and reduce-scatter its gradients, every micro-batch. Each overlaps the
  compute it can, as PyTorch DDP, FSDP and Megatron-Core (``--overlap-grad-reduce
  --overlap-param-gather``) run: a layer's bucket goes once its backward is done
  (``overlapped_ms``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hardware.catalog import DeviceSpec
from ..predict.collectives import collective_interval_ms
from ..predict.comm_host import COMM_HOSTS, host_collective_ms
from ..predict.comm_profile import CommProfile
from .layout import Layout, group_per_node
from .model import TrainingStep

__all__ = ["HOSTS", "Collectives", "dispatch_bytes", "ep_comm_ms", "overlapped_ms", "send_ms",
           "tp_comm_ms"]

# the host classes a user states (predict.comm_host), then the two ends of the hosts' spread
HOSTS: tuple[str, ...] = (*COMM_HOSTS, "low", "high")


@dataclass
class Collectives:
    """Prices a plan's collectives on ``spec`` (its network as the user states it,
    ``predict.comm_host.with_nics``): measured where ``profile`` covers a call, else the
    collective model at the host class ``host`` (``predict.comm_host``: ``"fitted"``, the
    shipped fit, or ``"reference"``, NCCL's own constants as a reference-architecture DGX/HGX
    cluster runs), or at the low or high end of how far hosts spread
    (``predict.collectives.collective_interval_ms``)."""

    spec: DeviceSpec
    profile: CommProfile | None = None
    host: str = "fitted"
    _cache: dict[tuple[str, float, int, int], float] = field(default_factory=dict, repr=False)

    def ms(self, collective: str, size_bytes: float, num_gpus: int, gpus_per_node: int) -> float:
        if num_gpus < 2 or size_bytes <= 0:
            return 0.0
        key = (collective, float(size_bytes), num_gpus, gpus_per_node)
        if key not in self._cache:
            self._cache[key] = self._price(*key)
        return self._cache[key]

    def _price(self, collective: str, size: float, n: int, g: int) -> float:
        if self.profile is not None:
            measured = self.profile.time_ms(collective, size, n, g)
            if measured is not None:
                return measured
        if self.host in COMM_HOSTS:
            return host_collective_ms(self.spec, collective, host=self.host, size_bytes=size,
                                      num_gpus=n, gpus_per_node=g)
        lo, hi = collective_interval_ms(self.spec, collective, size_bytes=size, num_gpus=n,
                                        gpus_per_node=g)
        return lo if self.host == "low" else hi

    def with_host(self, host: str) -> Collectives:
        return Collectives(self.spec, self.profile, host)


def tp_comm_ms(step: TrainingStep, layout: Layout, coll: Collectives
               ) -> tuple[list[float], list[float]]:
    """One micro-batch's tensor-parallel collectives per segment (index segment + 1): forward
    and backward."""
    size = step.layers + 2
    fwd, bwd = [0.0] * size, [0.0] * size
    tp = layout.tp
    if tp == 1:
        return fwd, bwd
    g = group_per_node(tp, 1, coll.spec.node_gpus)

    def add(times: list[float], seg: int, collective: str, nbytes: int) -> None:
        times[seg + 1] += coll.ms(collective, nbytes, tp, g)

    sp = layout.sequence_parallel
    for seg, nbytes in step.row_outputs:
        add(fwd, seg, "reduce_scatter" if sp else "all_reduce", nbytes)
        if sp:
            add(bwd, seg, "all_gather", nbytes)
    for seg, nbytes in step.column_inputs:
        add(bwd, seg, "reduce_scatter" if sp else "all_reduce", nbytes)
        if sp:
            add(fwd, seg, "all_gather", nbytes)
    for seg, nbytes in step.vocab_outputs:
        add(fwd, seg, "reduce_scatter" if sp else "all_reduce", nbytes)
    for seg, nbytes in step.loss_reductions:
        add(fwd, seg, "all_reduce", nbytes)
    return fwd, bwd


def dispatch_bytes(step: TrainingStep, layout: Layout) -> int:
    """One GPU's all-to-all buffer of one MoE layer and micro-batch (nccl-tests' size): its
    tokens' ``experts_per_token`` copies of the hidden state."""
    tokens = step.tokens // (layout.tp if layout.sequence_parallel else 1)
    k = int(step.shape.experts_per_token or 1)
    return tokens * k * int(step.shape.hidden_size or 0) * step.act_bytes


def ep_comm_ms(step: TrainingStep, layout: Layout, coll: Collectives
               ) -> tuple[list[float], list[float]]:
    """One micro-batch's expert-parallel all-to-alls per segment (index segment + 1): forward
    (dispatch, combine) and backward (their gradients). The ep ranks are tp apart: Megatron-Core
    lays the experts out on their own grid, tp-ep-dp-pp, the context-parallel ranks folded into
    its data-parallel ones (parallel_state's expert rank generator has cp = 1)."""
    size = step.layers + 2
    fwd, bwd = [0.0] * size, [0.0] * size
    if layout.ep == 1:
        return fwd, bwd
    g = group_per_node(layout.ep, layout.tp, coll.spec.node_gpus)
    one = coll.ms("alltoall", dispatch_bytes(step, layout), layout.ep, g)
    for seg in step.moe_layers:
        fwd[seg + 1] += 2 * one
        bwd[seg + 1] += 2 * one
    return fwd, bwd


def send_ms(step: TrainingStep, layout: Layout, coll: Collectives) -> float:
    """One micro-batch's hidden state (or its gradient) sent to the neighbouring stage."""
    if layout.pp == 1:
        return 0.0
    stride = layout.tp * layout.cp * layout.dp
    same_node = stride * 2 <= coll.spec.node_gpus
    nbytes = step.boundary_bytes
    if same_node or layout.tp == 1:
        return coll.ms("send_recv", nbytes, 2, 2 if same_node else 1)
    g = group_per_node(layout.tp, 1, coll.spec.node_gpus)
    return (coll.ms("send_recv", nbytes / layout.tp, 2, 1)
            + coll.ms("all_gather", nbytes, layout.tp, g))


def cp_send_ms(step: TrainingStep, layout: Layout, coll: Collectives) -> float:
    """One layer's K and V chunk sent to the next context-parallel rank, one micro-batch."""
    if layout.cp == 1:
        return 0.0
    s = step.shape
    heads = int(s.num_attention_heads or 1)
    kv = int(s.num_key_value_heads or heads)
    head_dim = int(s.head_dim or (s.hidden_size or 0) // heads)
    nbytes = 2 * step.tokens * max(kv // layout.tp, 1) * head_dim * step.act_bytes
    same_node = layout.tp * 2 <= coll.spec.node_gpus
    return coll.ms("send_recv", nbytes, 2, 2 if same_node else 1)


def overlapped_ms(comm_ms: float, window_ms: float, buckets: int) -> float:
    """What the step waits for of ``comm_ms`` of collectives sent in ``buckets`` equal parts,
    part i once i/buckets of ``window_ms`` of compute is done, one at a time: the last part at
    least, and whatever outlasts the compute.

    >>> overlapped_ms(10.0, 100.0, 10)   # each 1 ms part hides under a 10 ms layer: the last shows
    1.0
    >>> overlapped_ms(100.0, 40.0, 4)    # 100 ms of comm under 30 ms of the compute it can follow
    70.0
    """
    if comm_ms <= 0:
        return 0.0
    n = max(buckets, 1)
    return max(comm_ms / n, comm_ms - window_ms * (n - 1) / n)
