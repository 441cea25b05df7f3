"""How much a layout search saves by capturing each micro-batch shape once and pricing each
tensor-parallel split once: ``search_training_plans`` of Llama-3-8B on 64 H100s (every layout
it tries), against pricing the same layouts one plan at a time. Writes
benchmarks/results/train_plan_search_speed.md.

    python benchmarks/train_plan_search_speed.py [--sample 8]

The search runs whole, from cold caches. The one-plan-at-a-time costs are timed on ``--sample``
of its layouts, evenly spaced through the search's order, and multiplied out to all of them:

- *captured per plan*: each plan captures its model and prices its records afresh (the
  module's capture caches cleared before each), what a planner without shared captures does;
- *plan_training per layout*: a user's loop of ``plan_training`` calls, which shares the
  captures through the module's cache but prices every plan's records and its two host-spread
  variants anew.

Times are this process's CPU seconds on one thread (``time.process_time``), so that a shared
host's load does not enter them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch_gemm_cost as tgc
from torch_gemm_cost.trainplan import model as model_mod
from torch_gemm_cost.trainplan.model import StepSource
from torch_gemm_cost.trainplan.search import candidate_layouts

CONFIG = ROOT / "examples" / "llama3_8b.json"
DEVICE = "h100_sxm5_80gb"
GPUS, BATCH, SEQ = 64, 512, 4096


def clear() -> None:
    model_mod._captured_config_step.cache_clear()
    model_mod._captured_config.cache_clear()
    model_mod.meta_model.cache_clear()


def one_plan_s(layout: tgc.trainplan.Layout, cold: bool) -> float:
    if cold:
        clear()
    t = time.process_time()
    tgc.plan_training(str(CONFIG), DEVICE, tp=layout.tp, pp=layout.pp, dp=layout.dp,
                      cp=layout.cp, zero=layout.zero, recompute=layout.recompute,
                      micro_batch=layout.micro_batch, global_batch=BATCH, seq=SEQ,
                      interleave=layout.interleave,
                      sequence_parallel=layout.sequence_parallel)
    return time.process_time() - t


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=8)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" /
                                         "train_plan_search_speed.md"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    clear()
    t = time.process_time()
    found = tgc.search_training_plans(str(CONFIG), DEVICE, gpus=GPUS, global_batch=BATCH,
                                      seq=SEQ)
    search_s = time.process_time() - t
    shape = StepSource(str(CONFIG), "bfloat16", "sdpa").shape
    layouts = list(candidate_layouts(shape, GPUS, BATCH, SEQ, 8))
    splits = {(lay.tp, lay.sequence_parallel, lay.cp, lay.micro_batch) for lay in layouts}
    step = max(len(layouts) // args.sample, 1)
    sample = layouts[::step][:args.sample]
    warm = [one_plan_s(lay, cold=False) for lay in sample]  # the search left every shape cached
    cold = [one_plan_s(lay, cold=True) for lay in sample]
    n = len(layouts)
    rows = [
        ["search_training_plans (shared captures and pricing)", f"{search_s:.1f}",
         f"{search_s / n * 1e3:.0f}", "1.0x", "measured, whole search"],
        ["captured per plan", f"{statistics.fmean(cold) * n:.0f}",
         f"{statistics.fmean(cold) * 1e3:.0f}",
         f"{statistics.fmean(cold) * n / search_s:.0f}x",
         f"{len(sample)} layouts timed, x {n}"],
        ["plan_training per layout (captures cached)", f"{statistics.fmean(warm) * n:.0f}",
         f"{statistics.fmean(warm) * 1e3:.0f}",
         f"{statistics.fmean(warm) * n / search_s:.1f}x",
         f"{len(sample)} layouts timed, x {n}"],
    ]
    lines = [
        "# A layout search's shared captures: speed",
        "",
        (f"Command: `python benchmarks/train_plan_search_speed.py --sample {args.sample}` "
         "(CPU seconds of one process on one thread, which a shared host's load does not "
         f"enter; load average {load:.1f} at the start on a shared 2-core host)."),
        "",
        (f"Llama-3-8B (`examples/llama3_8b.json`), {GPUS} x {DEVICE}, global batch {BATCH}, "
         f"{SEQ} tokens, bf16, AdamW: the search tries {n} layouts ({len(found.plans)} shown "
         f"as plans, {sum(r.fits for r in found.rejected)} more fit). They hold "
         f"{found.captures} micro-batch shapes, each captured once, and {len(splits)} "
         "(tp, sequence parallelism, cp, micro-batch) splits, each priced once; recomputation, "
         "pipeline depth, interleaving and ZeRO change only the schedule, the collectives and "
         "the memory, which each layout computes from them."),
        "",
        tabulate(rows, headers=["way", "CPU s for all layouts", "CPU ms a layout", "vs search",
                                "how"], tablefmt="github"),
        "",
        ("A cold plan's time is mostly the capture of its micro-batch shape on the meta device "
         f"(the sample's: {min(cold):.1f} to {max(cold):.1f} s); a warm one's is the pricing of "
         f"its records and of its plan's three host-spread variants ({min(warm):.2f} to "
         f"{max(warm):.2f} s)."),
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
