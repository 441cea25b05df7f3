"""One sweep row per combination: the combination parsed by its command's own parser, run as the
command runs it, and its figures; the error a bad combination raises in its ``error`` column.

Combinations that differ only where a command takes many values at once share one call: the
devices of an ``estimate`` (one capture, priced per device) and the batches of an ``llm`` plan
(one plan, a row per batch). A process's captures and priced steps are cached by shape
(``llm.step.derive_steps``, ``llm.plan``), so the combinations of one model share them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Mapping, Sequence
from typing import Any

from .spec import argv_of

__all__ = ["FIGURES", "capture_key", "group_key", "run_group"]

# each kind's figures, in column order
FIGURES: dict[str, tuple[str, ...]] = {
    "estimate": ("total_ms", "gemm_ms", "other_ms", "flops", "gpus"),
    "llm": ("ttft_mean_ms", "ttft_max_ms", "tpot_ms", "tokens_per_s", "request_ms",
            "memory_bytes", "fits", "max_batch", "gpus"),
    "serve-sim": ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p50_ms",
                  "e2e_p99_ms", "output_tokens_per_s", "preemptions", "gpus"),
    "train-plan": ("step_ms", "compute_ms", "bubble_ms", "exposed_comm_ms", "optimizer_ms",
                   "memory_per_gpu_bytes", "fits", "tokens_per_s_per_gpu",
                   "model_tflops_per_gpu", "mfu", "gpus"),
}
# the option whose values one call takes together, per kind
_SHARED = {"estimate": "device", "llm": "batch"}
# options that leave a model's captures as they are (a worker's caches reuse them across their
# values): the device, the sizes priced from the captured shapes, the workload
_NOT_CAPTURED = frozenset({"device", "batch", "prompt", "gen", "rate", "concurrency",
                           "max-num-batched-tokens",
                           "num-requests", "arrival", "seed", "replicas", "max-num-seqs",
                           "token-budget", "memory-utilization", "comm-profile", "kv-dtype",
                           "predictor", "gpus", "dp", "zero", "global-batch", "optimizer"})


def capture_key(kind: str, combo: Mapping[str, Any]) -> tuple[Any, ...]:
    """Combinations with one key capture the same model structures (the config, its sharding,
    its dtype and weights, the sequence a training step runs): a sweep runs them in one worker,
    so that no two workers capture the same structure."""
    return (kind, *((k, str(v)) for k, v in combo.items() if k not in _NOT_CAPTURED))


def group_key(kind: str, combo: Mapping[str, Any]) -> tuple[Any, ...]:
    """Combinations with one key run in one call."""
    shared = _SHARED.get(kind)
    return tuple((k, str(v)) for k, v in combo.items() if k != shared)


def parse(kind: str, combo: Mapping[str, Any]) -> argparse.Namespace:
    """The combination as its command's parser reads it; a ValueError with the parser's own
    message where it refuses it."""
    from ..cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv_of(kind, combo))
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if "error:" in line]
        message = lines[-1].split("error:", 1)[1].strip() if lines else err.getvalue().strip()
        raise ValueError(message) from None


def run_group(kind: str, combos: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows of combinations that share a call (``group_key``): one call, then each
    combination alone where the call fails, so that each row carries its own error."""
    try:
        return _run(kind, combos)
    except _REFUSALS as e:
        if len(combos) == 1:
            return [{**combos[0], "error": _message(e)}]
    rows = []
    for combo in combos:
        try:
            rows += _run(kind, [combo])
        except _REFUSALS as e:
            rows.append({**combo, "error": _message(e)})
    return rows


def _refusals() -> tuple[type[BaseException], ...]:
    from ..cli import UsageError

    # what a command says of a combination it refuses (bad values, a model it cannot build or
    # capture, a missing file); anything else is a fault of this program and stops the sweep
    return (ValueError, TypeError, LookupError, RuntimeError, OSError, UsageError)


_REFUSALS = _refusals()


def _message(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e)


def _run(kind: str, combos: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    shared = _SHARED.get(kind)
    first = dict(combos[0])
    if shared is not None and len(combos) > 1:
        first[shared] = ",".join(str(c[shared]) for c in combos) if kind == "llm" else \
            combos[0][shared]
    args = parse(kind, first)
    if kind == "estimate":
        return _estimate(args, combos)
    if kind == "llm":
        return _llm(args, combos)
    if kind == "train-plan":
        return [{**combos[0], **_train_plan(args)}]
    return [{**combos[0], **_serve_sim(args)}]


def _train_plan(args: argparse.Namespace) -> dict[str, Any]:
    from ..cli import network_kwargs
    from ..trainplan import plan_training

    if args.search:
        raise ValueError("a train-plan sweep prices layouts one by one: list tp, pp, dp, "
                         "micro-batch, ... in the YAML instead of search")
    plan = plan_training(
        args.hf_config, args.device, gpus=args.gpus, tp=args.tp, pp=args.pp, dp=args.dp,
        cp=args.cp, ep=args.ep, zero="fsdp" if args.zero == "fsdp" else int(args.zero),
        recompute=args.recompute, micro_batch=args.micro_batch, global_batch=args.global_batch,
        seq=args.seq, dtype=args.dtype, optimizer=None if args.optimizer == "none" else
        args.optimizer, attention=args.attention, compiled=args.compiled,
        interleave=args.interleave, sequence_parallel=args.sequence_parallel,
        comm_profile=args.comm_profile, **network_kwargs(args))
    return {"step_ms": plan.step_ms, "compute_ms": plan.compute_ms, "bubble_ms": plan.bubble_ms,
            "exposed_comm_ms": plan.exposed_comm_ms, "optimizer_ms": plan.optimizer_ms,
            "memory_per_gpu_bytes": plan.memory_per_gpu_bytes, "fits": plan.fits,
            "tokens_per_s_per_gpu": plan.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": plan.model_tflops_per_gpu, "mfu": plan.mfu,
            "gpus": plan.gpus, "error": ""}


def _estimate(args: argparse.Namespace, combos: Sequence[Mapping[str, Any]]
              ) -> list[dict[str, Any]]:
    from ..cli.estimate import estimate_reports

    args.quiet = True
    args.device = [str(c.get("device", "h100_sxm5_80gb")) for c in combos]
    reports = estimate_reports(args)
    return [{**c, "total_ms": r.total_ms, "gemm_ms": r.gemm_ms, "other_ms": r.other_ms,
             "flops": r.total_flops, "gpus": 1, "error": ""} for c, r in zip(combos, reports)]


def _llm(args: argparse.Namespace, combos: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    from ..cli import network_kwargs
    from ..llm import plan_llm
    from ..predict import RooflinePredictor

    default = _batches(args.batch)[0]  # a sweep without batches: the command's first
    batches = [int(c["batch"]) if "batch" in c else default for c in combos]
    plan = plan_llm(args.hf_config, device=args.device, dtype=args.dtype, prompt=args.prompt,
                    gen=args.gen, batches=batches, tp=args.tp, pp=args.pp, ep=args.ep,
                    weights=args.weights, kv_dtype=args.kv_dtype, token_budget=args.token_budget,
                    memory_utilization=args.memory_utilization, comm_profile=args.comm_profile,
                    **network_kwargs(args), predictor=RooflinePredictor() if args.predictor == "roofline" else None)
    out = []
    for c, b in zip(combos, batches):
        r = plan.row(b)
        out.append({**c, "ttft_mean_ms": r.ttft_mean_ms, "ttft_max_ms": r.ttft_max_ms,
                    "tpot_ms": r.tpot_ms,
                    "tokens_per_s": r.tokens_per_s, "request_ms": r.request_ms,
                    "memory_bytes": r.memory_bytes, "fits": r.fits, "max_batch": plan.max_batch,
                    "gpus": max(plan.tp, plan.ep) * plan.pp, "error": ""})
    return out


def _batches(text: str) -> list[int]:
    return [int(b) for b in str(text).split(",") if b.strip()]


def _serve_sim(args: argparse.Namespace) -> dict[str, Any]:
    from ..cli import network_kwargs
    from ..serving import ServingEngine

    if args.rate is None and args.concurrency is None:
        raise ValueError("a serve-sim sweep needs rate or concurrency")
    engine = ServingEngine(args.hf_config, args.device, dtype=args.dtype, tp=args.tp,
                           pp=args.pp, ep=args.ep, max_num_seqs=args.max_num_seqs,
                           token_budget=args.token_budget,
                           memory_utilization=args.memory_utilization, weights=args.weights,
                           kv_dtype=args.kv_dtype, comm_profile=args.comm_profile,
                           host_profile=args.host_profile, host_token_ms=args.host_token_ms,
                           **network_kwargs(args))
    sim = engine.run(rate_qps=args.rate, concurrency=args.concurrency, prompt=args.prompt,
                     gen=args.gen, num_requests=args.num_requests, seed=args.seed,
                     arrival=args.arrival, replicas=args.replicas)
    return {"ttft_p50_ms": sim.ttft.p50, "ttft_p99_ms": sim.ttft.p99,
            "tpot_p50_ms": sim.tpot.p50, "tpot_p99_ms": sim.tpot.p99,
            "e2e_p50_ms": sim.e2e.p50, "e2e_p99_ms": sim.e2e.p99,
            "output_tokens_per_s": sim.output_tokens_per_s, "preemptions": sim.preemptions,
            "gpus": sim.gpus, "error": ""}
