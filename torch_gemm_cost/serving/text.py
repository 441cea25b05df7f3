"""A serving simulation as text: the report stage's rendering of ``ServingSim``, which
simulates nothing."""

from __future__ import annotations

from typing import Any

__all__ = ["format_serving"]


def format_serving(sim: Any) -> str:
    """A ``result.ServingSim``'s latency percentiles (TTFT, TPOT, end to end), then throughput, the KV cache and
    what the run is of."""
    from tabulate import tabulate

    rows = [[name, p.mean, p.p50, p.p90, p.p99] for name, p in (
        ("TTFT ms", sim.ttft), ("TPOT ms", sim.tpot), ("latency ms", sim.e2e))]
    table = tabulate(rows, headers=["", "mean", "p50", "p90", "p99"], floatfmt=".2f")
    tp = f", tensor parallel {sim.tp}" if sim.tp > 1 else ""
    tp += f", pipeline parallel {sim.pp}" if sim.pp > 1 else ""
    tp += f", expert parallel {sim.ep}" if sim.ep > 1 else ""
    if sim.replicas > 1:
        tp += f", {sim.replicas} replicas ({sim.gpus} GPUs)"
    return (
        f"{table}\n"
        f"throughput {sim.output_tokens_per_s:.0f} output tokens/s, "
        f"{sim.total_tokens_per_s:.0f} tokens/s in and out, {sim.requests_per_s:.2f} "
        f"requests/s over {sim.duration_ms / 1e3:.2f} s\n"
        f"KV cache {sim.kv_blocks} blocks of {sim.block_size} tokens a replica, peak "
        f"{100 * sim.kv_peak:.0f}% used, {sim.preemptions} preemptions; {sim.steps} steps "
        f"({sim.priced_shapes} step shapes priced)\n"
        f"{sim.model} on {sim.device}{tp}, {sim.dtype}: {len(sim.requests)} requests, "
        f"{sim.workload}, prompt {sim.prompt}, gen {sim.gen}, seed {sim.seed}; "
        f"max_num_batched_tokens {sim.token_budget}, max_num_seqs {sim.max_num_seqs}"
        + (f"\n{sim.host}" if sim.host else "")
    )
