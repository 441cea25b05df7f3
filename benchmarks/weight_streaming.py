"""The share of DRAM bandwidth vLLM's weight-streaming GEMMs reach, measured from the data,
beside the share the GEMM predictor prices, with the GPU in its fit and without.

    python benchmarks/weight_streaming.py [--data ../shared/data] [--held-out LOCO.pt]

At M ≤ 64 tokens (a decode or a small batch) a linear layer's time is its weights streaming
from memory. aiconfigurator times vLLM's linear layers by replaying a CUDA graph of six separate
layers (DATA.md), so the six layers' weights are the working set the L2 sees between runs;
where it fits in the L2 the weights could stay there and stream faster than DRAM. This script
takes those rows (0.01 ms or more) and bins them by that working set, 6 · N · K · bytes, over
the GPU's L2 capacity. Per (GPU, dtype, bin), as a share of the datasheet DRAM bandwidth:

- **measured**: the weight bytes over the measured time (median; the data alone), and how many
  rows exceed the datasheet bandwidth (share > 1: only an L2 can serve those);
- **priced in-sample**: the weight bytes over the shipped predictor's time (every GPU in its
  fit);
- **priced held out**: the same over predictions made with the GPU's chip left out of the fit
  (``--held-out``: a file written by ``benchmarks/accuracy.py --save-predictions``, the rows of
  ``load_all_gemms`` after ``impossible_rows``), where given.

A priced share below the measured one is a prediction too slow by their ratio.

Below the streaming rows, the kernel floor: the median measured time of the bf16 rows of at most
2^20 FLOPs (too small to stream or compute anything), in µs and in SM clocks at the boost clock,
beside the same median priced in-sample and held out.

Last, floor plus streaming: the GEMV-like rows (M ≤ 16) whose six layers' weights are at least
twice the L2 (cold: no replay can find them there) against the two-term model
t = floor + compulsory bytes / (e · datasheet DRAM bandwidth), the floor being the GPU's own
median for its GEMMs of at most 2^20 FLOPs in that dtype, e the one share that fits the rows
best (least mean absolute percentage error). The same fit to the predictor's times gives the
share it prices. Writes ``benchmarks/results/weight_streaming.md``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results"

from accuracy import held_out_main

from torch_gemm_cost.measured.gemm import MeasuredGemms
from torch_gemm_cost.predict import shipped_hybrid

COPIES = 6  # layers in aiconfigurator's CUDA graph, each with its own weights
MAX_TOKENS = 64
FLOOR_FLOPS = 2**20  # GEMMs at most this size time the kernel floor
MIN_MS = 0.01
GEMV_TOKENS = 16  # rows that stream weights and nothing else
COLD_OVER_L2 = 2.0  # six layers' weights at least this many L2s: no replay finds them warm
SHARES = torch.arange(0.30, 1.0001, 0.005, dtype=torch.float64)
# bins of the working set over the L2 capacity
EDGES: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
LABELS: tuple[str, ...] = ("<= 1", "1-2", "2-4", "4-8", "8-16", "> 16")


def bin_of(ratio: float) -> int:
    """Index into LABELS of a working set ``ratio`` times the L2 capacity.

    >>> [bin_of(r) for r in (0.5, 1.0, 1.5, 16.0, 40.0)]
    [0, 0, 1, 4, 5]
    """
    for i, edge in enumerate(EDGES):
        if ratio <= edge:
            return i
    return len(EDGES)


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    args, measured, held = held_out_main(__doc__ or "", RESULTS / "weight_streaming.md", argv)
    g = measured.gemms
    keep = torch.tensor([s == "aiconfigurator" for s in measured.source]) \
        & (g.m <= MAX_TOKENS) & (measured.latency_ms >= MIN_MS)
    idx = torch.nonzero(keep).flatten()
    sub = measured.select(keep)
    shipped = shipped_hybrid().predict_measured(sub).to(torch.float64)
    sub_held = None if held is None else held[idx]

    groups: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    names = sub.gemms.dtype_names()
    weight_bytes = (sub.gemms.n * sub.gemms.k * sub.gemms.in_bytes).to(torch.float64)
    for i in range(len(sub)):
        dev = sub.device(sub.gpu[i])
        ratio = COPIES * float(weight_bytes[i]) / dev.l2_bytes
        groups[(sub.gpu[i], names[i], bin_of(ratio))].append(i)

    rows = []
    # per (gpu, dtype): the medians of every bin of 100 rows or more, measured and held out
    spans: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(
        lambda: ([], []))
    above = 0
    for (gpu, dtype, b), members in sorted(groups.items()):
        bw = sub.device(gpu).dram_bw_bytes_per_s

        def share(times_ms: torch.Tensor, members: list[int] = members, bw: float = bw
                  ) -> list[float]:
            return [float(weight_bytes[i]) / (float(times_ms[i]) * 1e-3) / bw for i in members
                    if torch.isfinite(times_ms[i])]

        measured_share = share(sub.latency_ms)
        above += sum(x > 1.0 for x in measured_share)
        row = [gpu, dtype, LABELS[b], len(members), f"{statistics.median(measured_share):.2f}",
               sum(x > 1.0 for x in measured_share),
               f"{statistics.median(share(shipped)):.2f}"]
        if sub_held is not None:
            ho = share(sub_held)
            row.append(f"{statistics.median(ho):.2f}" if ho else "-")
            if ho and len(members) >= 100:
                spans[(gpu, dtype)][0].append(statistics.median(measured_share))
                spans[(gpu, dtype)][1].append(statistics.median(ho))
        rows.append(row)
    headers = ["gpu", "dtype", f"{COPIES} layers' weights / L2", "rows", "measured",
               "rows > 1", "priced in-sample"]
    if sub_held is not None:
        headers.append("priced held out")
    command = " ".join(["python benchmarks/weight_streaming.py",
                        *(sys.argv[1:] if argv is None else argv)])
    held_note = (", **priced held out** from predictions with the GPU's chip left out of the "
                 f"fit (`{args.held_out.name}`)." if sub_held is not None else ".")
    lines = [
        "# Weight-streaming GEMMs: the share of DRAM bandwidth measured and priced", "",
        (f"Command: `{command}` ({time.perf_counter() - t0:.0f} s on one CPU thread). Data: "
         "aiconfigurator's GEMM rows (`gemm/aiconfigurator.csv.gz`, ai-dynamo/aiconfigurator, "
         f"Copyright NVIDIA, Apache-2.0), M ≤ {MAX_TOKENS} tokens, {MIN_MS} ms or more: "
         f"{len(sub)} rows."), "",
        ("Each figure is the weight bytes (N · K · bytes) per second as a share of the "
         "datasheet DRAM bandwidth, median over the bin: **measured** from the data alone "
         "(with the rows above the datasheet bandwidth, which only an L2 can serve), "
         "**priced in-sample** from the shipped GEMM predictor (the GPU in its fit)"
         + held_note + f" Bins: the {COPIES} layers' weights that aiconfigurator's CUDA graph "
         "cycles through, over the GPU's L2 capacity."), "",
        tabulate(rows, headers, tablefmt="github"), "",
        (f"{above} of the {len(sub)} rows stream their weights above the datasheet DRAM "
         "bandwidth" + (": at these sizes a warm L2 does not serve the weights." if above == 0
                        else ".")
         + " The share measured falls where the working set is small (fewer bytes than the "
         "launch and the pipeline's fill hide). Where the priced share sits below the measured "
         "one, the predictor is too slow by their ratio."),
    ]
    low = [(g, d, m, h) for (g, d), (m, h) in sorted(spans.items())
           if max(hh / mm for mm, hh in zip(m, h)) < 0.95]
    if low:
        lines.append("Held out, every bin of 100 rows or more priced below what was measured: "
                     + "; ".join(f"{g} {d}: measured {min(m):.2f}–{max(m):.2f}, priced "
                                 f"{min(h):.2f}–{max(h):.2f}" for g, d, m, h in low) + ".")
    priced = {"in-sample": shipped} | ({} if sub_held is None else {"held out": sub_held})
    lines += ["", floor_section(measured, held), "", stream_section(measured, sub, priced), ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def floor_section(measured: MeasuredGemms, held: torch.Tensor | None) -> str:
    """The kernel floor per GPU: aiconfigurator's bf16 rows of at most ``FLOOR_FLOPS``,
    median measured and priced time, in µs and in SM clocks at the boost clock."""
    g = measured.gemms
    tiny = (torch.tensor([s == "aiconfigurator" for s in measured.source])
            & torch.tensor([d == "bfloat16" for d in g.dtype_names()])
            & (2 * g.batch * g.m * g.n * g.k <= FLOOR_FLOPS))
    sub = measured.select(tiny)
    priced = {"in-sample": shipped_hybrid().predict_measured(sub).to(torch.float64)}
    if held is not None:
        priced["held out"] = held[tiny]
    rows = []
    for gpu in sorted(set(sub.gpu)):
        mask = sub.mask(gpu=gpu)
        mhz = sub.device(gpu).boost_clock_mhz or float("nan")
        row: list[object] = [gpu, int(mask.sum()), mhz]
        for times in (sub.latency_ms, *priced.values()):
            us = float(times[mask].median()) * 1e3
            row += [f"{us:.2f}", f"{us * mhz:,.0f}"]
        rows.append(row)
    headers = ["gpu", "rows", "boost MHz", "measured µs", "measured clocks"]
    for name in priced:
        headers += [f"priced {name} µs", f"priced {name} clocks"]
    return ("## The kernel floor\n\n"
            f"aiconfigurator's bf16 rows of at most 2^{FLOOR_FLOPS.bit_length() - 1} FLOPs, "
            "median time (kernel-timed, so no host overhead), in µs and in SM clocks at the "
            "boost clock. The predictor prices this floor as a count of clocks shared by every "
            "GPU.\n\n" + tabulate(rows, headers, tablefmt="github"))


def best_share(floor_ms: float, stream_ms: torch.Tensor, times_ms: torch.Tensor
               ) -> tuple[float, float]:
    """The share e in ``SHARES`` whose floor_ms + stream_ms / e is closest to ``times_ms`` in
    mean absolute percentage error, and that error.

    >>> s = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> e, err = best_share(0.5, s, 0.5 + s / 0.8)  # made of a floor and a share of 0.8
    >>> round(e, 3), round(err, 6)
    (0.8, 0.0)
    """
    pred = floor_ms + stream_ms.unsqueeze(0) / SHARES.unsqueeze(1)  # (shares, rows)
    err = (pred / times_ms.unsqueeze(0) - 1.0).abs().mean(dim=1)
    i = int(torch.argmin(err))
    return float(SHARES[i]), float(err[i])


def stream_section(measured: MeasuredGemms, sub: MeasuredGemms,
                   priced: dict[str, torch.Tensor]) -> str:
    """Cold GEMV-like rows against floor + bytes / (e · bandwidth), per (GPU, dtype): the share
    e that fits the measured times and its error; the same model with the GPU held out (its
    floor the other GPUs' median in SM clocks, its share their median); the shares that fit the
    priced times, and the predictor's own error on those rows. ``sub``: the streaming rows
    ``main`` scores (aiconfigurator, M ≤ ``MAX_TOKENS``, ``MIN_MS`` or more), ``priced`` their
    predicted times by name; the floors come from ``measured``."""
    g, names = measured.gemms, measured.gemms.dtype_names()
    sg, sub_names = sub.gemms, sub.gemms.dtype_names()
    aic = torch.tensor([s == "aiconfigurator" for s in measured.source])
    tiny_all = aic & (2 * g.batch * g.m * g.n * g.k <= FLOOR_FLOPS)
    fits = []  # (gpu, dtype, boost MHz, floor ms, share, error, cold mask of sub, stream ms)
    for gpu in sorted(set(sub.gpu)):
        dev = sub.device(gpu)
        on_gpu = sub.mask(gpu=gpu)
        for dtype in sorted({sub_names[i] for i in torch.nonzero(on_gpu).flatten().tolist()}):
            tiny = tiny_all & measured.mask(gpu=gpu) & torch.tensor([d == dtype for d in names])
            cold = (on_gpu & torch.tensor([d == dtype for d in sub_names])
                    & (sg.m <= GEMV_TOKENS)
                    & (COPIES * sg.n * sg.k * sg.b_bytes >= COLD_OVER_L2 * dev.l2_bytes))
            if int(tiny.sum()) == 0 or int(cold.sum()) == 0:
                continue
            floor_ms = float(measured.latency_ms[tiny].median())
            stream_ms = (sg.compulsory_bytes[cold].to(torch.float64)
                         / dev.dram_bw_bytes_per_s * 1e3)
            share, err = best_share(floor_ms, stream_ms, sub.latency_ms[cold].double())
            fits.append((gpu, dtype, dev.boost_clock_mhz or float("nan"), floor_ms, share, err,
                         cold, stream_ms))
    rows = []
    for gpu, dtype, mhz, floor_ms, share, err, cold, stream_ms in fits:
        y = sub.latency_ms[cold].to(torch.float64)
        others = [f for f in fits if f[1] == dtype and f[0] != gpu]
        row: list[object] = [gpu, dtype, int(cold.sum()), f"{floor_ms * 1e3:.2f}",
                             f"{share:.3f}", f"{100 * err:.1f}%"]
        if others:
            clocks = statistics.median(f[3] * f[2] for f in others)  # ms · MHz = kilo-clocks
            share_ho = statistics.median(f[4] for f in others)
            t = clocks / mhz + stream_ms / share_ho
            row += [f"{clocks:,.1f}", f"{share_ho:.3f}",
                    f"{100 * float((t / y - 1.0).abs().mean()):.1f}%"]
        else:
            row += ["-", "-", "-"]
        for times in priced.values():
            p = times[cold].to(torch.float64)
            p_share, _ = best_share(floor_ms, stream_ms, p)
            row += [f"{p_share:.3f}", f"{100 * float((p / y - 1.0).abs().mean()):.1f}%"]
        rows.append(row)
    headers = ["gpu", "dtype", "rows", "floor µs (measured)", "share e (measured)",
               "MAPE of floor + stream", "GPU held out: floor kclocks", "share e",
               "MAPE"]
    for name in priced:
        headers += [f"share e priced {name}", f"predictor MAPE {name}"]
    return ("## Floor plus streaming\n\n"
            f"aiconfigurator's rows of M ≤ {GEMV_TOKENS} tokens, {MIN_MS} ms or more, whose "
            f"{COPIES} layers' weights are at least {COLD_OVER_L2:g} times the L2 (cold), "
            "against t = floor + compulsory bytes / (e · datasheet DRAM bandwidth): the floor "
            "is the GPU's median measured time for its GEMMs of at most "
            f"2^{FLOOR_FLOPS.bit_length() - 1} FLOPs in the same dtype (fp8: with vLLM's cast "
            "kernel), e the share of DRAM bandwidth that fits best (least MAPE, in steps of "
            "0.005). **GPU held out**: the same two terms from the other GPUs of the dtype "
            "alone, the floor as their median count of SM clocks at the boost clock over this "
            "GPU's boost clock, the share their median; each GPU here is a chip of its own. "
            "Beside them, the same two-term fit to the predictor's times (the share it "
            "prices) and the predictor's own MAPE on the rows.\n\n"
            + tabulate(rows, headers, tablefmt="github"))


if __name__ == "__main__":
    raise SystemExit(main())
