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
    comm = f" + {r.decode_comm_ms:.3f} ms of all-reduces" if plan.tp > 1 else ""
    return (f"decode step at batch {r.batch}, context {plan.prompt + plan.gen // 2} "
            f"(one GPU{comm}):\n{report.table(depth=depth)}\n{report.footer()}")


def format_llm_assumptions(plan: LlmPlanRecord) -> str:
    """What the plan assumes, one item a line."""
    return "\n".join(["assumptions:", *(f"- {line}" for line in plan.assumptions)])


def plan_table(plan: LlmPlanRecord) -> str:
    from tabulate import tabulate

    body = [[r.batch, r.ttft_ms, r.tpot_ms, r.tokens_per_s, r.request_ms,
             r.roofline_ttft_ms, r.roofline_tpot_ms, r.weights_bytes / 1e9,
             r.kv_cache_bytes / 1e9, r.activation_bytes / 1e9,
             "yes" if r.fits else "NO"] for r in plan.rows]
    headers = ["batch", "TTFT ms", "TPOT ms", "tokens/s", "request ms", "roof TTFT",
               "roof TPOT", "weights GB", "KV GB", "act GB", "fits"]
    fmt = ("", ".2f", ".3f", ".0f", ".1f", ".2f", ".3f", ".2f", ".2f", ".2f", "")
    return tabulate(body, headers=headers, floatfmt=fmt)


def plan_footer(plan: LlmPlanRecord) -> str:
    tp = f", tensor parallel {plan.tp}" if plan.tp > 1 else ""
    gpu = " per GPU" if plan.tp > 1 else ""
    return (
        f"{plan.model} on {plan.device.name} ({plan.device.id}){tp}: {plan.dtype} "
        f"activations, {plan.weights} weights, {plan.kv_dtype} KV cache; prompt "
        f"{plan.prompt} + {plan.gen} generated tokens, token budget {plan.token_budget}\n"
        f"max batch {plan.max_batch} (usable memory{gpu} {plan.usable_bytes / 1e9:.2f} GB "
        f"= {plan.memory_utilization:g} of {(plan.device.mem_bytes or 0) / 1e9:.1f} GB); "
        f"attention as {plan.attention_kernel}; GEMMs by {plan.predictor}; roof TTFT: "
        f"FLOPs / dense peak, roof TPOT: bytes read / DRAM bandwidth"
    )
