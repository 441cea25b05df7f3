"""``torch-gemm-cost train-plan``: a training step of a model on many GPUs, for one layout or
the fastest layouts that fit (``--search``).

    torch-gemm-cost train-plan --hf-config gpt2.json --device a100_sxm4_80gb --gpus 8 \\
        --tp 2 --pp 2 --micro-batch 4 --global-batch 64 --seq 1024 [--zero 1] [--recompute full]
    torch-gemm-cost train-plan --hf-config gpt2.json --device a100_sxm4_80gb --gpus 8 \\
        --global-batch 64 --seq 1024 --search

The model is built on the meta device from its config: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import UsageError, add_network_options, config_file, network_kwargs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train-plan",
        help="plan training on many GPUs: step time, its parts, memory per GPU, MFU; or search "
             "the layouts",
        description="Plan one training step of a causal LM on many GPUs of one kind: tensor, "
        "pipeline, data and context parallelism, ZeRO and recomputation; the step's compute, "
        "pipeline bubble, exposed communication and optimizer step, memory per GPU, tokens/s "
        "and MFU, per pipeline stage. --search prices every layout of the GPUs and ranks the "
        "fastest that fit, saying why each other one loses.",
    )
    p.add_argument("--hf-config", required=True, metavar="PATH",
                   help="an HF config.json of a causal LM (needs model_type)")
    p.add_argument("--device", default="h100_sxm5_80gb", metavar="ID",
                   help="catalog id, GPU name, spec file or calibration profile (default "
                        "h100_sxm5_80gb)")
    p.add_argument("--gpus", type=int, default=None,
                   help="GPUs in all (default: tp·pp·dp·cp)")
    for name, default, what in (("tp", 1, "tensor-parallel"), ("pp", 1, "pipeline-parallel"),
                                ("cp", 1, "context-parallel"),
                                ("ep", 1, "expert-parallel (a MoE model's; drawn from the data-parallel)")):
        p.add_argument(f"--{name}", type=int, default=default,
                       help=f"{what} GPUs (default {default})")
    p.add_argument("--dp", type=int, default=None,
                   help="data-parallel GPUs (default: gpus / (tp·pp·cp), or 1)")
    p.add_argument("--zero", default="0", choices=("0", "1", "2", "3", "fsdp"),
                   help="ZeRO stage, or fsdp (default 0)")
    p.add_argument("--recompute", default="none", choices=("none", "selective", "full"),
                   help="activation recomputation (default none)")
    p.add_argument("--micro-batch", type=int, default=1, help="sequences a forward (default 1)")
    p.add_argument("--global-batch", type=int, default=None,
                   help="sequences a step over all GPUs (default: dp·micro-batch)")
    p.add_argument("--seq", type=int, default=2048, help="tokens a sequence (default 2048)")
    p.add_argument("--dtype", default="bf16",
                   help="bf16 (default) or fp16 mixed precision, or fp32/tf32")
    p.add_argument("--optimizer", default="adamw",
                   choices=("adamw", "adam", "fused_adam", "none"),
                   help="the optimizer step (default adamw; none: forward and backward alone)")
    p.add_argument("--attention", default="sdpa", choices=("sdpa", "eager"),
                   help="attention as transformers builds it (default sdpa)")
    p.add_argument("--compiled", action="store_true",
                   help="price the ops as torch.compile fuses them (as estimate --compiled)")
    p.add_argument("--interleave", type=int, default=1,
                   help="pipeline chunks a GPU: 2 or more for the interleaved schedule")
    p.add_argument("--sequence-parallel", action="store_true",
                   help="Megatron's sequence parallelism with tp")
    p.add_argument("--comm-profile", metavar="PATH", default=None,
                   help="a collective profile from `calibrate-comm`: measured collectives")
    add_network_options(p)
    p.add_argument("--search", action="store_true",
                   help="price every layout of --gpus and rank the fastest that fit")
    p.add_argument("--top", type=int, default=5, help="plans --search shows (default 5)")
    p.add_argument("--micro-batches", default="1,2,4,8", metavar="B[,B...]",
                   help="micro-batch sizes --search tries, one capture each (default 1,2,4,8)")
    p.add_argument("--assumptions", action="store_true", help="print what the plan assumes")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write the plan (or the search) as JSON (to stdout without PATH)")
    p.set_defaults(run=run)


def _sizes(text: str) -> list[int]:
    try:
        values = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise UsageError(f"--micro-batches {text!r}: give sizes as integers, e.g. 1,2,4"
                         ) from None
    if not values or min(values) < 1:
        raise UsageError(f"--micro-batches {text!r}: give positive sizes, e.g. 1,2,4")
    return values


def run(args: argparse.Namespace) -> int:
    from ..trainplan import (
        format_training_assumptions,
        format_training_search,
        plan_training,
        search_training_plans,
    )

    config_file("--hf-config", args.hf_config)
    if args.json and args.json != "-" and not Path(args.json).parent.exists():
        raise UsageError(f"--json {args.json}: directory {Path(args.json).parent} does not exist")
    if args.comm_profile is not None and not Path(args.comm_profile).is_file():
        raise UsageError(f"--comm-profile {args.comm_profile}: no such file")
    optimizer = None if args.optimizer == "none" else args.optimizer
    zero = "fsdp" if args.zero == "fsdp" else int(args.zero)
    if args.search:
        if args.gpus is None or args.global_batch is None:
            raise UsageError("--search needs --gpus and --global-batch (e.g. --gpus 8 "
                             "--global-batch 64)")
        found = search_training_plans(
            args.hf_config, args.device, gpus=args.gpus, global_batch=args.global_batch,
            seq=args.seq, dtype=args.dtype, optimizer=optimizer, attention=args.attention,
            compiled=args.compiled, micro_batches=_sizes(args.micro_batches),
            comm_profile=args.comm_profile, top=args.top, **network_kwargs(args))
        doc, text = found.to_dict(), format_training_search(found)
        plan = found.plans[0] if found.plans else None
    else:
        plan = plan_training(
            args.hf_config, args.device, gpus=args.gpus, tp=args.tp, pp=args.pp, dp=args.dp,
            cp=args.cp, ep=args.ep, zero=zero, recompute=args.recompute,
            micro_batch=args.micro_batch, global_batch=args.global_batch, seq=args.seq,
            dtype=args.dtype, optimizer=optimizer, attention=args.attention,
            compiled=args.compiled, interleave=args.interleave, sequence_parallel=args.sequence_parallel,
            comm_profile=args.comm_profile, **network_kwargs(args))
        doc, text = plan.to_dict(), str(plan)
    if args.json:
        out = json.dumps(doc, indent=2)
        if args.json == "-":
            print(out)
            return 0
        Path(args.json).write_text(out + "\n")
        print(f"written to {args.json}", file=sys.stderr)
    print(text)
    if args.assumptions and plan is not None:
        print()
        print(format_training_assumptions(plan))
    return 0
