"""Training plans, searches and collective profiles as text: the rendering of ``trainplan``,
which predicts nothing.

    print(format_training_plan(plan))      # the step's parts, memory, throughput, stages
    print(format_training_search(found))    # the fastest layouts that fit, why others lose
"""

from __future__ import annotations

from ..predict.comm_profile import CommProfile, bus_factor
from .records import TrainingPlanRecord, TrainingSearchRecord

__all__ = ["format_comm_profile", "format_training_assumptions", "format_training_plan",
           "format_training_search", "stage_table"]

_GB = 1e9


def format_training_plan(plan: TrainingPlanRecord) -> str:
    """The step and its parts, memory per GPU, throughput, then one line per stage."""
    lay, mem = plan.layout, plan.memory
    lo, hi = plan.step_interval_ms
    opt = plan.optimizer or "no optimizer step"
    ran = ", ".join(f"{k} {v:.2f}" for k, v in plan.comm_ms.items() if v)
    memory = (f"weights {mem.weights_bytes / _GB:.2f}, grads {mem.grads_bytes / _GB:.2f}, "
              f"optimizer {mem.optimizer_bytes / _GB:.2f}, activations "
              f"{mem.activations_bytes / _GB:.2f}, in flight {mem.in_flight_bytes / _GB:.2f}")
    batches = "micro-batches" if plan.micro_batches != 1 else "micro-batch"
    lines = [
        (f"{plan.model} on {plan.gpus} x {plan.device.name} ({plan.device.id}), {plan.dtype}, "
         f"{opt}: {lay.label()}"),
        (f"global batch {plan.global_batch} x {plan.seq} tokens, {plan.micro_batches} "
         f"{batches} of {lay.micro_batch} a pipeline"),
        "",
        f"step          {plan.step_ms:10.2f} ms   (hosts' spread {lo:.2f} - {hi:.2f} ms)",
        f"  compute     {plan.compute_ms:10.2f} ms",
        f"  bubble      {plan.bubble_ms:10.2f} ms",
        f"  exposed comm{plan.exposed_comm_ms:10.2f} ms" + (f"   (of {ran} ms run)" if ran else ""),
        f"  optimizer   {plan.optimizer_ms:10.2f} ms",
        (f"memory/GPU    {plan.memory_per_gpu_bytes / _GB:10.2f} GB   ({memory}); "
         f"{'fits' if plan.fits else 'does NOT fit'} in {plan.usable_bytes / _GB:.1f} GB usable"),
        (f"throughput    {plan.tokens_per_s_per_gpu:10.0f} tokens/s/GPU, "
         f"{plan.model_tflops_per_gpu:.1f} model TFLOP/s/GPU "
         f"({plan.hardware_tflops_per_gpu:.1f} with recomputation), MFU {plan.mfu:.1%}"),
        "",
        stage_table(plan),
        f"GEMMs by {plan.predictor}; collectives: {plan.comm_source}",
    ]
    return "\n".join(lines)


def stage_table(plan: TrainingPlanRecord) -> str:
    """One line per pipeline stage: its layers, one micro-batch's compute and collectives, the
    step's gradient sync and optimizer, its memory."""
    from tabulate import tabulate

    body = [[s.stage, _layers(s.layers), s.params / 1e6, s.forward_ms, s.backward_ms,
             s.recompute_ms, s.tp_comm_ms, s.send_ms, s.dp_comm_ms, s.dp_exposed_ms,
             s.optimizer_ms, s.in_flight, s.memory.total_bytes / _GB,
             "yes" if s.fits else "NO"] for s in plan.stages]
    headers = ["stage", "layers", "params M", "fwd ms", "bwd ms", "recomp ms", "tp ms",
               "send ms", "dp ms", "dp exposed", "optim ms", "in flight", "mem GB", "fits"]
    fmt = ("", "", ".1f", ".2f", ".2f", ".2f", ".2f", ".3f", ".2f", ".2f", ".2f", "", ".2f", "")
    return tabulate(body, headers=headers, floatfmt=fmt)


def format_training_assumptions(plan: TrainingPlanRecord) -> str:
    """What the plan assumes, one item a line."""
    return "\n".join(["assumptions:", *(f"- {line}" for line in plan.assumptions)])


def format_training_search(found: TrainingSearchRecord, losers: int | None = 15) -> str:
    """The fastest layouts that fit, then the other layouts priced, fastest first, and why
    each loses (the first ``losers`` of them; None: all)."""
    from tabulate import tabulate

    body = [[i + 1, p.layout.label(), p.step_ms, p.compute_ms, p.bubble_ms, p.exposed_comm_ms,
             p.optimizer_ms, p.memory_per_gpu_bytes / _GB, p.tokens_per_s_per_gpu, p.mfu * 100]
            for i, p in enumerate(found.plans)]
    head = tabulate(body, headers=["rank", "layout", "step ms", "compute", "bubble",
                                   "exposed comm", "optimizer", "mem GB", "tokens/s/GPU",
                                   "MFU %"],
                    floatfmt=("", "", ".1f", ".1f", ".1f", ".1f", ".1f", ".1f", ".0f", ".1f"))
    fit = len(found.plans) + sum(1 for r in found.rejected if r.fits)
    captures = f"{found.captures} capture{'s' if found.captures != 1 else ''}"
    lines = [(f"{found.model} on {found.gpus} x {found.device.name}, global batch "
              f"{found.global_batch} x {found.seq} tokens: {found.layouts} layouts priced "
              f"({captures}), {fit} fit; the fastest {len(found.plans)}:"), head]
    shown = found.rejected if losers is None else found.rejected[:losers]
    if shown:
        rows = [[r.layout.label(), r.step_ms, r.memory_per_gpu_bytes / _GB, r.why]
                for r in shown]
        lines += ["", "why the others lose:",
                  tabulate(rows, headers=["layout", "step ms", "mem GB", "why"],
                           floatfmt=("", ".1f", ".1f", ""))]
        more = len(found.rejected) - len(shown)
        if more:
            lines.append(f"... and {more} more (all of them in the JSON)")
    return "\n".join(lines)


def format_comm_profile(profile: CommProfile) -> str:
    """One line per measured group: its message sizes and the bus bandwidth at the largest."""
    from tabulate import tabulate

    body = []
    for collective, n, g in profile.groups():
        lo, hi = profile.size_range(collective, n, g) or (0.0, 0.0)
        t_ms = profile.time_ms(collective, hi, n, g) or 0.0
        busbw = hi * bus_factor(collective, n) / (t_ms * 1e-3) if t_ms else 0.0
        body.append([collective, n, g, _size(lo), _size(hi), busbw / _GB])
    table = tabulate(body, headers=["collective", "GPUs", "per node", "from", "to",
                                    "busbw GB/s at largest"], floatfmt=".1f")
    gpu = f" of {profile.gpu_name}" if profile.gpu_name else ""
    return f"{table}\ncollective profile{gpu} from {', '.join(profile.sources)}"


def _layers(layers: tuple[int, ...]) -> str:
    """Runs of consecutive layers: (0, 1, 2, 8, 9) -> "0-2, 8-9"."""
    if not layers:
        return "-"
    runs, start, prev = [], layers[0], layers[0]
    for x in layers[1:]:
        if x != prev + 1:
            runs.append((start, prev))
            start = x
        prev = x
    runs.append((start, prev))
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in runs)


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"
