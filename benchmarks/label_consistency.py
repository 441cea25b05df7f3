"""Where the measured data disagrees with itself: the ceilings no predictor can pass.

    python benchmarks/label_consistency.py [--data ../shared/data]

Every figure compares measurements with measurements; no prediction enters. Five checks:

1. One GPU model, two sources: the A100-SXM4-80GB fp16 GEMMs of vidur (kernel time) and of
   LLMCompass (CUDA events, which include launch), on the shapes both timed.
2. One chip, two boards: A100-PCIe 40GB (250 W) against 80GB (300 W), NeuSight's
   `neusight-test` shapes timed on both.
3. The event-timing floor per host: the median latency of NeuSight's smallest GEMMs
   (under 10 MFLOP), where the time is launch and dispatch, not the GPU.
4. Rate against duration: fp32 Linear GEMMs of 1 GFLOP or more, grouped by how long one call
   ran. A GPU whose rate falls with duration alone (same kernels, same sizes) is throttling.
5. The training labels' forward/backward split: the backward runs about twice the forward's
   GEMM FLOPs, so forward/backward sits near 0.5; rows far above it hold forward time that no
   kernel model explains.

Writes ``benchmarks/results/label_consistency.md``.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from collections import defaultdict
from pathlib import Path

import torch
from tabulate import tabulate

from torch_gemm_cost.measured.gemm import DEFAULT_DATA_DIR, MeasuredGemms, load_gemms

RESULTS = Path(__file__).resolve().parent / "results" / "label_consistency.md"
DURATION_BINS_MS = ((1.0, 10.0), (10.0, 100.0), (100.0, math.inf))


def shape_key(data: MeasuredGemms, i: int) -> tuple[int, int, int, int, bool]:
    """Row ``i``'s shape: (batch, m, n, k, B transposed)."""
    g = data.gemms
    return (int(g.batch[i]), int(g.m[i]), int(g.n[i]), int(g.k[i]), bool(g.b_transposed[i]))


def _by_shape(data: MeasuredGemms, gpu: str, source: str) -> dict[tuple, float]:
    """Latency (ms) per shape; a shape timed twice keeps its median."""
    times: dict[tuple, list[float]] = defaultdict(list)
    for i in torch.nonzero(data.mask(gpu=gpu, source=source)).flatten().tolist():
        times[shape_key(data, i)].append(float(data.latency_ms[i]))
    return {k: statistics.median(v) for k, v in times.items()}


def _flops(key: tuple[int, int, int, int, bool]) -> float:
    b, m, n, k, _ = key
    return 2.0 * b * m * n * k


def two_sources(data: MeasuredGemms) -> list[str]:
    gpu = "a100_sxm4_80gb"
    # LLMCompass times matmul (A@B), vidur Linear (x@Wᵀ): match on the dims alone
    vidur, llm = ({k[:4]: v for k, v in _by_shape(data, gpu, src).items()}
                  for src in ("vidur", "llmcompass"))
    common = sorted(set(vidur) & set(llm), key=lambda s: _flops((*s, False)))
    rows = [[f"{m}x{n}x{k}", f"{llm[s]:.3f}", f"{vidur[s]:.3f}",
             f"{_flops((*s, False)) / llm[s] / 1e9:.0f}",
             f"{_flops((*s, False)) / vidur[s] / 1e9:.0f}", f"{llm[s] / vidur[s]:.2f}"]
            for s in common for (_, m, n, k) in [s]]
    big = []
    for name, times in (("LLMCompass", llm), ("vidur", vidur)):
        rate = [_flops((*s, False)) / t / 1e9 for s, t in times.items()
                if _flops((*s, False)) >= 1e12]
        if rate:
            big.append([name, len(rate), f"{statistics.median(rate):.0f}", f"{max(rate):.0f}"])
    return [
        ("LLMCompass's CUDA events include the launch that vidur's kernel time leaves out. On "
         "the shapes both timed (LLMCompass as matmul, vidur as Linear):"),
        "",
        tabulate(rows, headers=["m x n x k", "LLMCompass ms", "vidur ms", "LLMCompass TFLOP/s",
                                "vidur TFLOP/s", "time ratio"], tablefmt="github"),
        "",
        "Every GEMM of 1 TFLOP or more (312 TFLOP/s datasheet peak):",
        "",
        tabulate(big, headers=["source", "GEMMs", "median TFLOP/s", "best TFLOP/s"],
                 tablefmt="github"),
        "",
        ("vidur's A100-SXM4 ran its large GEMMs below the rate LLMCompass's A100 sustained, and "
         "below what its own best GEMMs reached. A predictor held out of this GPU inherits the "
         "rate of the others and cannot know which of the two it is scored on."),
    ]


def two_boards(data: MeasuredGemms) -> list[str]:
    a40, a80 = (_by_shape(data, g, "neusight-test") for g in ("a100_pcie_40gb", "a100_pcie_80gb"))
    common = sorted(set(a40) & set(a80))
    rows = []
    for lo, hi in ((0.0, 0.05), (0.05, 0.3), (0.3, 3.0), (3.0, math.inf)):
        sel = [s for s in common if lo <= a80[s] < hi]
        if sel:
            rows.append([f"[{lo:g}, {hi:g})", len(sel),
                         f"{statistics.median(a40[s] / a80[s] for s in sel):.3f}"])
    return [
        (f"{len(common)} fp32 shapes timed on both boards (`neusight-test`). Same GA100 chip, same "
         "datasheet peak and clock; 250 W against 300 W, 1555 against 1935 GB/s. The 40GB board's "
         "time over the 80GB board's, by the 80GB board's latency:"),
        "",
        tabulate(rows, headers=["80GB latency, ms", "shapes", "median 40GB/80GB"],
                 tablefmt="github"),
    ]


def event_floor(data: MeasuredGemms) -> list[str]:
    rows = []
    flops = 2.0 * data.gemms.batch * data.gemms.m * data.gemms.n * data.gemms.k
    for gpu in sorted(set(data.gpu)):
        sel = data.mask(gpu=gpu, source="neusight") & (flops < 1e7)
        if int(sel.sum()) >= 20:
            t = data.latency_ms[sel]
            rows.append([gpu, int(sel.sum()), f"{float(t.median()):.4f}",
                         f"{float(t.quantile(0.1)):.4f}", f"{float(t.quantile(0.9)):.4f}"])
    return [
        ("NeuSight's event-timed GEMMs under 10 MFLOP, where the GPU's work takes a few "
         "microseconds and the rest is the host's launch and dispatch. The floor is the host's, "
         "not the GPU's: a GPU held out inherits the others' floor."),
        "",
        tabulate(rows, headers=["gpu", "rows", "median ms", "p10 ms", "p90 ms"],
                 tablefmt="github"),
    ]


def duration(data: MeasuredGemms) -> list[str]:
    g = data.gemms
    flops = 2.0 * g.batch * g.m * g.n * g.k
    linear = (g.batch <= 1) & g.b_transposed.bool() & (flops >= 1e9)
    rows = []
    for gpu in sorted(set(data.gpu)):
        sel = data.mask(gpu=gpu, source="neusight") & linear
        if not bool(sel.any()):
            continue
        rate = flops[sel] / data.latency_ms[sel] / 1e9  # TFLOP/s
        t = data.latency_ms[sel]
        row: list[object] = [gpu]
        for lo, hi in DURATION_BINS_MS:
            b = (t >= lo) & (t < hi)
            row.append(f"{float(rate[b].median()):.2f} ({int(b.sum())})" if int(b.sum()) >= 5
                       else "")
        rows.append(row)
    heads = [f"[{lo:g}, {hi:g}) ms" for lo, hi in DURATION_BINS_MS]
    return [
        ("Median TFLOP/s of NeuSight's fp32 Linear GEMMs (y = x·Wᵀ, 1 GFLOP or more) by the "
         "duration of one call (rows in brackets). Every GPU timed shapes drawn from the same "
         "random distribution. On Volta, Turing and Ampere the rate holds across durations; on "
         "the Pascal boards it falls: P100 past 100 ms, P4 from 10 ms."),
        "",
        tabulate(rows, headers=["gpu", *heads], tablefmt="github"),
    ]


def training_split(data_dir: Path) -> list[str]:
    path = data_dir / "e2e" / "neusight_labels.csv"
    if not path.exists():
        return [f"{path} is absent."]
    rows = []
    with path.open() as f:
        for r in csv.DictReader(f):
            if r["mode"] != "train" or r["option"] or "switch" in r["model"]:
                continue
            fw, bw = float(r["measured_fw_ms"]), float(r["measured_bwall_ms"])
            rows.append([r["gpu"], r["model"], r["batch"], f"{fw:.1f}", f"{bw:.1f}",
                         f"{fw / bw:.2f}", "above 0.7" if fw / bw > 0.7 else ""])
    odd = sum(1 for r in rows if r[-1])
    return [
        f"{len(rows)} training rows; {odd} have a forward above 0.7 of the backward.",
        "",
        tabulate(rows, headers=["gpu", "model", "batch", "forward ms", "backward ms",
                                "forward/backward", ""], tablefmt="github"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA_DIR, type=Path)
    parser.add_argument("--out", default=RESULTS, type=Path)
    args = parser.parse_args(argv)
    data = load_gemms(args.data)
    text = [
        "# Where the measured data disagrees with itself",
        "",
        (f"Produced by `python benchmarks/label_consistency.py` from `{args.data}`. No prediction "
         "enters: each check compares measurements with measurements. Data: NeuSight (MIT), vidur "
         "(MIT), LLMCompass (BSD-3)."),
        "",
        "## 1. One GPU model, two sources (A100-SXM4-80GB, fp16)",
        "",
        *two_sources(data),
        "",
        "## 2. One chip, two boards (A100-PCIe 40GB against 80GB, fp32)",
        "",
        *two_boards(data),
        "",
        "## 3. The event-timing floor is the host's",
        "",
        *event_floor(data),
        "",
        "## 4. Rate against duration (fp32 Linear)",
        "",
        *duration(data),
        "",
        "## 5. Training labels: forward against backward",
        "",
        *training_split(args.data),
        "",
    ]
    args.out.write_text("\n".join(text))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
