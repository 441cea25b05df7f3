"""Training plans against published multi-GPU training steps. Writes
benchmarks/results/train_plan.md.

    python benchmarks/train_plan.py [--data ../shared/data] [--megatron-rows 10]

1. NeuSight's 4-GPU labels (``e2e/neusight_labels.csv``, rows with option dp4, tp4, pp4_1):
   GPT-2 Large, 1024 tokens, global batch 4, fp32, on four A100-SXM4-40GB. NeuSight timed them
   with scripts/asplos/collect_label_distributed.py (github.com/sitar-lab/NeuSight): the HF
   config trained through accelerate's Megatron-LM plugin, the CUDA events around
   ``model(**batch)`` and ``accelerator.backward(loss)``. Under that plugin ``model(**batch)``
   is accelerate's MegatronEngine.forward, which runs Megatron's whole train_step: forward and
   backward through the pipeline schedule, the gradient all-reduce and the optimizer step
   (accelerate/utils/megatron_lm.py, "model(**batch_data) performs following operations ...
   5. Reduce gradients. 6. Update parameters."). The plans therefore include the optimizer,
   as Megatron runs it (apex FusedAdam); the table also shows them without it.
   dp4: micro-batch 1 on each of 4 GPUs; tp4: the batch of 4 on a 4-way tensor-parallel group;
   pp4_1: 4 stages, one micro-batch of 4 (``per_device_batch_size = global_batch // dp //
   num_micro_batches`` in that script).
2. Table 1 of Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU
   Clusters Using Megatron-LM", arXiv:2104.04473): GPT models of 1.7B to 1T parameters on
   Selene's A100-SXM4-80GB (DGX A100 nodes: 8 GPUs on NVSwitch, 8x 200 Gb/s HDR InfiniBand),
   vocabulary 51200, 2048 tokens, mixed precision (fp16), with achieved teraFLOP/s per GPU
   computed by their Eq. 3, F = 96·B·s·l·h²·(1 + s/6h + V/16lh), which assumes full activation
   recomputation. Each row is rebuilt as a GPT-2-architecture config of its sizes on the meta
   device; the predicted TFLOP/s is F over the predicted step and the GPUs, as the paper
   divides F by the measured step.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch_gemm_cost as tgc
from torch_gemm_cost.predict.comm_host import describe_comm_host, host_collective_ms
from torch_gemm_cost.predict.registry import load_shipped

NEUSIGHT_LAYOUTS: dict[str, dict[str, int]] = {
    "dp4": {"tp": 1, "pp": 1, "dp": 4, "micro_batch": 1},
    "tp4": {"tp": 4, "pp": 1, "dp": 1, "micro_batch": 4},
    "pp4_1": {"tp": 1, "pp": 4, "dp": 1, "micro_batch": 4},
}
TARGET_PCT = 10.0

# Narayanan et al. 2021, Table 1: (params B, heads, hidden, layers, tp, pp, GPUs, batch,
# achieved TFLOP/s per GPU)
MEGATRON_TABLE1: tuple[tuple[float, int, int, int, int, int, int, int, int], ...] = (
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
)
MEGATRON_VOCAB, MEGATRON_SEQ = 51200, 2048
MEGATRON_DEVICE = "a100_sxm4_80gb"


def neusight(data: Path) -> tuple[list[list[Any]], list[str]]:
    """The 4-GPU rows: label, NeuSight's prediction, ours with the optimizer and without."""
    with open(data / "e2e" / "neusight_labels.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["option"] in NEUSIGHT_LAYOUTS]
    config = json.loads((data / "e2e" / "configs" / "gpt2_large.json").read_text())
    out, notes = [], []
    for r in rows:
        layout = NEUSIGHT_LAYOUTS[r["option"]]
        kw: dict[str, Any] = dict(layout, seq=int(r["seq_len"]), global_batch=int(r["batch"]),
                                  dtype="fp32", attention="eager")
        with_opt = tgc.plan_training(config, r["gpu"], optimizer="fused_adam", **kw)
        without = tgc.plan_training(config, r["gpu"], optimizer=None, **kw)
        fused = tgc.plan_training(config, r["gpu"], optimizer="fused_adam", compiled=True, **kw)
        reference = tgc.plan_training(config, r["gpu"], optimizer="fused_adam",
                                      comm_host="reference", **kw)
        meas = float(r["measured_total_ms"])
        err = 100 * (with_opt.step_ms - meas) / meas
        out.append([r["option"], r["gpu"], with_opt.layout.label(), meas, float(r["neusight_pred_ms"]),
                    float(r["neusight_err_pct"]), with_opt.step_ms, err,
                    100 * (without.step_ms - meas) / meas,
                    100 * (fused.step_ms - meas) / meas,
                    100 * (reference.step_ms - meas) / meas, with_opt.compute_ms,
                    with_opt.bubble_ms, with_opt.exposed_comm_ms, with_opt.optimizer_ms,
                    "yes" if abs(err) <= TARGET_PCT else "no"])
        notes.append(f"{r['option']}: {with_opt.layout.label()}, "
                     f"{with_opt.micro_batches} micro-batch(es) of {with_opt.layout.micro_batch}")
    return out, notes


def megatron_config(hidden: int, heads: int, layers: int) -> dict[str, Any]:
    """A GPT of Table 1's sizes: GPT-2's architecture (learned positions, LayerNorm, GeLU MLP
    of 4h, tied embeddings), as Megatron-LM's GPT model."""
    return {"model_type": "gpt2", "n_embd": hidden, "n_head": heads, "n_layer": layers,
            "n_positions": MEGATRON_SEQ, "vocab_size": MEGATRON_VOCAB, "bos_token_id": 0,
            "eos_token_id": 0}


def megatron_flops(batch: int, hidden: int, layers: int) -> float:
    """Eq. 3 of the paper: the FLOPs of one iteration with activation recomputation."""
    s, h, l, v = MEGATRON_SEQ, hidden, layers, MEGATRON_VOCAB
    return 96 * batch * s * l * h**2 * (1 + s / (6 * h) + v / (16 * l * h))


# what the paper states of Selene: DGX A100 nodes on an NVIDIA SuperPOD fabric, 8x 200 Gb/s HDR
# InfiniBand a node, the reference architecture the host class "reference" prices
MEGATRON_COMM_HOST = "reference"


def megatron_kwargs(tp: int, pp: int, gpus: int, batch: int) -> dict[str, Any]:
    """``plan_training``'s arguments for one row of Table 1, as the paper states and the
    module docstring sources them (the kernels as torch.compile fuses them, eager attention),
    the network class the paper states (``MEGATRON_COMM_HOST``)."""
    return {"gpus": gpus, "tp": tp, "pp": pp, "micro_batch": 1, "global_batch": batch,
            "seq": MEGATRON_SEQ, "dtype": "fp16", "optimizer": "fused_adam",
            "recompute": "full", "zero": 0, "sequence_parallel": False, "attention": "eager",
            "compiled": True, "comm_host": MEGATRON_COMM_HOST}


def megatron_plan(config: dict[str, Any], kw: dict[str, Any], **change: Any) -> Any:
    """The row's plan on Selene's GPU, with ``change`` over ``kw`` (``megatron_kwargs``)."""
    return tgc.plan_training(config, MEGATRON_DEVICE, **(kw | change))


def megatron(rows: int) -> list[list[Any]]:
    """Table 1's rows: the published TFLOP/s per GPU and ours at the network class the paper
    states (the main column), the default prior (``fitted``) and its interval over the host
    classes, and the same plan unfused (eager), with FlashAttention (sdpa), and interleaved."""
    out = []
    for params, heads, hidden, layers, tp, pp, gpus, batch, published in MEGATRON_TABLE1[:rows]:
        dp = gpus // (tp * pp)
        config = megatron_config(hidden, heads, layers)
        kw = megatron_kwargs(tp, pp, gpus, batch)
        start = time.perf_counter()
        plan = megatron_plan(config, kw)
        prior = megatron_plan(config, kw, comm_host="fitted")
        eager = megatron_plan(config, kw, compiled=False)
        flash = megatron_plan(config, kw, compiled=False, attention="sdpa")
        m = plan.micro_batches
        inter = None
        if pp > 1 and m % pp == 0 and layers % (2 * pp) == 0:
            inter = megatron_plan(config, kw, interleave=2)
        flops = megatron_flops(batch, hidden, layers)

        def tflops(step_ms: float, flops: float = flops, gpus: int = gpus) -> float:
            return flops / (step_ms * 1e-3) / gpus / 1e12

        def err(tf: float, published: int = published) -> float:
            return 100 * (tf - published) / published

        ours, fitted = tflops(plan.step_ms), tflops(prior.step_ms)
        lo_ms, hi_ms = prior.step_interval_ms
        out.append([f"{params:g}B", f"{hidden}/{heads}/{layers}", f"{tp}/{pp}/{dp}", gpus, batch,
                    m, published, ours, err(ours), fitted, err(fitted),
                    f"{tflops(hi_ms):.1f} - {tflops(lo_ms):.1f}",
                    "yes" if tflops(hi_ms) <= published <= tflops(lo_ms) else "no",
                    tflops(eager.step_ms), tflops(flash.step_ms),
                    tflops(inter.step_ms) if inter else None,
                    plan.bubble_ms / plan.step_ms * 100,
                    plan.exposed_comm_ms / plan.step_ms * 100,
                    plan.comm_ms["tensor"] / plan.step_ms * 100,
                    max(s.dp_exposed_ms for s in plan.stages) / plan.step_ms * 100,
                    prior.exposed_comm_ms / prior.step_ms * 100,
                    plan.memory_per_gpu_bytes / 1e9, "yes" if plan.fits else "NO",
                    time.perf_counter() - start])
        print(f"  {params:g}B done in {out[-1][-1]:.0f} s", file=sys.stderr)
    return out


def megatron_command(hidden: int, heads: int, layers: int, kw: dict[str, Any]) -> str:
    """The ``train-plan`` command line a user runs for a row (``megatron_kwargs``)."""
    flags = [f"--hf-config gpt_{hidden}x{layers}.json", f"--device {MEGATRON_DEVICE}",
             f"--gpus {kw['gpus']}", f"--tp {kw['tp']}", f"--pp {kw['pp']}",
             f"--global-batch {kw['global_batch']}", f"--seq {kw['seq']}",
             f"--dtype {kw['dtype']}", f"--optimizer {kw['optimizer']}",
             f"--recompute {kw['recompute']}", f"--attention {kw['attention']}",
             "--compiled" if kw["compiled"] else "", f"--comm-host {kw['comm_host']}"]
    return "torch-gemm-cost train-plan " + " ".join(f for f in flags if f)


def busbw_gb_s(size_bytes: float, n: int, ms: float) -> float:
    """nccl-tests' bus bandwidth of an all-reduce of ``size_bytes`` over ``n`` GPUs in ``ms``."""
    return size_bytes * 2 * (n - 1) / n / (ms * 1e-3) / 1e9


def tp_busbw(hidden: int, n: int, host: str) -> float:
    """The bus bandwidth a row's tensor-parallel all-reduce (one sequence's hidden states in
    fp16) is priced at, over ``n`` GPUs of one node, at the host class ``host``."""
    size = MEGATRON_SEQ * hidden * 2
    return busbw_gb_s(size, n, host_collective_ms(MEGATRON_DEVICE, "all_reduce", host=host,
                                                  size_bytes=float(size), num_gpus=n))


def measured_busbw(data: Path, source: str, n: int, size_bytes: float) -> tuple[float, float]:
    """The measured all-reduce over ``n`` A100-SXM4-80GB of one node nearest ``size_bytes``
    in ``data/comm/<source>.csv.gz``: (its size in bytes, its bus bandwidth in GB/s)."""
    with gzip.open(data / "comm" / f"{source}.csv.gz", "rt", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["gpu"] == MEGATRON_DEVICE
                and r["collective"] == "all_reduce" and int(r["num_gpus"]) == n
                and int(r["gpus_per_node"]) == n and r["topology"] in ("node", "dgx")]
    r = min(rows, key=lambda r: abs(float(r["size_bytes"]) - size_bytes))
    return float(r["size_bytes"]), busbw_gb_s(float(r["size_bytes"]), n, float(r["latency_ms"]))


def megatron_summary(rows: list[list[Any]], data: Path) -> str:
    """What the Megatron-LM table says, every figure read off its rows and the data: the
    default prior's misses, what the stated class does to each row, the favourable and the
    unfavourable."""
    by = {r[0]: r for r in rows}
    ref = [abs(r[8]) for r in rows]
    fit = [abs(r[10]) for r in rows]
    missed = [r for r in rows if abs(r[10]) > 15]
    within = [r for r in rows if r[12] == "yes"]
    parts = [
        (f"At the class the paper states, every row is within {max(ref):.1f}% (mean "
         f"|err| {sum(ref) / len(ref):.1f}%); at the default prior within {max(fit):.1f}% "
         f"(mean {sum(fit) / len(fit):.1f}%), "
         + (("missing the 15% target on " + " and ".join(
             f"{r[0]} ({r[10]:+.1f}%, {r[8]:+.1f}% stated)" for r in missed) + ".")
            if missed else "every row within the 15% target.")),
    ]
    if "7.5B" in by and "18.4B" in by:
        r7, r18 = by["7.5B"], by["18.4B"]
        s7, m7 = measured_busbw(data, "aiconfigurator", 8, MEGATRON_SEQ * 4096 * 2)
        s8, m8 = measured_busbw(data, "vidur", 8, MEGATRON_SEQ * 6144 * 2)
        parts.append(
            "Why the default prior misses the 7.5B and 18.4B rows: they are the rows with "
            "tensor parallelism and no pipelining (pp 1), so no bubble and no interleaving "
            "enter them, and full recomputation is what Eq. 3 assumes (its extra forward is in "
            "the compute and in the FLOPs alike). At the fitted prior their exposed "
            f"communication is {r7[20]:.0f}% and {r18[20]:.0f}% of the step, in two parts. The "
            "tensor-parallel all-reduces (4 and 8 GPUs on NVSwitch, 16.8 and 25.2 MB each, "
            "six a layer and micro-batch with recomputation, all waited for as Megatron 2021 "
            f"runs them) are priced at {tp_busbw(4096, 4, 'fitted'):.0f} and "
            f"{tp_busbw(6144, 8, 'fitted'):.0f} GB/s of bus bandwidth by the fit, "
            f"{tp_busbw(4096, 4, 'reference'):.0f} and {tp_busbw(6144, 8, 'reference'):.0f} "
            "GB/s by the reference class; the measured A100 nodes lie either side: "
            f"aiconfigurator's nccl-tests (host-timed) reach {m7:.0f} GB/s at "
            f"{s7 / 1e6:.1f} MB over 8 GPUs, Vidur's kernel-timed runs {m8:.0f} GB/s at "
            f"{s8 / 1e6:.1f} MB. The gradient all-reduce over the 32 data-parallel ranks, "
            "across 16 nodes (2 GPUs of a node at tp 4) and 32 nodes (1 at tp 8), is priced "
            "at the fitted network efficiency, from Vidur's cluster, whose network delivered "
            "about a fifth of a DGX A100's 8x 200 Gb/s, while Selene runs the DGX reference "
            f"architecture; at the reference class {r7[19]:.1f}% and {r18[19]:.1f}% of the "
            "step stay exposed. Stated, the class brings the two rows to "
            f"{r7[8]:+.1f}% and {r18[8]:+.1f}%.")
    over = [r for r in rows if r[8] > 0 and r[8] > r[10] and abs(r[8]) > abs(r[10])]
    if over:
        parts.append(
            "What the stated class costs: it speeds every collective, so where the default "
            "prior was already close or over, the stated class lands further over the "
            "published rate: "
            + ", ".join(f"{r[0]} {r[10]:+.1f}% -> {r[8]:+.1f}%" for r in over)
            + ". What is left is not all the network's: the published rate lies outside the "
            "hosts' interval, which prices the collectives from the fastest host measured to "
            "the slowest, on " + ", ".join(r[0] for r in rows if r[12] != "yes")
            + f" (inside on {len(within)} of {len(rows)} rows); there no host class closes "
            "the gap, and the rest is in the compute or the schedule, as on the 1.7B row, "
            f"whose exposed communication is {max(rows[0][17], rows[0][20]):.1f}% of the "
            "step at either class. The physical fix for a cluster's collectives remains its "
            "own nccl-tests logs as a comm profile (`calibrate-comm`), which the benchmark "
            "does not have for Selene; no factor is applied, and the shipped prior is left "
            "as fitted.")
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--megatron-rows", type=int, default=10,
                    help="Table 1 rows to plan, smallest first (default 10: all of them, up to 1T)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "train_plan.md"))
    args = ap.parse_args(argv)
    data = Path(args.data)
    if not (data / "e2e" / "neusight_labels.csv").is_file():
        print(f"no e2e/neusight_labels.csv under {data}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    ns_rows, ns_notes = neusight(data)
    mg_rows = megatron(args.megatron_rows)
    wall = time.perf_counter() - start
    fit = load_shipped("hybrid", lambda d: d)["metadata"]["trained_gpus"]
    lines = [
        "# Training plans against published multi-GPU steps",
        "",
        (f"Command: `python benchmarks/train_plan.py --megatron-rows {args.megatron_rows}` "
         f"({wall:.0f} s on this host's CPU; torch_gemm_cost {tgc.__version__})."),
        "",
        ("GEMM predictor: the shipped hybrid fit, whose training data holds these GPUs: "
         f"{', '.join(fit)}. Every GPU in that list is in-sample for the GEMM model. The "
         "A100-SXM4-40GB of NeuSight's rows is not in the list, but three boards of its chip "
         "(GA100: A100 PCIe 40GB and 80GB, A100 SXM4 80GB) are; the A100-SXM4-80GB of the "
         "Megatron-LM rows is in it. Collectives: the shipped collective model on the device "
         "record's node and network, no comm profile, at the host class each section "
         "names (`plan_training(comm_host=...)`, `train-plan --comm-host`). The "
         f"{describe_comm_host('fitted')}. The {describe_comm_host('reference')}."),
        "",
        "## NeuSight's 4-GPU GPT-2 Large labels (target: within 10%)",
        "",
        ("Measured: `e2e/neusight_labels.csv` (NeuSight, MIT License), GPT-2 Large (36 layers, "
         "1280 wide), 1024 tokens, global batch 4, fp32, four A100-SXM4-40GB. Layouts: "
         + "; ".join(ns_notes) + ". The plans are built from `e2e/configs/gpt2_large.json` "
         "with eager attention in fp32, as NeuSight built the model, and include the "
         "optimizer step as Megatron-LM runs it inside the timed call (the module docstring "
         "has the source); `no optimizer` is the same plan without it, `fused kernels` the "
         "same plan with its ops fused as torch.compile fuses them (Megatron fuses some by "
         "hand, not its softmax in fp32). `ours` is at the default host class, `fitted`: "
         "NeuSight's labels say nothing of the node beyond its GPUs. `reference class` is "
         "the same plan at `--comm-host reference`, within "
         f"{max(abs(r[10]) for r in ns_rows):.1f}% (one node: the class moves only the "
         "collectives on NVLink)."),
        "",
        tabulate(ns_rows, headers=["option", "gpu", "layout", "measured ms", "NeuSight ms",
                                   "NeuSight err %", "ours ms", "ours err %",
                                   "no optimizer err %", "fused kernels err %",
                                   "reference class err %", "compute", "bubble",
                                   "exposed comm", "optimizer", "within 10%"],
                 floatfmt=("", "", "", ".1f", ".1f", ".1f", ".1f", "+.1f", "+.1f", "+.1f",
                           "+.1f", ".1f", ".1f", ".1f", ".1f", ""), tablefmt="github"),
        "",
        ("Assumptions beside the result, with their sources: Megatron-LM's model differs from "
         "HF's eager GPT-2 in its fused kernels (bias-GeLU, bias-dropout-add; its fused "
         "softmax needs 16-bit, so fp32 runs it unfused) and in padding the vocabulary to "
         "50304 (priced: padded to a multiple of 128·tp when split, unpadded at tp 1). "
         "accelerate passed `DDP_impl torch` (PyTorch DDP: gradient all-reduce overlapped "
         "with the backward in buckets, the plan's overlap rule). The pipeline is Megatron's "
         "1F1B; with one micro-batch it runs the four stages one after another. Collectives: "
         "NCCL ring/tree/NVLS as the collective model picks, on an 8-GPU NVSwitch node."),
        "",
        "## Megatron-LM, Table 1 (Narayanan et al. 2021): achieved TFLOP/s per GPU",
        "",
        ("Published: Table 1 of arXiv:2104.04473 (v5), A100-SXM4-80GB on Selene, its rows as "
         "public reading notes of the paper transcribe them (sizes, tp, pp, GPUs, batch, "
         "TFLOP/s; the sizes match Megatron-LM's README). The paper computes "
         "TFLOP/s as F (Eq. 3) over the measured step; `ours` divides the same F by the "
         "predicted step, so the error in TFLOP/s is the error in step time, inverted. "
         "Target: within 15% of each row."),
        "",
        ("`ours` is the plan a user gets by stating what the paper states of Selene: DGX "
         "A100 nodes, 8x 200 Gb/s HDR InfiniBand a node on a SuperPOD fabric, the reference "
         "architecture, so `--comm-host reference`; for the 7.5B row: `"
         + megatron_command(4096, 32, 36, megatron_kwargs(4, 1, 128, 512)) + "` (the config "
         "written as `megatron_config` builds it). `fitted prior` is the default "
         "(`--comm-host fitted`), what a user gets who states nothing; `hosts' interval` is "
         "that plan's `step_interval_ms` in TF/s: the step with the collectives at both host "
         "classes, within a node widened to how far the measured hosts spread "
         "(`collective_interval_ms`). It spreads the collectives only, not the compute."),
        "",
        tabulate(mg_rows, headers=["model", "h/heads/layers", "tp/pp/dp", "GPUs", "batch",
                                   "micro-batches", "published TF/s", "ours TF/s", "err %",
                                   "fitted prior TF/s", "fitted err %", "hosts' interval TF/s",
                                   "published in it", "unfused", "FlashAttention",
                                   "interleaved v=2", "bubble %", "exposed comm %",
                                   "of it TP %", "of it DP %", "fitted exposed comm %",
                                   "mem GB", "fits", "s"],
                 floatfmt=("", "", "", "", "", "", ".0f", ".1f", "+.1f", ".1f", "+.1f", "", "",
                           ".1f", ".1f", ".1f", ".1f", ".1f", ".1f", ".1f", ".1f", ".1f", "",
                           ".0f"),
                 tablefmt="github",
                 missingval="-"),
        "",
        ("Assumptions beside the result, each with its source or marked as assumed: "
         "mixed precision fp16 with fp32 master weights and Adam (apex FusedAdam) as Megatron "
         "runs it (§5.1: mixed precision); full activation recomputation, which Eq. 3 "
         "assumes (§5.1); micro-batch 1 (assumed: Table 1 does not give it; Figure 16 finds 2 "
         "best for a 91B model, Table 2's PTD-P runs use 1); the non-interleaved 1F1B schedule (assumed; the interleaved column "
         "prices 2 chunks a GPU where the micro-batches and layers allow: the paper runs "
         "interleaving with scatter/gather, §4.1, without saying v per row); the kernels as "
         "torch.compile fuses them (`ours`: Megatron fuses bias-GeLU, bias-dropout-add and "
         "scale-mask-softmax by hand, §4.2, and inductor fuses the same chains), attention's "
         "scores kept in memory between its two GEMMs as Megatron 2021 keeps them (it "
         "predates FlashAttention); `unfused` prices every op as its own kernel, "
         "`FlashAttention` the attention as one fused kernel with no scores in memory: the "
         "two ends of the fusion the paper's kernels sit between; tensor parallelism within a node, pipeline stages "
         "across nodes with the scatter/gather send (§4.1); the gradient all-reduce "
         "overlapped per layer with the last micro-batch's backward (assumed: the 2021 "
         "paper does not say); NCCL's algorithm as the collective model picks it "
         "(ring, tree across nodes, no NVLS on A100). The columns after `published in it` "
         "are `ours`' plan (the reference class): `unfused`, `FlashAttention` and "
         "`interleaved v=2` change one thing of it; `of it TP %` and `of it DP %` split its "
         "exposed communication: the tensor-parallel all-reduces (all waited for) and the "
         "gradient all-reduce's exposed part, as shares of the step; `fitted exposed comm "
         "%` is the default prior's."),
        "",
        megatron_summary(mg_rows, data),
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
