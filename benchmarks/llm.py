"""Serving plans of Llama-2-7B, Llama-3-8B and Mixtral-8x7B on A100, H100 and L4, with the
roofline limits beside, against published measurements, and the figures the plans rest on: the
collective model and the attention model, each GPU held out. Writes benchmarks/results/llm.md.

    python benchmarks/llm.py [--data ../shared/data] [--no-held-out]

The models are built from their published sizes (configs below, no download) on the meta
device. Each plan prices prompts of 2048 tokens and 256 generated tokens at batches 1, 8 and 64,
in bf16, int4 (weight-only) and fp8 where the device has fp8 tensor cores, at tensor
parallelism 1, 2 and 4. ``--no-held-out`` skips the leave-one-GPU-out fits of the collective
and attention models (about two minutes), which need ``../shared/data``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch_gemm_cost as tgc
from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.llm import LlmPlan
from torch_gemm_cost.llm.weights import WEIGHT_BYTES

# Published sizes: each model's config.json on the Hugging Face hub (meta-llama/Llama-2-7b-hf,
# meta-llama/Meta-Llama-3-8B, mistralai/Mixtral-8x7B-v0.1) and their papers (Touvron et al.
# 2023, Table 1 of the Llama 2 paper; the Llama 3 model card; Jiang et al. 2024, Table 1 of the
# Mixtral paper: dim 4096, 32 layers, head_dim 128, hidden 14336, 32 heads, 8 KV heads, 8
# experts, top 2, vocab 32000).
MODELS: dict[str, dict[str, Any]] = {
    "Llama-2-7B": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                   "num_hidden_layers": 32, "num_attention_heads": 32,
                   "num_key_value_heads": 32, "vocab_size": 32000,
                   "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
                   "tie_word_embeddings": False},
    "Llama-3-8B": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                   "num_hidden_layers": 32, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "vocab_size": 128256,
                   "max_position_embeddings": 8192, "rope_theta": 500000.0,
                   "rms_norm_eps": 1e-5, "tie_word_embeddings": False},
    "Mixtral-8x7B": {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                     "num_hidden_layers": 32, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "vocab_size": 32000,
                     "max_position_embeddings": 32768, "num_local_experts": 8,
                     "num_experts_per_tok": 2, "rope_theta": 1e6, "sliding_window": None,
                     "tie_word_embeddings": False},
}
DEVICES = ("a100_sxm4_80gb", "h100_sxm5_80gb", "l4")
WEIGHTS = ("bf16", "int4", "fp8")
TPS = (1, 2, 4)
BATCHES = (1, 8, 64)
PROMPT, GEN = 2048, 256

# Published measurements the plans are compared with (vLLM serving Llama-3.1-8B, whose sizes
# are Llama-3-8B's). Each: (device, prompt, gen, concurrency, measured, what, source).
PUBLIC: tuple[tuple[str, int, int, int, float, str, str], ...] = (
    ("a100_sxm4_40gb", 1024, 128, 1, 1e3 / 75.0, "TPOT ms (\"about 75 tokens/sec\" decode)",
     ("johnmusgrave.com/p/vllm-throughput-latency-sweep-on: vLLM 0.23.0, A100 40GB, "
     "Llama-3.1-8B-Instruct bf16, random 1024 in / 128 out, concurrency 1")),
    ("h100_sxm5_80gb", 128, 128, 1, 6.48, "TPOT ms (p50)",
     ("yobitelcomm.github.io/bench/recipes/concurrency-sweep: vLLM 0.21.0, H100-80GB-HBM3, "
     "Llama-3.1-8B-Instruct fp16, chatbot-short prompts (length not given; 128 assumed), "
     "concurrency 1")),
    ("h100_sxm5_80gb", 128, 128, 4, 6.59, "TPOT ms (p50)",
     "the same sweep, concurrency 4"),
)


def pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1f}%"


def plan(model: str, device: str, weights: str, tp: int, batches: Sequence[int] = BATCHES,
         prompt: int = PROMPT, gen: int = GEN) -> LlmPlan:
    return tgc.plan_llm(MODELS[model], device=device, dtype="bf16", prompt=prompt, gen=gen,
                        batches=list(batches), tp=tp,
                        weights=None if weights == "bf16" else weights)


def supported(device: str, weights: str) -> bool:
    return weights != "fp8" or get_device(device).supports("fp8")


# ---------------------------------------------------------------- the held-out figures
def collective_figures(data: str) -> tuple[list[list[Any]], float]:
    """All-reduces of 64 KiB or more, each GPU held out (train.collectives' evaluation, as
    benchmarks/collectives.py runs it): per GPU, its MAPE over all its rows and over its
    rows within one node."""
    from torch_gemm_cost.measured.comm import load_comm, to_calls
    from torch_gemm_cost.train.collectives import SMALL_BYTES, leave_one_gpu_out, score

    t0 = time.perf_counter()
    rows = load_comm(data)
    _, _, kept, _ = to_calls(rows)
    gpus = sorted({rows[i].gpu for i in kept})
    held = leave_one_gpu_out(rows, gpus, seed=0)
    out = []
    for gpu in gpus:
        ar = [i for i in kept if rows[i].gpu == gpu and rows[i].collective == "all_reduce"
              and rows[i].size_bytes >= SMALL_BYTES]
        if not ar:
            continue
        node = [i for i in ar if rows[i].num_gpus == rows[i].gpus_per_node]
        whole = score([(held[i], rows[i].latency_ms) for i in ar])["mape_pct"]
        inside = score([(held[i], rows[i].latency_ms) for i in node])["mape_pct"]
        out.append([gpu, len(ar), pct(whole), len(node), pct(inside),
                    "meets" if whole <= 20.0 else "misses"])
    return out, time.perf_counter() - t0


def attention_figures(data: str) -> tuple[list[list[Any]], float]:
    """Prefill and decode calls of 0.01 ms or more, each GPU held out: the evaluation of
    benchmarks/attention.py (its leave-one-GPU-out fits, its per-phase MAPE)."""
    from attention import phase_mape  # benchmarks/attention.py

    from torch_gemm_cost.measured.attention import load_attention
    from torch_gemm_cost.predict.attention import AttentionPredictor
    from torch_gemm_cost.train.attention import leave_one_gpu_out

    t0 = time.perf_counter()
    measured = load_attention(data)
    held, _ = leave_one_gpu_out(measured, AttentionPredictor)
    out = []
    for gpu in sorted(set(measured.gpu)):
        cells: list[Any] = [gpu]
        for phase in ("prefill", "decode"):
            n, mape = phase_mape(measured, held, gpu, phase)
            cells += [n, pct(100 * mape), "meets" if mape <= 0.15 else "misses"]
        out.append(cells)
    return out, time.perf_counter() - t0


def decode_gemm_bias(data: str) -> list[list[Any]]:
    """The GEMM predictor on vLLM's own decode GEMMs: aiconfigurator's bf16 ``F.linear`` rows
    of m <= 64 tokens and a weight of at least 4096 x 4096, kernel-timed in CUDA graphs (every
    GPU of them is in the predictor's fit): median predicted / measured per GPU, and the share
    of DRAM bandwidth they reached."""
    from torch_gemm_cost.measured.gemm import read_gemm_file
    from torch_gemm_cost.predict import shipped_hybrid

    rows = read_gemm_file(Path(data) / "gemm" / "aiconfigurator.csv.gz")
    g = rows.gemms
    keep = ((g.m <= 64) & (g.n * g.k >= 4096 * 4096)
            & torch.tensor([d == "bfloat16" for d in g.dtype_names()]))
    rows = rows.select(keep)
    pred = shipped_hybrid().predict_measured(rows).double()
    out = []
    for gpu in sorted(set(rows.gpu)):
        m = torch.tensor([x == gpu for x in rows.gpu])
        share = (rows.gemms.compulsory_bytes[m] / (rows.latency_ms[m] * 1e-3)
                 / get_device(gpu).dram_bw_bytes_per_s)
        out.append([gpu, int(m.sum()), f"{float((pred[m] / rows.latency_ms[m]).median()):.3f}",
                    f"{float(share.median()):.2f}"])
    return out


# ---------------------------------------------------------------- the report
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / ".." / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "llm.md"))
    ap.add_argument("--no-held-out", action="store_true",
                    help="skip the collective and attention models' held-out fits")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    lines: list[str] = []

    # ------------------------------------------------------------ the plans
    plans: dict[tuple[str, str, str, int], LlmPlan] = {}
    t0 = time.perf_counter()
    for model in MODELS:
        for tp in TPS:
            for device in DEVICES:
                for weights in WEIGHTS:
                    if supported(device, weights):
                        plans[(model, device, weights, tp)] = plan(model, device, weights, tp)
    t_plans = time.perf_counter() - t0

    # ------------------------------------------------------------ must show
    h100 = plans[("Llama-3-8B", "h100_sxm5_80gb", "bf16", 1)]
    r1 = h100.rows[0]
    bw = h100.device.dram_bw_bytes_per_s
    w_ms = r1.weights_bytes / bw * 1e3
    tpot_ratio, ttft_ratio = r1.tpot_ms / w_ms, r1.ttft_max_ms / r1.roofline_ttft_ms
    l4 = plans[("Llama-3-8B", "l4", "bf16", 1)]
    # the HBM arithmetic, by hand from the published sizes
    params = (2 * 128256 * 4096 + 32 * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096
                                        + 2 * 4096) + 4096)
    usable = 0.9 * 24 * 2**30  # the L4's "24 GB" of GDDR6 is 24 GiB
    fixed = 8192 * 2 * (2 * 4096 + max(6144 + 4096, 3 * 14336))
    per_seq = 2 * 32 * 8 * 128 * (PROMPT + GEN) * 2 + 128256 * 4
    hand = int((usable - 2 * params - fixed) // per_seq)

    coll_rows: list[list[Any]] = []
    attn_rows: list[list[Any]] = []
    bias_rows: list[list[Any]] = []
    t_coll = t_attn = 0.0
    if (Path(args.data) / "gemm").is_dir():
        bias_rows = decode_gemm_bias(args.data)
    if not args.no_held_out:
        coll_rows, t_coll = collective_figures(args.data)
        attn_rows, t_attn = attention_figures(args.data)
    wall = time.perf_counter() - t_start

    cmd = "python benchmarks/llm.py" + (" --no-held-out" if args.no_held_out else "")
    lines += [
        "# Serving plans: Llama-2-7B, Llama-3-8B and Mixtral-8x7B on A100, H100 and L4",
        "",
        (f"Command: `{cmd}` (wall time {wall:.0f} s on one CPU thread: {len(plans)} plans "
        f"{t_plans:.0f} s, sharing their captures; the collective model's held-out fits "
        f"{t_coll:.0f} s, the attention model's {t_attn:.0f} s)."),
        "",
        (f"Every plan: prompts of {PROMPT} tokens, {GEN} generated, bf16 activations, batches "
        f"{', '.join(map(str, BATCHES))}, the default token budget (8192) and memory share "
        "(0.9); `tgc.plan_llm` prints what it assumes (`torch-gemm-cost llm --assumptions`). "
        "**roof TTFT** is the prefill's FLOPs over the dense peak of each GEMM's dtype; **roof "
        "TPOT** the bytes a decode step reads (weights at their stored size, the KV cache at mid "
        "context) over the DRAM bandwidth. No plan was measured by this project: the rows below "
        "are predictions, compared with published measurements where there are some."),
        "",
        "## Must show",
        "",
    ]
    must = [
        ["Llama-3-8B bf16 H100, batch 1: TPOT / (weight bytes / DRAM bandwidth)",
         f"{r1.tpot_ms:.3f} ms / {w_ms:.3f} ms = {tpot_ratio:.3f}", "1.0-1.5",
         "meets" if 1.0 <= tpot_ratio <= 1.5 else "misses"],
        ["Llama-3-8B bf16 H100, batch 1: TTFT of 2048 tokens / (FLOPs / dense bf16 peak)",
         f"{r1.ttft_max_ms:.2f} ms / {r1.roofline_ttft_ms:.2f} ms = {ttft_ratio:.3f}", "1.0-2.0",
         "meets" if 1.0 <= ttft_ratio <= 2.0 else "misses"],
        ["max_batch, Llama-3-8B bf16 on a 24 GB L4, 2048 + 256 tokens",
         f"{l4.max_batch} (by hand: {hand})", "equal", "meets" if l4.max_batch == hand
         else "misses"],
    ]
    lines += [tabulate(must, headers=["what", "value", "target", ""], tablefmt="github"), ""]
    lines += [
        (f"The HBM arithmetic: {params:,} parameters x 2 B = {2 * params / 1e9:.3f} GB of "
        f"weights; usable 0.9 x 24 GiB = {usable / 1e9:.2f} GB; activations for the 8192-token "
        f"budget "
        f"{fixed / 1e9:.3f} GB; a sequence's KV cache 2 x 32 x 8 x 128 x 2304 x 2 B plus its "
        f"fp32 logits 128256 x 4 B = {per_seq:,} B; (usable - weights - activations) / that = "
        f"{(usable - 2 * params - fixed) / per_seq:.2f}, so {hand}."),
        "",
    ]
    # the decode step behind the TPOT ratio
    report = h100.decode_reports[0]
    gemm = report.gemm_ms
    attention = sum(o.time_ms or 0.0 for o in report.others if o.op.attention is not None)
    other = report.other_ms - attention
    lines += [
        (f"What the H100 decode step at batch 1 (context {PROMPT + GEN // 2}) is made of: GEMMs "
        f"{gemm:.3f} ms reading {r1.decode_bytes / 1e9:.2f} GB ({r1.decode_bytes / bw * 1e3 / gemm:.0%}"
        f" of the DRAM bandwidth, weights and KV cache over the GEMMs' time), attention "
        f"{attention:.3f} ms, the other kernels {other:.3f} ms (two RMSNorms, SiLU-mul, one "
        "rotary kernel for q and k and the KV-cache write a layer, each at least its floor). How the GEMM "
        "predictor prices vLLM's own decode GEMMs (aiconfigurator's bf16 `F.linear` rows, m <= "
        "64, weights of 4096 x 4096 or more, kernel-timed in CUDA graphs; every GPU here is in "
        "the predictor's fit):"),
        "",
    ]
    if bias_rows:
        lines += [tabulate(bias_rows, headers=["gpu", "rows", "median predicted / measured",
                                               "measured share of DRAM bandwidth"],
                           tablefmt="github"), ""]
    if coll_rows:
        lines += [
            ("**Collective model, each GPU held out** (all-reduces of 64 KiB or more, target "
            "20% MAPE; `benchmarks/results/collectives.md` has every group and why the misses "
            "miss):"),
            "",
            tabulate(coll_rows, headers=["gpu", "rows", "held-out MAPE", "rows in one node",
                                         "one node only", "20%"], tablefmt="github"),
            "",
            ("**Attention model, each GPU held out** (vLLM's kernels in aiconfigurator's data, "
            "calls of 0.01 ms or more, target 15% MAPE; the evaluation of "
            "`benchmarks/attention.py`, whose results file has the per-kernel detail):"),
            "",
            tabulate(attn_rows, headers=["gpu", "prefill rows", "prefill MAPE", "15%",
                                         "decode rows", "decode MAPE", "15%"],
                     tablefmt="github"),
            "",
        ]

    # ------------------------------------------------------------ against published figures
    lines += ["## Against published measurements", ""]
    rows = []
    for device, prompt, gen, conc, measured, what, source in PUBLIC:
        p = plan("Llama-3-8B", device, "bf16", 1, batches=[conc], prompt=prompt, gen=gen)
        r = p.rows[0]
        roof = r.roofline_tpot_ms
        rows.append([device, f"{prompt} + {gen}", conc, what, f"{measured:.2f}",
                     f"{r.tpot_ms:.2f}", f"{r.tpot_ms / measured:.2f}", f"{roof:.2f}", source])
    lines += [tabulate(rows, headers=["device", "tokens", "batch", "figure", "published",
                                      "plan", "plan / published", "roofline", "source"],
                       tablefmt="github"), ""]
    int4 = plans[("Llama-3-8B", "h100_sxm5_80gb", "int4", 1)].decode_reports[0]
    bf16 = h100.decode_reports[0]
    q = sum(g.time_ms for g in int4.gemms if g.site.b_bytes is not None)
    b = sum(g.time_ms for g in bf16.gemms if g.site.module != "lm_head")
    lines += [
        (f"Weight-only int4 (Marlin/Machete): the H100 decode step's linear layers at batch 1 "
        f"take {q:.3f} ms in int4 against {b:.3f} ms in bf16, {b / q:.2f}x faster; Marlin "
        "publishes close to ideal (4x) speedups over fp16 up to batches of 16-32 tokens "
        f"(github.com/IST-DASLab/marlin, on an A10); the bytes give {2 / WEIGHT_BYTES['int4']:.2f}"
        "x with the group scales."),
        "",
    ]

    # ------------------------------------------------------------ every plan
    lines += ["## Every plan", ""]
    for model in MODELS:
        lines += [f"### {model}", ""]
        rows = []
        for device in DEVICES:
            for weights in WEIGHTS:
                if not supported(device, weights):
                    continue
                for tp in TPS:
                    p = plans[(model, device, weights, tp)]
                    for r in p.rows:
                        rows.append([
                            device, weights, tp, r.batch, f"{r.ttft_max_ms:.1f}",
                            f"{r.roofline_ttft_ms:.1f}",
                            f"{r.ttft_max_ms / r.roofline_ttft_ms:.2f}",
                            f"{r.tpot_ms:.2f}", f"{r.roofline_tpot_ms:.2f}",
                            f"{r.tpot_ms / r.roofline_tpot_ms:.2f}", f"{r.tokens_per_s:.0f}",
                            f"{r.prefill_comm_ms:.1f} / {r.decode_comm_ms:.2f}",
                            f"{r.memory_bytes / 1e9:.1f}", "yes" if r.fits else "no",
                            p.max_batch])
        lines += [tabulate(rows, headers=[
            "device", "weights", "tp", "batch", "TTFT ms", "roof TTFT", "ratio", "TPOT ms",
            "roof TPOT", "ratio", "tokens/s", "all-reduce ms (prefill / step)",
            "GB per GPU", "fits", "max batch"], tablefmt="github"), ""]
    lines += [
        ("fp8 runs where the device has fp8 tensor cores (H100, L4), not on the A100. The "
        "all-reduces are NCCL's as `predict_collective_ms` prices them on the device's usual "
        "node (NVSwitch on A100 and H100, PCIe on L4); vLLM's custom all-reduce, faster for "
        "small messages over NVLink, is not modelled."),
        "",
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[: lines.index("## Against published measurements")]))
    print(f"wrote {args.out} in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
