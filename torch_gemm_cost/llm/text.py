"""A serving plan as text: the report stage's rendering of ``LlmPlan``, which predicts nothing.

    print(format_llm_plan(plan))         # a row per batch: TTFT, TPOT, tokens/s, memory, rooflines
    print(format_llm_layers(plan, 8))    # the decode step of batch 8, module by module
"""

from __future__ import annotations

from .records import LlmPlanRecord

__all__ = ["format_llm_assumptions", "format_llm_layers", "format_llm_plan", "plan_footer",
           "plan_table"]


def format_llm_plan(plan: LlmPlanRecord) -> str:
    """One line per batch size (latencies, throughput, memory and the roofline limits), then
    what the plan is of."""
    return f"{plan_table(plan)}\n{plan_footer(plan)}"


def format_llm_layers(plan: LlmPlanRecord, batch: int | None = None, depth: int | None = 2) -> str:
    """The decode step's cost table at ``batch`` (default: the largest), by module at
    ``depth`` levels (None: one row per GEMM), with its totals."""
    if not plan.decode_reports:
        raise ValueError("this plan holds no decode reports")
    i = len(plan.rows) - 1 if batch is None else plan.rows.index(plan.row(batch))
    r, report = plan.rows[i], plan.decode_reports[i]
    comm = f" + {r.decode_comm_ms:.3f} ms of collectives" if plan.tp * plan.pp > 1 else ""
    return (f"decode step at batch {r.batch}, context {plan.prompt + plan.gen // 2} "
            f"(one GPU{comm}):\n{report.table(depth=depth)}\n{report.footer()}")


def format_llm_assumptions(plan: LlmPlanRecord) -> str:
    """What the plan assumes, one item a line."""
    return "\n".join(["assumptions:", *(f"- {line}" for line in plan.assumptions)])


GIB = 2**30  # memory is shown in GiB, the unit GPU memory sizes are binary in


def plan_table(plan: LlmPlanRecord) -> str:
    from tabulate import tabulate

    body = [[f"{r.batch}*" if r.above_max_num_seqs else str(r.batch), r.ttft_mean_ms,
             r.ttft_max_ms, r.tpot_ms, r.tokens_per_s, r.request_ms, r.roofline_ttft_ms,
             r.roofline_tpot_ms, r.weights_bytes / GIB, r.kv_cache_bytes / GIB,
             r.activation_bytes / GIB, "yes" if r.fits else "NO"] for r in plan.rows]
    headers = ["batch", "TTFT mean", "TTFT max", "TPOT ms", "tokens/s", "request ms",
               "roof TTFT", "roof TPOT", "weights GiB", "KV GiB", "act GiB", "fits"]
    fmt = ("", ".2f", ".2f", ".3f", ".0f", ".1f", ".2f", ".3f", ".2f", ".2f", ".2f", "")
    return tabulate(body, headers=headers, floatfmt=fmt, colalign=("right",) * 11 + ("left",))


def plan_footer(plan: LlmPlanRecord) -> str:
    tp = f", tensor parallel {plan.tp}" if plan.tp > 1 else ""
    tp += f", pipeline parallel {plan.pp}" if plan.pp > 1 else ""
    tp += (f", expert parallel {plan.ep} ({plan.ep // plan.tp} data-parallel attention ranks)"
           if plan.ep > 1 else "")
    gpu = " per GPU" if max(plan.tp, plan.ep) * plan.pp > 1 else ""
    seqs = plan.max_num_seqs
    flagged = [r.batch for r in plan.rows if r.above_max_num_seqs]
    above = f", above max_num_seqs {seqs}" if plan.max_batch > seqs else ""
    lines = [
        (f"{plan.model} on {plan.device.name} ({plan.device.id}){tp}: {plan.dtype} "
         f"activations, {plan.weights} weights, {plan.kv_dtype} KV cache; prompt "
         f"{plan.prompt} + {plan.gen} generated tokens, token budget {plan.token_budget}, "
         f"max_num_seqs {seqs}"),
        (f"max batch {plan.max_batch} by memory{above} (usable memory{gpu} "
         f"{plan.usable_bytes / GIB:.2f} GiB = {plan.memory_utilization:g} of "
         f"{(plan.device.mem_bytes or 0) / GIB:.2f} GiB); attention as {plan.attention_kernel}; "
         f"GEMMs by {plan.predictor}; TTFT mean over the batch's requests (what serving "
         "benchmarks quote), max: the last one's; roof TTFT: FLOPs / dense peak (of TTFT max), "
         "roof TPOT: bytes read / DRAM bandwidth"),
    ]
    if flagged:
        lines.append(f"* batch {', '.join(map(str, flagged))}: above max_num_seqs {seqs}, the "
                     "most sequences the engine schedules at once; vLLM would queue the rest")
    return "\n".join(lines)
