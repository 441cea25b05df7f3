"""A serving step's collectives: tensor parallelism's all-reduces and logit gather, expert
parallelism's all-to-all dispatch and combine, pipeline parallelism's sends of the hidden
states between stages, each priced by ``predict.collectives``
on the device's usual node at the host class the user states (``predict.comm_host``), or from a
cluster's nccl-tests profile (``predict.comm_profile``) where it covers the call; which of the two
priced each call is counted, for the plan to say.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..hardware.catalog import DeviceSpec
from ..predict.collectives import check_call
from ..predict.comm_host import describe_comm_host, host_collective_ms
from ..predict.comm_profile import CommProfile
from .experts import ExpertParallel
from .shape import ServingShape, padded_vocab

__all__ = ["StepCollectives"]


@dataclass
class StepCollectives:
    """The collectives of one engine's steps: ``tp`` GPUs a stage, ``pp`` stages (``pp`` ·
    ``tp`` GPUs in all, stages on one node while they fit it), activations of ``act_bytes``
    bytes. ``shape`` is one GPU's shard (its hidden size and layers are the model's).
    ``host``: the host class pricing what ``profile`` does not cover (``predict.comm_host``)."""

    spec: DeviceSpec
    shape: ServingShape
    vocab: int
    tp: int
    act_bytes: int
    pp: int = 1
    profile: CommProfile | None = None
    ep: ExpertParallel | None = None
    host: str = "fitted"
    # (collective, GPUs) -> Counter of "measured" / "model": who priced each distinct call
    priced_by: dict[tuple[str, int], Counter[str]] = field(default_factory=dict)
    _cache: dict[tuple[str, float, int, int], float] = field(default_factory=dict, repr=False)

    def ms(self, collective: str, size_bytes: float, num_gpus: int,
           gpus_per_node: int | None = None) -> float:
        """One call, measured where the profile covers it, else the collective model's;
        ``gpus_per_node`` None: as many as the usual node holds (``check_call``'s)."""
        call = check_call(self.spec, collective, size_bytes=size_bytes, num_gpus=num_gpus,
                          gpus_per_node=gpus_per_node)
        key = (collective, call.size_bytes, num_gpus, call.gpus_per_node)
        if key not in self._cache:
            measured = None if self.profile is None else self.profile.time_ms(*key)
            self.priced_by.setdefault((collective, num_gpus), Counter())[
                "model" if measured is None else "measured"] += 1
            self._cache[key] = measured if measured is not None else host_collective_ms(
                self.spec, collective, host=self.host, size_bytes=size_bytes,
                num_gpus=num_gpus, gpus_per_node=call.gpus_per_node)
        return self._cache[key]

    def tp_ms(self, tokens: int, sampled: int, layers: int | None = None) -> float:
        """Tensor parallelism's collectives of a step (0 without it): two all-reduces a layer
        of ``tokens`` × hidden activations (``layers``: the model's, or a stage's), one after
        the embedding, and the all-gather of the ``sampled`` tokens' logits over the padded
        vocabulary."""
        if self.tp == 1:
            return 0.0
        n = self.shape.layers if layers is None else layers
        reduce = self.ms("all_reduce", float(tokens * self.shape.hidden * self.act_bytes),
                         self.tp)
        gather = self.ms("all_gather", float(sampled * padded_vocab(self.vocab)
                                             * self.act_bytes), self.tp)
        return (2 * n + 1) * reduce + gather

    def step_ms(self, tokens: int, sampled: int) -> float:
        """A step's collectives within a stage: tensor parallelism's (``tp_ms``) and expert
        parallelism's (``ep_ms``)."""
        return self.tp_ms(tokens, sampled) + self.ep_ms(tokens)

    def ep_ms(self, tokens: int) -> float:
        """Expert parallelism's all-to-alls of a step whose every rank runs ``tokens`` tokens
        (0 without data-parallel ranks: with ep = tp every GPU holds every token, and the
        experts' outputs are summed by the all-reduce tensor parallelism runs anyway): an MoE
        layer dispatches each token's top-k copies of its hidden state to the experts' GPUs and
        combines their outputs back, each GPU sending tokens · k / tp of them."""
        if self.ep is None or self.ep.dp == 1:
            return 0.0
        size = float(self.ep.rows(tokens) * self.shape.hidden * self.act_bytes)
        return 2 * self.shape.layers * self.ms("alltoall", size, self.ep.ep)

    def send_ms(self, tokens: int) -> float:
        """One stage's hand-off to the next (0 without pipeline parallelism): the hidden states
        and the residual of ``tokens`` tokens (vLLM's ``IntermediateTensors`` of a Llama-style
        model), each tp rank sending its 1/tp share and the receiving stage all-gathering them
        (``send_tensor_dict(all_gather_group=tp group)``). A send crosses nodes when the engine's
        pp · tp GPUs do not fit the device's usual node."""
        if self.pp == 1:
            return 0.0
        size = 2.0 * tokens * self.shape.hidden * self.act_bytes
        across = self.pp * self.tp > self.spec.node_gpus
        send = self.ms("send_recv", size / self.tp, 2, 1 if across else None)
        return send + (self.ms("all_gather", size, self.tp) if self.tp > 1 else 0.0)

    def check(self) -> None:
        """Price the smallest calls the engine makes, so that a group the node cannot hold
        fails before any capture (a ValueError naming tp and pp)."""
        try:
            self.step_ms(1, 1)
            self.send_ms(1)
        except ValueError as e:
            pp = f", pp={self.pp}" if self.pp > 1 else ""
            ep = f", ep={self.ep.ep}" if self.ep is not None else ""
            raise ValueError(f"tp={self.tp}{pp}{ep} on {self.spec.id}: {e}") from e
        self.priced_by.clear()
        self._cache.clear()

    def source(self) -> str:
        """Which model priced the collectives so far, for the plan's assumptions ("" where
        none was priced: one GPU)."""
        if not self.priced_by:
            return ""
        host = describe_comm_host(self.host)
        if self.profile is None:
            return ("every collective priced by predict_collective_ms as NCCL on the device's "
                    f"usual node (the topology prior; no --comm-profile given) at the {host}")
        gpu = f" of {self.profile.gpu_name}" if self.profile.gpu_name else ""
        parts = []
        for (name, n), by in sorted(self.priced_by.items()):
            total = by["measured"] + by["model"]
            parts.append(f"{name} over {n} GPUs: {by['measured']} of {total} distinct sizes "
                         "measured")
        return (f"collectives from the comm profile{gpu} ({', '.join(self.profile.sources)}) "
                f"where it covers the group and size, else by the topology prior at the {host}: "
                f"{'; '.join(parts)}")
