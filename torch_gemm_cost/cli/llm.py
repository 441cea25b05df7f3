"""``torch-gemm-cost llm``: a serving plan of a causal LM, per batch size.

    torch-gemm-cost llm --hf-config llama3_8b.json --device h100_sxm5_80gb --dtype bf16 \\
        --prompt 2048 --gen 256 --batch 1,8,64 [--tp 2] [--pp 2] [--weights int4] \\
        [--kv-dtype fp8] [--comm-profile comm.json]

On a terminal each stage (building, capture, pricing a batch) is a line on stderr; --quiet
hides them.

The model is built on the meta device from its config: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TextIO

from ..llm.weights import WEIGHT_FORMATS as WEIGHTS
from . import UsageError, add_network_options, config_file, network_kwargs


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """The options of a served model and its engine that `llm` and `serve-sim` share: the
    model, the GPU and dtype, its parallelism, weight and KV formats, memory share, collective
    profile and the cluster's network."""
    p.add_argument("--hf-config", required=True, metavar="PATH",
                   help="an HF config.json of a causal LM (needs model_type)")
    p.add_argument("--device", default="h100_sxm5_80gb", metavar="ID",
                   help="catalog id, GPU name, spec file or calibration profile (see `devices`; "
                        "default h100_sxm5_80gb)")
    p.add_argument("--dtype", default="bf16", help="activations: bf16 (default) or fp16")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--pp", type=int, default=1,
                   help="pipeline stages of --tp GPUs each, batches in flight through them "
                        "(default 1)")
    p.add_argument("--ep", type=int, default=1,
                   help="expert-parallel GPUs of an MoE (vLLM's --enable-expert-parallel): a "
                        "multiple of --tp, ep / tp data-parallel attention ranks (default 1)")
    p.add_argument("--weights", choices=WEIGHTS, default=None,
                   help="weight format of the linear layers (default: the dtype; nvfp4 and "
                        "mxfp4 need fp4 tensor cores, w4a8 and fp8 fp8 ones)")
    p.add_argument("--kv-dtype", choices=("fp8",), default=None,
                   help="KV cache dtype (default: the dtype)")
    p.add_argument("--memory-utilization", type=float, default=0.9,
                   help="share of GPU memory the engine uses (default 0.9, vLLM's)")
    p.add_argument("--comm-profile", metavar="PATH", default=None,
                   help="a collective profile from `calibrate-comm`: measured collectives")
    add_network_options(p)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "llm",
        help="plan serving an LLM: TTFT, TPOT, throughput and memory per batch size",
        description="Plan serving a causal LM as vLLM serves it: per batch size, the time to "
        "first token (chunked prefill), the time per output token (decode with a growing KV "
        "cache), tokens per second, and whether weights, KV cache and activations fit; the "
        "largest batch that fits; the roofline limits beside.",
    )
    add_engine_options(p)
    p.add_argument("--prompt", type=int, default=2048, help="prompt tokens (default 2048)")
    p.add_argument("--gen", type=int, default=256, help="generated tokens (default 256)")
    p.add_argument("--batch", default="1,8,64", metavar="B[,B...]",
                   help="batch sizes, comma separated (default 1,8,64)")
    p.add_argument("--token-budget", type=int, default=8192,
                   help="tokens a forward pass holds, chunked prefill (default 8192)")
    p.add_argument("--max-num-seqs", type=int, default=256, metavar="N",
                   help="most sequences the engine schedules at once (default 256, vLLM's "
                   "max_num_seqs); larger batches are flagged")
    p.add_argument("--predictor", choices=("default", "roofline"), default="default",
                   help="GEMM predictor: the package's default, or the pure roofline")
    p.add_argument("--layers", nargs="?", type=int, const=2, default=None, metavar="DEPTH",
                   help="also print each batch's decode step by module, DEPTH levels deep "
                   "(default 2; 0: one row per GEMM)")
    p.add_argument("--assumptions", action="store_true", help="print what the plan assumes")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write the plan as JSON (to stdout without PATH)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines on stderr (shown only when stderr is a terminal)")
    p.set_defaults(run=run)

    def error(message: str) -> NoReturn:  # one line, exit code 2, no usage dump
        print(f"torch-gemm-cost llm: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    p.error = error  # type: ignore[method-assign]


def _batches(text: str) -> list[int]:
    try:
        values = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise UsageError(f"--batch {text!r}: give batch sizes as integers, e.g. 1,8,64"
                         ) from None
    if not values:
        raise UsageError(f"--batch {text!r}: give at least one batch size, e.g. 1,8,64")
    return values


def progress_lines(stream: TextIO, tty: bool | None = None) -> Callable[[str], None] | None:
    """Each stage of the plan as a line on ``stream`` with the seconds since the start, when
    ``stream`` is a terminal (``tty`` None: ask it); None, showing nothing, otherwise."""
    if not (stream.isatty() if tty is None else tty):
        return None
    t0 = time.perf_counter()

    def show(message: str) -> None:
        print(f"[{time.perf_counter() - t0:5.1f} s] {message}", file=stream, flush=True)

    return show


def run(args: argparse.Namespace, *, stderr_tty: bool | None = None) -> int:
    """The plan as the arguments say; ``stderr_tty`` overrides whether stderr is a terminal,
    which decides whether progress lines are shown."""
    from ..llm import format_llm_assumptions, format_llm_layers, format_llm_plan, plan_llm
    from ..predict import RooflinePredictor

    config_file("--hf-config", args.hf_config)
    if args.layers is not None and args.layers < 0:
        raise UsageError(f"--layers must be 0 or more, got {args.layers}; try --layers 2")
    if args.json and args.json != "-" and not Path(args.json).parent.exists():
        raise UsageError(f"--json {args.json}: directory {Path(args.json).parent} does not exist")
    if args.comm_profile is not None and not Path(args.comm_profile).is_file():
        raise UsageError(f"--comm-profile {args.comm_profile}: no such file")
    plan = plan_llm(args.hf_config, device=args.device, dtype=args.dtype, prompt=args.prompt,
                    gen=args.gen, batches=_batches(args.batch), tp=args.tp, pp=args.pp,
                    ep=args.ep,
                    comm_profile=args.comm_profile, **network_kwargs(args),
                    weights=args.weights, kv_dtype=args.kv_dtype,
                    token_budget=args.token_budget,
                    memory_utilization=args.memory_utilization,
                    max_num_seqs=args.max_num_seqs,
                    predictor=RooflinePredictor() if args.predictor == "roofline" else None,
                    progress=None if args.quiet else progress_lines(sys.stderr, stderr_tty))
    if args.json:
        text = json.dumps(plan.to_dict(), indent=2)
        if args.json == "-":
            print(text)
            return 0
        Path(args.json).write_text(text + "\n")
        print(f"written to {args.json}", file=sys.stderr)
    print(format_llm_plan(plan))
    if args.layers is not None:
        for row in plan.rows:
            print()
            print(format_llm_layers(plan, row.batch, depth=args.layers or None))
    if args.assumptions:
        print()
        print(format_llm_assumptions(plan))
    return 0
