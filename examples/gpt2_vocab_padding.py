"""The nanoGPT finding, predicted: GPT-2's vocabulary of 50257 padded to 50304.

GPT-2 small, batch 8 × 1024 tokens, fp16, on an A100-SXM4-80GB. The report's padding advice names
the vocabulary; re-estimating the model with the suggested size checks the saving end to end.

    python examples/gpt2_vocab_padding.py [--layers 12] [--batch 8] [--seq 1024]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import torch_gemm_cost as tgc
from torch_gemm_cost.predict import Predictor, RooflinePredictor, default_predictor

CONFIG = Path(__file__).with_name("gpt2.json")


def gpt2_report(vocab_size: int, args: argparse.Namespace, predictor: Predictor) -> tgc.CostReport:
    raw = json.loads(CONFIG.read_text())
    raw.pop("model_type")
    config = GPT2Config(**{**raw, "vocab_size": vocab_size, "n_layer": args.layers})
    with torch.device("meta"):
        model = GPT2LMHeadModel(config)  # built on meta: no weights allocated
    ids = torch.ones(args.batch, args.seq, dtype=torch.long, device="meta")
    return tgc.estimate(model, (ids,), kwargs={"use_cache": False}, device=args.device,
                        dtype=torch.float16, predictor=predictor)


def main(argv: list[str] | None = None, predictor: Predictor | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--device", default="a100_sxm4_80gb")
    p.add_argument("--predictor", choices=("default", "roofline"), default="default")
    args = p.parse_args(argv)
    if predictor is None:
        predictor = RooflinePredictor() if args.predictor == "roofline" else default_predictor()

    report = gpt2_report(50257, args, predictor)
    print(report.table(depth=2))
    print(report.footer())
    advice = report.padding_advice()
    print(tgc.format_advice(advice[:3]))

    vocab = next((a for a in advice if a.current == 50257), None)
    target = vocab.suggested if vocab else 50304
    padded = gpt2_report(target, args, predictor)
    change = 100.0 * (padded.total_ms - report.total_ms) / report.total_ms
    print(
        f"\nre-estimated: vocab 50257 -> {report.total_ms:.3f} ms, vocab {target} -> "
        f"{padded.total_ms:.3f} ms ({change:+.1f}%) with {report.predictor} v{report.predictor_version}"
    )
    lm = [r for r in padded.module_rows() if r["module"] == "lm_head"]
    lm0 = [r for r in report.module_rows() if r["module"] == "lm_head"]
    if lm and lm0:
        print(f"lm_head alone: {lm0[0]['time_ms']:.3f} -> {lm[0]['time_ms']:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
