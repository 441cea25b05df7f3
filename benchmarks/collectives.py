"""Accuracy of the collective model with each GPU held out, beside its in-sample fit and the pure
datasheet-bandwidth baseline. Writes benchmarks/results/collectives.md.

    python benchmarks/collectives.py [--data ../shared/data] [--seed 0]

Held out: each GPU's rows are predicted by a model fitted on the other GPUs' rows only (A100-SXM4,
A40, H200, B200, L40S in turn). In-sample: one model fitted on every GPU (the shipped weights are
that fit). Baseline: bytes on the wire over the datasheet bottleneck link, no fitted parameter and
no latency. MAPE is mean(|pred - meas| / meas) over a group's rows of 64 KiB or more; smaller
messages are reported apart.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.measured.comm import CommRow, load_comm, to_calls
from torch_gemm_cost.predict.collectives import (
    CollectiveBatch,
    CollectivePredictor,
    bandwidth_baseline_ms,
)
from torch_gemm_cost.train.collectives import SMALL_BYTES, leave_one_gpu_out, score

TARGET_PCT = 20.0
GPUS = ("a100_sxm4_80gb", "a40", "h200_sxm_141gb", "b200", "l40s")


def pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1f}%"


def ratio(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def busbw_factor(r: CommRow) -> float:
    """nccl-tests' bus bandwidth factor: algbw times this is what each GPU's link carries."""
    n = r.num_gpus
    if r.collective == "all_reduce":
        return 2 * (n - 1) / n
    return 1.0 if r.collective == "send_recv" else (n - 1) / n


def busbw_gb_s(r: CommRow, ms: float) -> float:
    return r.size_bytes / (ms * 1e-3) * busbw_factor(r) / 1e9


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / ".." / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "collectives.md"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()

    rows = load_comm(args.data)
    calls, devices, kept, not_priced = to_calls(rows)
    held = leave_one_gpu_out(rows, GPUS, seed=args.seed)
    full = CollectivePredictor(seed=args.seed).fit(calls, devices,
                                                   [rows[i].latency_ms for i in kept])
    pred_full = full.predict(calls, devices)
    insample = dict(zip(kept, pred_full.time_ms.tolist()))
    algo = dict(zip(kept, pred_full.kernel))
    base = dict(zip(kept, bandwidth_baseline_ms(CollectiveBatch.from_calls(calls), devices).tolist()))
    wall = time.perf_counter() - t0

    def meas(i: int) -> float:
        return rows[i].latency_ms

    # ------------------------------------------------------------ summary per held-out GPU
    summary = []
    for gpu in GPUS:
        ar = [i for i in kept if rows[i].gpu == gpu and rows[i].collective == "all_reduce"
              and rows[i].size_bytes >= SMALL_BYTES]
        every = [i for i in kept if rows[i].gpu == gpu and rows[i].size_bytes >= SMALL_BYTES]
        in_node = [i for i in ar if rows[i].gpus_per_node == rows[i].num_gpus]
        groups: dict[tuple[object, ...], list[int]] = {}
        for i in ar:
            groups.setdefault(rows[i].group + (rows[i].dtype,), []).append(i)
        held_ar = score([(held[i], meas(i)) for i in ar])["mape_pct"]
        summary.append([
            gpu, len(ar),
            pct(held_ar),
            pct(statistics.fmean(score([(held[i], meas(i)) for i in g])["mape_pct"]
                                 for g in groups.values())) if groups else "-",
            pct(score([(held[i], meas(i)) for i in in_node])["mape_pct"]),
            pct(score([(insample[i], meas(i)) for i in ar])["mape_pct"]),
            pct(score([(base[i], meas(i)) for i in ar])["mape_pct"]),
            pct(score([(held[i], meas(i)) for i in every])["mape_pct"]),
            "-" if not ar else ("meets" if held_ar <= TARGET_PCT else "misses"),
        ])

    # ------------------------------------------------------------ per group
    detail = []
    groups_all: dict[tuple[object, ...], list[int]] = {}
    for i in kept:
        r = rows[i]
        groups_all.setdefault((r.gpu, r.source, r.collective, r.topology, r.num_gpus,
                               r.gpus_per_node, r.dtype), []).append(i)
    for key in sorted(groups_all, key=lambda k: tuple(str(x).zfill(3) for x in k)):
        idx = groups_all[key]
        big = [i for i in idx if rows[i].size_bytes >= SMALL_BYTES]
        small = [i for i in idx if rows[i].size_bytes < SMALL_BYTES]
        h = score([(held[i], meas(i)) for i in big])
        algos = sorted({algo[i] for i in big})
        detail.append([
            *key, h["rows"], pct(h["mape_pct"]), pct(h["median_ape_pct"]),
            ratio(h["median_ratio"]),
            pct(score([(insample[i], meas(i)) for i in big])["mape_pct"]),
            pct(score([(base[i], meas(i)) for i in big])["mape_pct"]),
            len(small), pct(score([(held[i], meas(i)) for i in small])["mape_pct"]),
            ", ".join(algos),
        ])

    # ------------------------------------------------------------ the measurements behind misses
    def measured(size: float, **want: object) -> float:
        """Median measured bus bandwidth (GB/s) of the rows within a quarter octave of size."""
        idx = [i for i in kept if all(getattr(rows[i], k) == v for k, v in want.items())
               and abs(math.log2(rows[i].size_bytes / size)) < 0.25]
        return statistics.median(busbw_gb_s(rows[i], meas(i)) for i in idx)

    def floor_us(gpu: str, n: int) -> float:
        idx = [i for i in kept if rows[i].gpu == gpu and rows[i].collective == "all_reduce"
               and rows[i].num_gpus == n and rows[i].size_bytes <= 2048]
        return 1e3 * statistics.median(meas(i) for i in idx)

    half_gib = 2.0**29
    l40s_bw = [measured(half_gib, gpu="l40s", collective="all_gather", num_gpus=n, dtype="float16")
               for n in (2, 4, 8)]
    ring_share = {g: measured(half_gib, gpu=g, collective="all_reduce", num_gpus=8, dtype="int8")
                  / (get_device(g).peer_link_bw_bytes_per_s or math.nan) * 1e9
                  for g in ("a100_sxm4_80gb", "h200_sxm_141gb", "b200")}
    pair_p2p = measured(2.0**26, gpu="a100_sxm4_80gb", collective="send_recv",
                        topology="pairwise_nvlink", gpus_per_node=2)
    dgx_p2p = measured(2.0**26, gpu="a100_sxm4_80gb", collective="send_recv", topology="dgx",
                       gpus_per_node=2)
    pcie_pairs = measured(2.0**26, gpu="a100_sxm4_80gb", collective="all_reduce",
                          topology="pairwise_nvlink", num_gpus=4)
    a40_p2p = measured(2.0**26, gpu="a40", gpus_per_node=2)
    lat_ratio = [floor_us(g, n) / floor_us("h200_sxm_141gb", n)
                 for g in ("a100_sxm4_80gb", "b200") for n in (2, 8)]
    def busbw_table(select: Sequence[tuple[str, Mapping[str, object]]], sizes: Sequence[float]
                    ) -> list[list[str]]:
        out = []
        for label, want in select:
            idx = [i for i in kept if all(getattr(rows[i], k) == v for k, v in want.items())]
            cells: list[str] = [label]
            for s in sizes:
                near = [i for i in idx if abs(math.log2(rows[i].size_bytes / s)) < 0.25]
                if not near:
                    cells.append("-")
                    continue
                m = statistics.median(busbw_gb_s(rows[i], meas(i)) for i in near)
                p = statistics.median(busbw_gb_s(rows[i], held[i]) for i in near)
                cells.append(f"{m:.1f} ({p:.1f})")
            out.append(cells)
        return out

    sizes = [2.0**k for k in (16, 18, 20, 22, 24, 26, 29)]
    size_hdr = ["", *[f"{int(s) // 1024} KiB" if s < 2**20 else f"{int(s) // 2**20} MiB"
                      for s in sizes]]
    l40s = busbw_table([(f"L40S all_reduce n={n} fp16",
                         {"gpu": "l40s", "collective": "all_reduce", "num_gpus": n,
                          "dtype": "float16"}) for n in (2, 4, 8)]
                       + [(f"L40S all_gather n={n} fp16",
                           {"gpu": "l40s", "collective": "all_gather", "num_gpus": n,
                            "dtype": "float16"}) for n in (2, 4, 8)], sizes)
    nvswitch = busbw_table([(f"{g} all_reduce n={n} int8 (ring)",
                             {"gpu": g, "collective": "all_reduce", "num_gpus": n,
                              "dtype": "int8"})
                            for g in ("a100_sxm4_80gb", "h200_sxm_141gb", "b200") for n in (2, 8)],
                           sizes)
    net_sizes = [2.0**k for k in (16, 18, 20, 22, 24, 26)]
    network = busbw_table([(f"A100 vidur all_reduce {n} GPUs, {g} a node",
                            {"gpu": "a100_sxm4_80gb", "source": "vidur",
                             "collective": "all_reduce", "num_gpus": n, "gpus_per_node": g})
                           for n, g in ((2, 1), (4, 2), (8, 4), (16, 8), (8, 8))], net_sizes)
    a40 = busbw_table([("A40 send_recv pair, 2 a node", {"gpu": "a40", "gpus_per_node": 2}),
                       ("A100 send_recv pair, 2 a node",
                        {"gpu": "a100_sxm4_80gb", "collective": "send_recv",
                         "topology": "pairwise_nvlink", "gpus_per_node": 2})], net_sizes)
    floors = []
    for g in ("a100_sxm4_80gb", "h200_sxm_141gb", "b200", "l40s"):
        cells = [g]
        for n in (2, 4, 8):
            idx = [i for i in kept if rows[i].gpu == g and rows[i].collective == "all_reduce"
                   and rows[i].num_gpus == n and rows[i].size_bytes <= 2048]
            cells.append(f"{1e3 * statistics.median(meas(i) for i in idx):.1f}" if idx else "-")
        floors.append(cells)

    # ------------------------------------------------------------ write
    const = full.physical_constants()
    fmt_const = []
    for k, v in const.items():
        val = (", ".join(f"{kk} {vv:.3g}" for kk, vv in v.items()) if isinstance(v, dict)
               else f"{v:.3g}")
        fmt_const.append([k, val, "NCCL's (held)" if k in full.frozen else "fitted"])
    lines = [
        "# Collective model accuracy, each GPU held out",
        "",
        (f"Command: `python benchmarks/collectives.py --seed {args.seed}` "
        f"(wall time {wall:.0f} s on one CPU thread: {len(GPUS)} held-out fits and the "
        "in-sample fit)."),
        "",
        (f"Data: `comm/vidur.csv.gz` and `comm/aiconfigurator.csv.gz`, {len(rows)} rows, "
        f"{len(kept)} priced. Vidur's bytes are the bundle's `size_elements` (its `size_bytes` "
        "is twice the buffer; see `torch_gemm_cost/train/collectives.py`). With the bundle's "
        f"figure an A100 pair would send at {2 * pair_p2p:.0f} GB/s over NVLink 3, which carries "
        f"300 GB/s each way; with the true bytes a 64 MiB send reaches {pair_p2p:.0f} GB/s in a "
        f"pair and {dgx_p2p:.0f} GB/s in a DGX."),
        "",
        ("Columns: *held out* comes from a model that never saw the GPU; *in-sample* from the "
        "model fitted on every GPU (the shipped weights); *baseline* is the datasheet bandwidth "
        "bound (no latency, no fitted parameter). MAPE over messages of 64 KiB or more; "
        "smaller ones apart. Row-weighted means every row counts once (Vidur's groups hold "
        "about 1000 rows, aiconfigurator's 14); group mean averages the groups."),
        "",
        f"## All-reduce of 64 KiB or more, each GPU held out (target: within {TARGET_PCT:.0f}%)",
        "",
        tabulate(summary, headers=["gpu", "rows", "held out MAPE", "held out, group mean",
                                   "held out, one node only", "in-sample MAPE",
                                   "baseline MAPE", "held out, every collective",
                                   "target"], tablefmt="github"),
        "",
        "## Why the misses miss: the measurements",
        "",
        ("Achieved bus bandwidth in GB/s, measured (held-out prediction in brackets), medians of "
        "the rows within a quarter octave of each size."),
        "",
        ("**L40S: the bus bandwidth of a PCIe-only node falls about 4x each time the GPUs double** "
        f"(all-gather at 512 MiB: {' -> '.join(f'{x:.1f}' for x in l40s_bw)} GB/s for 2, 4, 8 "
        "GPUs: the node's aggregate falls too, "
        f"{' -> '.join(f'{x * n:.0f}' for x, n in zip(l40s_bw, (2, 4, 8)))} GB/s), "
        "while each GPU has its own PCIe Gen4 x16 (32 GB/s). No other measured GPU sits in a "
        "PCIe-only node, so held out the host-path exponent stays at its prior (1: the node's "
        f"host path divided among its GPUs); fitted on the L40S it is "
        f"{const['host_exponent']:.2f}. A100 pairs crossing PCIe in Vidur's 4-GPU rows do not "
        f"show it ({pcie_pairs:.1f} GB/s of 32 at 64 MiB)."),
        "",
        tabulate(l40s, headers=size_hdr, tablefmt="github"),
        "",
        ("**H200 runs faster than A100 and B200 at every size, by more than the catalog explains.** "
        f"Its small all-reduces take {floor_us('h200_sxm_141gb', 2):.1f} us at 2 GPUs and "
        f"{floor_us('h200_sxm_141gb', 8):.1f} us at 8, close to NCCL's own constants (7.8 and "
        f"15 us); A100 and B200 take {min(lat_ratio):.2f}-{max(lat_ratio):.2f}x that. Its ring "
        f"(int8, 8 GPUs, 512 MiB) reaches {100 * ring_share['h200_sxm_141gb']:.0f}% of NVLink, "
        f"A100 {100 * ring_share['a100_sxm4_80gb']:.0f}%, B200 {100 * ring_share['b200']:.0f}%. "
        "Shared constants fitted on A100, B200 and L40S therefore price the "
        "H200 slow. The latency floor is a property of the host, driver and NCCL build of each "
        "measured system, none of which the catalog holds. All-reduce floor (us, messages of "
        "2 KiB or less):"),
        "",
        tabulate(floors, headers=["gpu", "n=2", "n=4", "n=8"], tablefmt="github"),
        "",
        tabulate(nvswitch, headers=size_hdr, tablefmt="github"),
        "",
        ("**A100 across nodes: only Vidur's A100 cluster measured a network.** Held out, nothing "
        f"else informs the network efficiency, which stays at its prior 0.8 of the DGX A100's "
        f"8x 200 Gb/s; fitted on the A100 it is {const['eta_link']['net']:.2f}. The cluster's "
        "per-node bandwidth also does not grow with the GPUs a node uses as the 8 NICs of a DGX "
        "would (16 GPUs at 8 a node reach less than 8 at 4): Vidur's cluster was not a "
        "DGX-networked one, or NCCL used fewer NICs."),
        "",
        tabulate(network, headers=size_hdr[:-1], tablefmt="github"),
        "",
        (f"**A40 pairs: no peer-to-peer.** The A40's send/recv inside an NVLink pair reaches "
        f"{a40_p2p:.1f} GB/s, "
        "an eighth of its PCIe Gen4 x16 and a fourteenth of its NVLink bridge: the pair did not "
        "use P2P at all (NCCL's SHM transport stages through host memory), a path the catalog "
        "has no bandwidth for. Its rows stay in the fit; the Huber loss limits their pull."),
        "",
        tabulate(a40, headers=size_hdr[:-1], tablefmt="github"),
        "",
        "## Every group",
        "",
        ("n = num_gpus, g = GPUs a node. Held-out columns: rows of 64 KiB or more, MAPE, median "
        "APE, median pred/meas. The algorithm is what the in-sample model picks over the group."),
        "",
        tabulate(detail, headers=["gpu", "source", "collective", "topology", "n", "g", "dtype",
                                  "rows", "held out MAPE", "median APE", "median pred/meas",
                                  "in-sample MAPE", "baseline MAPE", "rows < 64 KiB",
                                  "held out MAPE < 64 KiB", "algorithms"], tablefmt="github"),
        "",
        "## Not priced",
        "",
        *[f"- {r}" for r in not_priced],
        "",
        ("## Fitted constants (the in-sample fit, seed "
        f"{args.seed}; the shipped weights)"),
        "",
        tabulate(fmt_const, headers=["constant", "value", ""], tablefmt="github"),
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines[:len(lines)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
