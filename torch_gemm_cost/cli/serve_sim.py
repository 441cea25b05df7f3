"""``torch-gemm-cost serve-sim``: a model served under load, step by step as vLLM V1 schedules it.

    torch-gemm-cost serve-sim --hf-config llama3_8b.json --device h100_sxm5_80gb \\
        --rate 4 --prompt lognormal:1024:512 --gen 128 --num-requests 200
    torch-gemm-cost serve-sim --hf-config llama3_8b.json --concurrency 16 --prompt 512 --gen 128
    torch-gemm-cost serve-sim --hf-config llama3_8b.json --concurrency 16 --prompt 512 \
        --gen 128 --host-profile vllm-inf-concurrency1.json   # the host's share, calibrated
    torch-gemm-cost serve-sim --hf-config llama3_8b.json --max-rate-under-slo \\
        --slo-ttft-p99-ms 500 --prompt 1024 --gen 128
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import UsageError, config_file, network_kwargs
from .llm import add_engine_options

SLO_FLAGS = tuple((m, q) for m in ("ttft", "tpot", "e2e") for q in (50, 90, 99))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve-sim",
        help="simulate serving an LLM under load: TTFT/TPOT/latency percentiles, throughput",
        description="Serve a workload (Poisson or constant arrivals at a rate, or a closed loop "
        "of clients) through vLLM V1's scheduler, step by step: chunked prefill mixed with "
        "decode under the token budget, max_num_seqs, preemption when the KV cache fills. Each "
        "step is priced as the `llm` plan prices one. Lengths are a token count or a "
        "distribution: uniform:LO:HI, normal:MEAN:STD, lognormal:MEAN:STD, file:PATH.",
    )
    add_engine_options(p)
    load = p.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, metavar="QPS", help="requests a second (open loop)")
    load.add_argument("--concurrency", type=int, metavar="N",
                      help="clients in a closed loop, each sending when its last finished")
    p.add_argument("--arrival", choices=("poisson", "constant"), default="poisson",
                   help="gaps between arrivals at --rate (default poisson)")
    p.add_argument("--prompt", default="2048", metavar="LEN",
                   help="prompt tokens: a count or a distribution (default 2048)")
    p.add_argument("--gen", default="256", metavar="LEN",
                   help="generated tokens: a count or a distribution (default 256)")
    p.add_argument("--num-requests", type=int, default=200, help="requests (default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of lengths and arrivals")
    p.add_argument("--replicas", type=int, default=1,
                   help="data-parallel engines of --tp GPUs behind one router that deals the "
                        "requests out in turn (default 1)")
    p.add_argument("--max-num-batched-tokens", type=int, default=8192, dest="token_budget",
                   help="tokens a step holds (default 8192)")
    p.add_argument("--max-num-seqs", type=int, default=256,
                   help="running requests at most (default 256, vLLM's)")
    p.add_argument("--max-rate-under-slo", action="store_true",
                   help="find the largest Poisson rate meeting every --slo-* bound (bisection)")
    for m, q in SLO_FLAGS:
        p.add_argument(f"--slo-{m}-p{q}-ms", type=float, metavar="MS", default=None,
                       help=argparse.SUPPRESS if q == 90 else
                       f"objective: {m.upper()} p{q} at most MS (with --max-rate-under-slo)")
    p.add_argument("--host-profile", metavar="JSON",
                   help="price the host's share (vLLM's API server: a request's path and each "
                        "streamed token; the engine's host time a step) from a `vllm bench serve "
                        "--save-result` JSON of your own server at one load: closed loop "
                        "(--max-concurrency) or a Poisson --request-rate (default: unpriced, "
                        "the GPU's time alone)")
    p.add_argument("--host-token-ms", type=float, default=0.0, metavar="MS",
                   help="with --host-profile: the API server's time a streamed token, where you "
                        "measured it (one load does not show it; default 0)")
    p.add_argument("--assumptions", action="store_true", help="print what the run assumes")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write the run as JSON, every request included (to stdout without "
                        "PATH)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..serving import ServingEngine
    from ..serving.slo import max_rate_under_slo

    config_file("--hf-config", args.hf_config)
    if args.json and args.json != "-" and not Path(args.json).parent.exists():
        raise UsageError(f"--json {args.json}: directory {Path(args.json).parent} does not exist")
    if args.comm_profile is not None and not Path(args.comm_profile).is_file():
        raise UsageError(f"--comm-profile {args.comm_profile}: no such file")
    if args.host_profile is not None and not Path(args.host_profile).is_file():
        raise UsageError(f"--host-profile {args.host_profile}: no such file")
    if args.host_token_ms and args.host_profile is None:
        raise UsageError("--host-token-ms is a cost of the host profile; add --host-profile")
    slo = {f"{m}_p{q}": v for m, q in SLO_FLAGS
           if (v := getattr(args, f"slo_{m}_p{q}_ms")) is not None}
    if args.max_rate_under_slo and not slo:
        raise UsageError("--max-rate-under-slo needs a bound, e.g. --slo-ttft-p99-ms 500")
    if args.max_rate_under_slo and (args.rate is not None or args.concurrency is not None):
        raise UsageError("--max-rate-under-slo searches the Poisson rate itself; leave out "
                         "--rate and --concurrency")
    if slo and not args.max_rate_under_slo:
        raise UsageError("--slo-* bounds are for --max-rate-under-slo; add it")
    if not args.max_rate_under_slo and args.rate is None and args.concurrency is None:
        raise UsageError("give --rate QPS or --concurrency N (or --max-rate-under-slo)")
    engine = ServingEngine(args.hf_config, args.device, dtype=args.dtype, tp=args.tp,
                           pp=args.pp, ep=args.ep, max_num_seqs=args.max_num_seqs,
                           token_budget=args.token_budget,
                           memory_utilization=args.memory_utilization, weights=args.weights,
                           kv_dtype=args.kv_dtype, comm_profile=args.comm_profile,
                           host_profile=args.host_profile, host_token_ms=args.host_token_ms,
                           **network_kwargs(args))
    workload = {"prompt": args.prompt, "gen": args.gen, "num_requests": args.num_requests,
                "seed": args.seed, "arrival": args.arrival, "replicas": args.replicas}
    if args.max_rate_under_slo:
        found = max_rate_under_slo(engine, slo, **workload)
        bounds = ", ".join(f"{k} <= {v:g} ms" for k, v in slo.items())
        if found.sim is None:
            print(f"no rate meets {bounds}: even {found.miss_rate_qps:g} QPS misses")
            return 0
        miss = f"; {found.miss_rate_qps:.3g} QPS misses" if found.miss_rate_qps else ""
        print(f"max rate under SLO ({bounds}): {found.rate_qps:.3g} QPS{miss} "
              f"({found.runs} runs)\n")
        sim = found.sim
    else:
        sim = engine.run(rate_qps=args.rate, concurrency=args.concurrency, **workload)
    if args.json:
        text = json.dumps(sim.to_dict(), indent=2)
        if args.json == "-":
            print(text)
            return 0
        Path(args.json).write_text(text + "\n")
        print(f"written to {args.json}", file=sys.stderr)
    print(sim)
    if args.assumptions:
        print("\nassumptions:")
        print("\n".join(f"- {a}" for a in sim.assumptions))
    return 0
