"""``simulate_serving``: a workload served by vLLM V1's scheduler (``serving.scheduler``), each
step priced by the pipeline ``plan_llm`` prices with (``serving.cost``), the model captured
once (``llm.affine``).

    sim = simulate_serving("llama3_8b.json", "h100_sxm5_80gb", rate_qps=4, prompt=1024,
                           gen=128, num_requests=200)
    print(sim)                       # TTFT, TPOT and latency percentiles, throughput, KV peak

``ServingEngine`` is the set-up part (model, memory, KV capacity, the step prices): build it once
and ``run`` it at many rates, as the SLO search does (``serving.slo``).
"""

from __future__ import annotations

import copy
import math
import os
import random
from typing import Any

import torch

from ..hardware.catalog import DeviceLike, DeviceSpec
from ..llm.assumptions import expert_parallelism
from ..llm.attention import ServingAttention
from ..llm.checks import (
    MEMORY_UTILIZATION,
    check_device,
    check_kv_dtype,
    check_weights,
    serving_dtype,
)
from ..llm.comm import StepCollectives
from ..llm.experts import ExpertParallel, check_ep
from ..llm.memory import (
    LOGIT_BYTES,
    activation_bytes_per_token,
    kv_cache_bytes,
    stage_weights_bytes,
)
from ..llm.model import config_key, config_of, meta_model
from ..llm.pipeline import check_pp, stage_layers, stage_ms, stage_shares
from ..llm.schedule import TOKEN_BUDGET
from ..llm.shape import ServingShape, padded_vocab
from ..llm.shard import shard_config
from ..measured.vllm_bench import BenchServe
from ..predict import Predictor, default_predictor
from ..predict.comm_host import check_comm_host, with_nics
from ..predict.comm_profile import CommProfile, load_comm_profile
from ..predict.ops import load_op_costs
from ..predict.profile import profile_predictor
from .cost import AttentionTable, StepCost
from .dense import DenseCurve
from .host import HostPath, host_assumption, host_line
from .host_fit import host_path_of
from .result import Percentiles, RequestLatency, ServingSim
from .scheduler import BLOCK_SIZE, EngineLimits, StepBatch, run_engine
from .workload import Lengths, Request, arrival_times_ms, lengths_of

__all__ = ["MAX_NUM_SEQS", "ServingEngine", "simulate_serving"]

MAX_NUM_SEQS = 256  # vLLM's max_num_seqs default
DEFAULT_CONTEXT = 32768  # the longest context priced where the config states none


def simulate_serving(
    config: Any,
    device: DeviceLike,
    *,
    dtype: str | torch.dtype | None = None,
    rate_qps: float | None = None,
    concurrency: int | None = None,
    prompt: int | str | Lengths = 2048,
    gen: int | str | Lengths = 256,
    num_requests: int = 200,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    replicas: int = 1,
    seed: int = 0,
    arrival: str = "poisson",
    max_num_seqs: int = MAX_NUM_SEQS,
    token_budget: int = TOKEN_BUDGET,
    memory_utilization: float = MEMORY_UTILIZATION,
    weights: str | None = None,
    kv_dtype: str | None = None,
    comm_profile: CommProfile | str | os.PathLike[str] | None = None,
    comm_host: str = "fitted",
    nics_per_node: int | None = None,
    nic_gbps: float | None = None,
    predictor: Predictor | None = None,
    host_profile: HostPath | BenchServe | str | os.PathLike[str] | None = None,
    host_token_ms: float = 0.0,
) -> ServingSim:
    """``num_requests`` requests served by vLLM V1 on ``device`` (``tp`` GPUs a pipeline stage,
    ``pp`` stages, batches in flight through them as V1's batch queue keeps them; ``ep``
    expert-parallel GPUs of an MoE, ep / tp data-parallel ranks, ``llm.experts``): arriving at
    ``rate_qps`` (``arrival``: ``"poisson"`` or ``"constant"`` gaps), or from ``concurrency``
    clients in a closed loop (exactly one of the two). ``prompt`` and ``gen``: a token count or
    a distribution (``Lengths``, or a string ``Lengths.parse`` reads: ``"lognormal:512:256"``).
    ``host_profile``: the host's share of the latency (``serving.host``): a ``HostPath``, or a
    ``vllm bench serve --save-result`` JSON of the user's own server it is calibrated from
    (``serving.host_fit``), the API server's time a streamed token ``host_token_ms`` (which
    one load does not show); None: the GPU's time alone.
    ``replicas``: data-parallel copies of the engine (``tp`` GPUs each) behind one router that
    deals the requests out in turn. The other arguments as ``plan_llm``'s; ``max_num_seqs``
    and ``token_budget`` (max_num_batched_tokens) are the scheduler's limits; ``comm_profile``
    a collective profile (``calibrate-comm``) that prices the collectives it measured;
    ``comm_host``, ``nics_per_node``, ``nic_gbps`` the cluster's network as the user states it
    (``predict.comm_host``)."""
    engine = ServingEngine(config, device, dtype=dtype, tp=tp, pp=pp, ep=ep,
                           max_num_seqs=max_num_seqs,
                           token_budget=token_budget, memory_utilization=memory_utilization,
                           weights=weights, kv_dtype=kv_dtype, comm_profile=comm_profile,
                           comm_host=comm_host, nics_per_node=nics_per_node,
                           nic_gbps=nic_gbps, predictor=predictor, host_profile=host_profile,
                           host_token_ms=host_token_ms)
    return engine.run(rate_qps=rate_qps, concurrency=concurrency, prompt=prompt, gen=gen,
                      num_requests=num_requests, seed=seed, arrival=arrival, replicas=replicas)


class ServingEngine:
    """One model served on one device: its memory and KV capacity, and its step prices,
    cached across ``run`` calls."""

    def __init__(self, config: Any, device: DeviceLike, *, dtype: Any = None, tp: int = 1,
                 pp: int = 1, ep: int = 1, max_num_seqs: int = MAX_NUM_SEQS,
                 token_budget: int = TOKEN_BUDGET,
                 memory_utilization: float = MEMORY_UTILIZATION, weights: str | None = None,
                 kv_dtype: str | None = None,
                 comm_profile: CommProfile | str | os.PathLike[str] | None = None,
                 comm_host: str = "fitted", nics_per_node: int | None = None,
                 nic_gbps: float | None = None,
                 predictor: Predictor | None = None,
                 host_profile: HostPath | BenchServe | str | os.PathLike[str] | None = None,
                 host_token_ms: float = 0.0) -> None:
        target = check_device(device)
        spec = target.spec
        cfg = config_of(config)
        cd = serving_dtype(dtype, cfg)
        fmt = check_weights(weights, spec, cd)
        kv = check_kv_dtype(kv_dtype, cd)
        _check_int("max_num_seqs", max_num_seqs, 1)
        _check_int("token_budget", token_budget, 1)
        if max_num_seqs > token_budget:
            raise ValueError(f"max_num_seqs {max_num_seqs} exceeds the token budget "
                             f"{token_budget}; nearest good: {token_budget}")
        if isinstance(memory_utilization, bool) or not 0 < memory_utilization <= 1:
            raise ValueError(f"memory_utilization must be in (0, 1], got {memory_utilization!r}"
                             f"; nearest good: {MEMORY_UTILIZATION}")
        self.full = ServingShape.of(cfg)
        check_pp(pp, self.full.layers)
        self.experts = check_ep(ep, tp, self.full)
        self.dp = self.experts.dp if self.experts is not None else 1
        gpu = shard_config(cfg, tp, self.experts)
        shape = ServingShape.of(gpu)
        profile = load_comm_profile(comm_profile) if comm_profile is not None else None
        self.comm = StepCollectives(with_nics(spec, nics_per_node=nics_per_node,
                                              nic_gbps=nic_gbps),
                                    shape, self.full.vocab, tp, cd.in_bytes, pp, profile,
                                    self.experts, check_comm_host(comm_host))
        self.comm.check()
        key = config_key(gpu)
        model = meta_model(key, cd.name)
        self.spec, self.cd, self.kv, self.fmt, self.tp, self.pp = spec, cd, kv, fmt, tp, pp
        self.stages = stage_layers(self.full.layers, pp)
        self.shares = stage_shares(self.full.layers, pp)
        self.model_name = type(model).__name__
        self.shape = shape
        self.max_context = self.full.max_positions or DEFAULT_CONTEXT
        held = stage_weights_bytes(model, shape.experts, fmt, self.stages)
        self.limits = EngineLimits(token_budget, max_num_seqs, min(
            self._kv_blocks(spec, shape, held[s], token_budget, max_num_seqs,
                            memory_utilization, s) for s in range(pp)))
        pred = predictor or profile_predictor(target) or default_predictor()
        attention = ServingAttention(spec, shape, cd, kv)
        self.cost = StepCost(
            DenseCurve(key, cd, spec, pred, fmt, kv, load_op_costs(), token_budget,
                       self.experts),
            AttentionTable(attention, self.max_context),
            self.comm.step_ms, shape.layers * load_op_costs().launch_ms)
        self.attention_kernel = attention.kernel
        self.host: HostPath | None = None
        if host_profile is not None:
            self.host = host_path_of(host_profile, self, host_token_ms)

    def with_host(self, host: HostPath | None) -> ServingEngine:
        """This engine (its step prices shared) with another host path."""
        other = copy.copy(self)
        other.host = host
        return other

    def _kv_blocks(self, spec: DeviceSpec, shape: ServingShape, held: int, budget: int,
                   max_num_seqs: int, utilization: float, stage: int = 0) -> int:
        """KV blocks that fit on a GPU of pipeline stage ``stage`` beside its weights, the
        activations of a full token budget and, on the last stage, the logits of
        ``max_num_seqs`` requests (``llm.memory``'s arithmetic, as vLLM's profiling run leaves
        the cache its memory; with stages, the engine takes the fewest blocks any holds)."""
        usable = utilization * float(spec.mem_bytes or 0.0)
        fixed = budget * activation_bytes_per_token(shape, self.cd.in_bytes)
        if stage == self.pp - 1:
            fixed += max_num_seqs * padded_vocab(self.full.vocab) * LOGIT_BYTES
        first = sum(self.stages[:stage])
        block = kv_cache_bytes(shape.windows[first:first + self.stages[stage]], shape.kv_heads,
                               shape.head_dim, BLOCK_SIZE, 1, self.kv.in_bytes)
        blocks = math.floor((usable - held - fixed) / block)
        if blocks < 1:
            raise ValueError(
                f"no room for a KV cache on {spec.id}: {usable / 1e9:.2f} GB usable, weights "
                f"{held / 1e9:.2f} GB, activations {fixed / 1e9:.2f} GB; use more tensor-"
                "parallel GPUs (tp), narrower weights (weights='int4') or a smaller token budget")
        return blocks

    def _stage_ms(self, batch: StepBatch, step_ms: float) -> list[float]:
        """A step's time on each pipeline stage: its share of the step and, but on the last
        stage, the send of its hidden states (``llm.pipeline.stage_ms``)."""
        return stage_ms(step_ms, self.shares, self.comm.send_ms(batch.tokens))

    def requests(self, *, rate_qps: float | None, concurrency: int | None, prompt: Any,
                 gen: Any, num_requests: int, seed: int, arrival: str) -> list[Request]:
        """The workload's requests: lengths drawn first, then arrival gaps, from one seed
        (so runs at two rates share their lengths and scale their gaps)."""
        _check_int("num_requests", num_requests, 1)
        p, g = lengths_of(prompt, "prompt"), lengths_of(gen, "gen")
        rng = random.Random(seed)
        prompts, gens = p.draw(num_requests, rng), g.draw(num_requests, rng)
        times = arrival_times_ms(num_requests, float(rate_qps), arrival, rng) \
            if rate_qps is not None else [0.0] * num_requests
        reqs = [Request(i, t, a, b) for i, (t, a, b) in enumerate(zip(times, prompts, gens))]
        for r in reqs:
            if r.prompt + r.gen > self.max_context:
                raise ValueError(f"request {r.id}: prompt {r.prompt} + gen {r.gen} exceeds the "
                                 f"model's {self.max_context} positions; nearest good gen: "
                                 f"{max(self.max_context - r.prompt, 1)}")
            blocks = -(-(r.prompt + r.gen) // self.limits.block_size)
            if blocks > self.limits.kv_blocks:
                raise ValueError(f"request {r.id} ({r.prompt} + {r.gen} tokens) needs {blocks} "
                                 f"KV blocks; the cache holds {self.limits.kv_blocks}")
        return reqs

    def run(self, *, rate_qps: float | None = None, concurrency: int | None = None,
            prompt: Any = 2048, gen: Any = 256, num_requests: int = 200, seed: int = 0,
            arrival: str = "poisson", replicas: int = 1) -> ServingSim:
        """Serve one workload (see ``simulate_serving``): on ``replicas`` copies of the
        engine, request i on copy i mod replicas (a closed loop's clients dealt out alike);
        with expert parallelism each copy's dp ranks are dealt requests alike, each rank's
        steps priced as if every rank ran as many tokens."""
        if (rate_qps is None) == (concurrency is None):
            raise ValueError("give exactly one of rate_qps (open loop) and concurrency (closed "
                             "loop), e.g. rate_qps=4")
        if rate_qps is not None and (isinstance(rate_qps, bool) or not isinstance(
                rate_qps, (int, float)) or not 0 < rate_qps < math.inf):
            raise ValueError(f"rate_qps must be a positive number of requests a second, got "
                             f"{rate_qps!r}; e.g. 1")
        _check_int("replicas", replicas, 1)
        copies = replicas * self.dp  # engines, each a data-parallel rank of a replica
        if concurrency is not None:
            _check_int("concurrency", concurrency, copies)
        reqs = self.requests(rate_qps=rate_qps, concurrency=concurrency, prompt=prompt,
                             gen=gen, num_requests=num_requests, seed=seed, arrival=arrival)
        priced = self.cost.dense.priced
        outcomes, traces = [], []
        for i in range(copies):
            share = None if concurrency is None else \
                concurrency // copies + (i < concurrency % copies)
            done, trace = run_engine(reqs[i::copies], self.limits, self.cost, share,
                                     self._stage_ms if self.pp > 1 else None, self.host)
            outcomes += done
            traces.append(trace)
        outcomes.sort(key=lambda o: o.request.id)
        trace = traces[0]
        served = tuple(RequestLatency(o.request.id, o.request.prompt, o.request.gen,
                                      o.request.arrival_ms, o.first_token_ms, o.finish_ms,
                                      o.preemptions) for o in outcomes)
        start = min(r.arrival_ms for r in served)
        duration = max(r.finish_ms for r in served) - start
        out_tokens = sum(r.gen for r in served)
        in_tokens = sum(r.prompt for r in served)
        per_s = 1e3 / duration if duration > 0 else math.nan
        load = f"{arrival} {rate_qps:g} QPS" if rate_qps is not None else \
            f"concurrency {concurrency}"
        if replicas > 1:
            load += f" over {replicas} replicas"
        return ServingSim(
            model=self.model_name, device=self.spec.id, dtype=self.cd.name, tp=self.tp, pp=self.pp,
            ep=self.experts.ep if self.experts is not None else 1, replicas=replicas,
            workload=load, prompt=str(lengths_of(prompt, "prompt")),
            gen=str(lengths_of(gen, "gen")), seed=seed,
            token_budget=self.limits.token_budget, max_num_seqs=self.limits.max_num_seqs,
            kv_blocks=self.limits.kv_blocks, block_size=self.limits.block_size,
            requests=served, ttft=Percentiles.of([r.ttft_ms for r in served]),
            tpot=Percentiles.of([t for r in served if (t := r.tpot_ms) is not None]),
            e2e=Percentiles.of([r.e2e_ms for r in served]), duration_ms=duration,
            output_tokens_per_s=out_tokens * per_s,
            total_tokens_per_s=(in_tokens + out_tokens) * per_s,
            requests_per_s=len(served) * per_s, steps=sum(len(t.step_end_ms) for t in traces),
            preemptions=sum(t.preemptions for t in traces), priced_shapes=self.cost.dense.priced - priced,
            kv_times_ms=tuple(trace.step_end_ms),
            kv_used=tuple(b / self.limits.kv_blocks for b in trace.blocks_used),
            host=host_line(self.host),
            assumptions=assumptions(self.attention_kernel, self.limits, self.tp,
                                    self.comm.source(), self.stages, self.experts, self.host))


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}; "
                         f"nearest good: {low}")
    return value


def assumptions(kernel: str, limits: EngineLimits, tp: int, comm: str,
                stages: tuple[int, ...] = (1,), experts: ExpertParallel | None = None,
                host: HostPath | None = None) -> tuple[str, ...]:
    """What a simulation assumes, beside what ``plan_llm`` assumes of each step."""
    if experts is not None:
        ranks = (f" Each of the {experts.dp} data-parallel ranks is an engine of its own, dealt "
                 "requests in turn, its steps priced as if every rank ran as many tokens; vLLM "
                 "steps the ranks together (a rank without requests runs a dummy batch), which "
                 "is not simulated." if experts.dp > 1 else "")
        moe: tuple[str, ...] = (expert_parallelism(experts) + ranks,)
    else:
        moe = ()
    pipeline = () if len(stages) == 1 else ((
        f"Pipeline parallelism {len(stages)} (layers {'/'.join(map(str, stages))}, vLLM's "
        "get_pp_indices): as V1's engine core (step_with_batch_queue, batch queue of "
        f"{len(stages)}), the scheduler forms a new batch while fewer than {len(stages)} are "
        "in flight, of the requests with tokens left to schedule (a decoding request's next "
        "token waits for its last; a prompt's next chunk may follow its last through the "
        "stages), else waits for the oldest batch; a batch enters a stage once the stage is "
        "free. A step's time on a stage is its share of the step (the stage's layers over the "
        "model's) plus, but on the last stage, the send of its hidden states and residual. "
        "The KV cache holds the blocks the most loaded stage fits."),)
    return (*moe, *pipeline,
        (f"Scheduler: vLLM V1's (FCFS): chunked prefill mixed with decode under "
        f"max_num_batched_tokens={limits.token_budget}, at most max_num_seqs="
        f"{limits.max_num_seqs} running requests, KV blocks of {limits.block_size} tokens "
        f"({limits.kv_blocks} blocks per GPU), preemption by recomputation of the newest "
        "running request when the cache cannot hold a step."),
        ("Steps: each priced as plan_llm prices one (dense GEMMs and kernels, attention as "
        f"{kernel}, tensor-parallel collectives{' over ' + str(tp) + ' GPUs' if tp > 1 else ''}"
        "); a step of at most 512 tokens runs padded to vLLM's next CUDA-graph size (a decode-"
        "only step in one full graph, a step holding a prefill chunk piecewise, each layer's "
        "attention launched outside the graphs); larger ones run eagerly, every kernel with its "
        "launch gap, read between token counts priced 16 a doubling; decode attention as one "
        "call of the decoding requests at their mean context."),
        *((f"Collectives: {comm}.",) if comm else ()),
        host_assumption(host),
        ("Not modelled: prefix caching (random prompts share no blocks), speculative decoding, "
        "sliding-window layers freeing blocks outside their window."),
    )
