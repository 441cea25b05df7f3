"""Prediction speed on one CPU thread: GEMM predictions per second, and estimate() on Llama-7B
and Mixtral-8x7B.

    python benchmarks/speed.py                       # writes benchmarks/results/speed.md
    python benchmarks/speed.py --weights W.json      # also times the hybrid with these weights

The GEMM batches are seeded random shapes (dims log-uniform in [1, 16384], the dtypes an H100
runs, matmul/linear/bmm), predicted on ``h100_sxm5_80gb``. Each figure is the median of
repeated calls after one warm-up call. The target is more than 100k GEMM predictions per second.
"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

import torch_gemm_cost as tgc
from torch_gemm_cost.measured.gemm import gemm_batch_from_columns
from torch_gemm_cost.predict import GemmBatch, Predictor, RooflinePredictor, default_predictor
from torch_gemm_cost.predict.query import load_weights, predict_gemm_ms

DEVICE = "h100_sxm5_80gb"
SIZES = (1_000, 10_000, 100_000)
DTYPES = ("float32", "tf32", "bfloat16", "float16", "float8_e4m3fn")
OPS = ("matmul", "linear", "bmm")
TARGET_PER_S = 100_000
RESULTS = Path(__file__).resolve().parent / "results" / "speed.md"


def random_gemms(size: int, seed: int = 0) -> GemmBatch:
    """``size`` GEMMs with log-uniform dims, mixed dtypes and ops (seeded)."""
    g = torch.Generator().manual_seed(seed)

    def log_uniform(hi: float) -> list[int]:
        u = torch.rand(size, generator=g, dtype=torch.float64)
        return torch.exp(u * math.log(hi)).round().long().tolist()

    op = [OPS[i] for i in torch.randint(len(OPS), (size,), generator=g).tolist()]
    batch = [b if o == "bmm" else 1 for o, b in zip(op, log_uniform(64.0))]
    return gemm_batch_from_columns(
        op=op, dtype=[DTYPES[i] for i in torch.randint(len(DTYPES), (size,), generator=g).tolist()],
        batch=batch, m=log_uniform(16384.0), n=log_uniform(16384.0), k=log_uniform(16384.0),
    )


def time_call(fn: Callable[[], Any], min_total_s: float = 1.0, min_repeats: int = 5) -> float:
    """Median seconds per call, after one warm-up call."""
    fn()
    times: list[float] = []
    while len(times) < min_repeats or sum(times) < min_total_s:
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        if len(times) >= 1000:
            break
    return statistics.median(times)


def predictor_rows(predictors: dict[str, Predictor], quick: bool) -> list[list[Any]]:
    device = tgc.get_device(DEVICE)
    rows = []
    for size in SIZES[:2] if quick else SIZES:
        gemms = random_gemms(size)
        for label, pred in predictors.items():
            per_call = time_call(partial(pred.predict, gemms, device))
            rows.append([label, "predictor.predict", size, per_call * 1e3, size / per_call])
        m, n, k = gemms.m, gemms.n, gemms.k
        per_call = time_call(partial(predict_gemm_ms, DEVICE, m=m, n=n, k=k, dtype="bf16"))
        rows.append([default_predictor().name, "tgc.predict_gemm_ms (bf16)", size,
                     per_call * 1e3, size / per_call])
    return rows


def estimate_rows() -> tuple[list[list[Any]], str]:
    """estimate() wall time on Llama-7B and Mixtral-8x7B geometry (meta weights), or why it
    was skipped."""
    estimate = getattr(tgc, "estimate", None)
    if estimate is None:
        return [], "skipped: torch_gemm_cost.estimate is not available in this installation"
    try:
        from transformers import (
            LlamaConfig,
            LlamaForCausalLM,
            MixtralConfig,
            MixtralForCausalLM,
        )
    except ImportError as e:
        return [], f"skipped: transformers is needed to build the models ({e})"
    llama = LlamaConfig(  # Llama-2-7B
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
    )
    mixtral = MixtralConfig(  # Mixtral-8x7B: 8 experts of MLP 14336, 2 per token
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, num_local_experts=8,
        num_experts_per_tok=2,
    )
    rows = []
    builds: tuple[tuple[str, Callable[[], torch.nn.Module]], ...] = (
        ("Llama-7B", partial(LlamaForCausalLM, llama)),
        ("Mixtral-8x7B", partial(MixtralForCausalLM, mixtral)))
    for name, build in builds:
        with torch.device("meta"):
            model = build().eval()
        ids = torch.ones((1, 2048), dtype=torch.long, device="meta")
        for mode, label in (("inference", "inference, first call"), ("inference", "inference"),
                            ("train", "train")):
            wall, cpu = time.perf_counter(), time.process_time()
            report = estimate(model, (ids,), device=DEVICE, dtype=torch.bfloat16, mode=mode)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            rows.append([name, label, "1 x 2048", len(report.gemms), wall, cpu,
                         report.total_ms, report.predictor])
    return rows, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--weights", type=Path, help="also time the hybrid with these weights")
    parser.add_argument("--quick", action="store_true", help="1k and 10k only, no whole models")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    predictors: dict[str, Predictor] = {"roofline": RooflinePredictor()}
    default = default_predictor()
    if default.name != "roofline":
        predictors[f"{default.name} (default)"] = default
    else:
        predictors = {"roofline (default)": default}
    if args.weights is not None:
        predictors[f"hybrid ({args.weights.name})"] = load_weights(args.weights)

    rows = predictor_rows(predictors, args.quick)
    models, skipped = ([], "skipped: --quick") if args.quick else estimate_rows()
    worst = {
        label: min(r[4] for r in rows if r[0] == label and r[1] == "predictor.predict")
        for label in predictors
    }

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    command = "python benchmarks/speed.py" + ("" if argv is None and len(sys.argv) == 1
                                              else " " + " ".join(argv or sys.argv[1:]))
    text = [
        "# Prediction speed",
        "",
        (f"`{command}` on {datetime.date.today().isoformat()}: one CPU thread "
         f"(`torch.set_num_threads(1)`), {cpu}, torch {torch.__version__}, "
         f"torch_gemm_cost {tgc.__version__}. Device {DEVICE}; seeded random GEMMs (dims "
         "log-uniform in [1, 16384]; fp32/tf32/bf16/fp16/fp8; matmul/linear/bmm); median of "
         "repeated calls after a warm-up."),
        "",
        "## GEMM predictions per second",
        "",
        tabulate(
            [[r[0], r[1], f"{r[2]:,}", f"{r[3]:.3f}", f"{r[4]:,.0f}"] for r in rows],
            headers=["predictor", "call", "GEMMs per call", "ms per call", "GEMMs/s"],
            tablefmt="github",
        ),
        "",
        "Slowest `predictor.predict` rate over the batch sizes (target > "
        f"{TARGET_PER_S:,} GEMMs/s): "
        + "; ".join(
            f"{label} {rate:,.0f} ({'met' if rate > TARGET_PER_S else 'NOT met'})"
            for label, rate in worst.items()
        )
        + ". `predict_gemm_ms` adds input checks and batch building to the predictor call.",
        "",
        "## estimate() on Llama-7B and Mixtral-8x7B geometry",
        "",
    ]
    if models:
        text += [
            ("Llama-2-7B (32 layers, hidden 4096, MLP 11008, vocab 32000) and Mixtral-8x7B (the "
             "same with 8 experts of MLP 14336, 2 per token, 8 key/value heads) built from their "
             "configs on the meta device; bf16 on the same device. Wall and process CPU time of "
             "one `estimate()` call (capture + GEMM records + prediction + report); the first "
             "call also pays one-time setup (lazy imports, tracing caches). CPU time is the "
             "figure to trust on a shared machine."),
            "",
            tabulate(
                [[r[0], r[1], r[2], r[3], f"{r[4]:.2f}", f"{r[5]:.2f}", f"{r[6]:.1f}", r[7]]
                 for r in models],
                headers=["model", "mode", "tokens", "GEMMs", "wall s", "CPU s", "predicted ms",
                         "predictor"],
                tablefmt="github",
            ),
        ]
    else:
        text.append(skipped)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
