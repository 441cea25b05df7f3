"""Prefill against decode for Llama-2-7B geometry: latency and throughput, and why decode is
memory-bound.

Prefill runs 2048 prompt tokens at batch 1. Decode runs one new token per sequence against a KV
cache of 2048 tokens, at batch 1 to 64. A decode GEMM reads every weight to do 2·batch FLOPs per
weight, far below the device's ridge point, so its time is set by DRAM bandwidth until the batch
grows large.

    python examples/llama_prefill_vs_decode.py [--layers 32] [--device h100_sxm5_80gb]
"""

from __future__ import annotations

import argparse

import torch
from tabulate import tabulate
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import torch_gemm_cost as tgc
from torch_gemm_cost.predict import RooflinePredictor, default_predictor


def build(layers: int) -> LlamaForCausalLM:
    config = LlamaConfig(num_hidden_layers=layers)  # 7B: hidden 4096, MLP 11008, 32 heads
    with torch.device("meta"):
        return LlamaForCausalLM(config)


def kv_cache(model: LlamaForCausalLM, batch: int, context: int) -> DynamicCache:
    """A KV cache of ``context`` tokens per layer, on meta (no memory)."""
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    cache = DynamicCache(config=cfg)
    for layer in range(cfg.num_hidden_layers):
        k = torch.zeros(batch, cfg.num_key_value_heads, context, head_dim, device="meta")
        cache.update(k, k.clone(), layer)
    return cache


def memory_bound_pct(report: tgc.CostReport) -> float:
    mem = sum(g.time_ms for g in report.gemms if g.bound == "memory")
    return 100.0 * mem / report.gemm_ms if report.gemm_ms else 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--prompt", type=int, default=2048)
    p.add_argument("--batches", default="1,2,4,8,16,32,64", help="decode batch sizes, comma separated")
    p.add_argument("--device", default="h100_sxm5_80gb")
    p.add_argument("--predictor", choices=("default", "roofline"), default="default")
    args = p.parse_args(argv)
    predictor = RooflinePredictor() if args.predictor == "roofline" else default_predictor()
    model = build(args.layers)
    common = {"device": args.device, "dtype": torch.bfloat16, "predictor": predictor}

    rows = []
    ids = torch.ones(1, args.prompt, dtype=torch.long, device="meta")
    prefill = tgc.estimate(model, (ids,), kwargs={"use_cache": False}, **common)
    rows.append(["prefill", 1, args.prompt, prefill.total_ms, args.prompt / prefill.total_ms * 1e3,
                 prefill.achieved_tflops, memory_bound_pct(prefill)])
    decode = None
    for batch in (int(b) for b in args.batches.split(",")):
        ids = torch.ones(batch, 1, dtype=torch.long, device="meta")
        kwargs = {"cache": kv_cache(model, batch, args.prompt), "use_cache": True}
        decode = tgc.estimate(model, (ids,), kwargs=kwargs, **common)
        rows.append(["decode", batch, batch, decode.total_ms, batch / decode.total_ms * 1e3,
                     decode.achieved_tflops, memory_bound_pct(decode)])

    print(f"Llama-2-7B geometry ({args.layers} layers), bf16 on {args.device}, "
          f"predictor {prefill.predictor} v{prefill.predictor_version}")
    print(tabulate(rows, headers=["phase", "batch", "tokens", "latency ms", "tokens/s", "TFLOP/s",
                                  "% GEMM time memory-bound"],
                   floatfmt=("", "", "", ".3f", ".0f", ".1f", ".0f")))
    if decode is not None:
        print(f"\nlargest decode step, by layer (batch {rows[-1][1]}):")
        print(decode.table(top=5))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
