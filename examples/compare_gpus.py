"""One model on four GPUs: A100, H100, L4 and MI300X, in bf16 and in fp8 where the device has it.

Llama-2-7B geometry, a 2048-token prefill at batch 1, built on meta. The A100 has no fp8 tensor
cores, so it is compared in bf16 only.

    python examples/compare_gpus.py [--layers 32] [--seq 2048]
"""

from __future__ import annotations

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import torch_gemm_cost as tgc
from torch_gemm_cost.predict import RooflinePredictor, default_predictor

DEVICES = ("a100_sxm4_80gb", "h100_sxm5_80gb", "l4", "mi300x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--predictor", choices=("default", "roofline"), default="default")
    args = p.parse_args(argv)
    predictor = RooflinePredictor() if args.predictor == "roofline" else default_predictor()

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=args.layers))
    ids = torch.ones(args.batch, args.seq, dtype=torch.long, device="meta")
    common = {"kwargs": {"use_cache": False}, "predictor": predictor}

    reports = tgc.compare(model, (ids,), devices=DEVICES, dtypes=["bf16"], **common)
    fp8 = [d for d in DEVICES if tgc.get_device(d).supports("fp8")]
    reports += tgc.compare(model, (ids,), devices=fp8, dtypes=["fp8"], **common)
    reports.sort(key=lambda r: (DEVICES.index(r.device.id), r.dtype))

    print(f"Llama-2-7B geometry ({args.layers} layers), prefill {args.batch}×{args.seq} tokens, "
          f"predictor {reports[0].predictor} v{reports[0].predictor_version}")
    print(f"no fp8 on: {', '.join(d for d in DEVICES if d not in fp8)}\n")
    print(tgc.format_comparison(reports, top=5))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
