"""What each catalog GPU sustains on a large GEMM, against public figures no fit has seen.

    python benchmarks/sustained.py [--data ../shared/data]

For an 8192³ Linear in fp32 and in bf16, the shipped predictor's sustained rate (TFLOP/s and
share of the datasheet peak), and the two factors ``power.py`` takes from catalog facts: the
SIMT issue share and the share of boost clock the board holds. Beside them, public figures for
boards no measured data in ``../shared/data`` covers (L4, L40S fp32, RTX 3090/4090, H100) and
sustained clocks where published. They are checks, not training data: nothing here is fitted.

Then the one check of the clock term the measured data holds on its own: two boards of one chip
(the A100 PCIe 40GB and 80GB) timed on the same fp32 shapes. Their chip, datasheet peak, boost
clock and kernels are the same, so the ratio of their times is the boards' power limit, base
clock and DRAM; it is set beside the shipped predictor's ratio for the same shapes. Skipped,
with a line saying so, where the data is absent. Writes ``benchmarks/results/sustained.md``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from label_consistency import shape_key

from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.measured.gemm import DEFAULT_DATA_DIR, MeasuredGemms, load_gemms
from torch_gemm_cost.predict import HybridPredictor, default_predictor, shipped_hybrid
from torch_gemm_cost.records.types import GemmBatch

DEVICES = ("tesla_p4", "tesla_t4", "l4", "a10", "a40", "l40s", "rtx_3090", "rtx_4090",
           "a100_pcie_40gb", "a100_sxm4_80gb", "h100_pcie", "h100_sxm5_80gb", "h200_sxm_141gb",
           "b200", "mi210", "mi300x")

# Public fp32 SGEMM throughput (TFLOP/s, torch.mm or cuBLAS, TF32 off) and sustained clocks. Each
# figure with its source; none of these boards' fp32 GEMMs is in the training data except where
# marked "(in the fit)".
PUBLIC: dict[str, str] = {
    "tesla_t4": "4.2-4.4 TF torch SGEMM (zzc0721/torch-performance-test-data, database.md); "
                "~900 MHz under MLPerf BERT (mlcommons/inference_results_v0.5#20) (in the fit)",
    "l4": "15.4 TF at 2048³, 12.5 at 4096³, 10.7 at 8192³ (zzc0721/torch-performance-test-data "
          "#120)",
    "l40s": "46.9 TF torch SGEMM (zzc0721/torch-performance-test-data, database.md)",
    "a40": "RTX A6000 (same GA102): 23.3 TF cuBLAS at 4092³ (siboehm/SGEMM_CUDA README)",
    "rtx_3090": "24.5-24.8 TF torch SGEMM (zzc0721/torch-performance-test-data, database.md)",
    "rtx_4090": "47.6-49.3 TF cuBLAS at 4096³ (annanyapr/Fast-CUDA-Kernels README; a SGEMM "
                "fork README)",
    "h100_sxm5_80gb": "52.1 TF torch SGEMM (zzc0721/torch-performance-test-data, database.md)",
    "h200_sxm_141gb": "51 TF on this project's H200 (benchmarks/data/h200) (in the fit)",
    "a100_sxm4_80gb": "19.2 TF torch SGEMM (zzc0721/torch-performance-test-data, database.md)",
}


# boards of one chip timed on the same shapes, and the bins of the second board's latency (ms)
BOARDS = ("a100_pcie_40gb", "a100_pcie_80gb")
BOARD_SOURCE = "neusight-test"
LATENCY_BINS_MS = ((0.0, 0.05), (0.05, 0.3), (0.3, 3.0), (3.0, math.inf))


def shared_shapes(data: MeasuredGemms, gpus: tuple[str, str], source: str
                  ) -> dict[tuple[int, int, int, int, bool], tuple[int, int]]:
    """Each (batch, m, n, k, B transposed) both GPUs timed in ``source``: its row on each (the
    first row where a GPU timed a shape twice)."""
    rows: dict[tuple[int, int, int, int, bool], dict[str, int]] = defaultdict(dict)
    for gpu in gpus:
        for i in torch.nonzero(data.mask(gpu=gpu, source=source)).flatten().tolist():
            rows[shape_key(data, i)].setdefault(gpu, i)
    return {k: (v[gpus[0]], v[gpus[1]]) for k, v in rows.items() if len(v) == 2}


def two_boards(data: MeasuredGemms, model: HybridPredictor) -> str:
    """Measured and predicted time ratio of the two boards on the shapes both timed, by the
    second board's measured latency, with the sustained-peak ratio the predictor gives them."""
    pairs = list(shared_shapes(data, BOARDS, BOARD_SOURCE).values())
    if not pairs:
        return f"No shape was timed on both {BOARDS[0]} and {BOARDS[1]} in `{BOARD_SOURCE}`."
    first = data.select(torch.tensor([a for a, _ in pairs]))
    second = data.select(torch.tensor([b for _, b in pairs]))
    pred, peak = [], []
    for rows, gpu in ((first, BOARDS[0]), (second, BOARDS[1])):
        out = model.predict(rows.gemms, get_device(gpu), timing="event", source=BOARD_SOURCE)
        pred.append(out.time_ms.double())
        peak.append(out.details["peak_sustained_flops_per_s"].double())
    meas = (first.latency_ms.double(), second.latency_ms.double())
    table = []
    for lo, hi in LATENCY_BINS_MS:
        sel = (meas[1] >= lo) & (meas[1] < hi)
        if not bool(sel.any()):
            continue
        table.append([f"[{lo:g}, {hi:g})", int(sel.sum()),
                      *(f"{statistics.median((a / b)[sel].tolist()):.3f}"
                        for a, b in (meas, pred, peak))])
    a, b = (get_device(g) for g in BOARDS)
    return (
        f"{len(pairs)} fp32 shapes timed on both boards (`{BOARD_SOURCE}`, NeuSight, MIT). "
        f"One chip ({a.chip}), one datasheet peak and boost clock ({a.boost_clock_mhz:g} MHz); "
        f"{a.tdp_w:g} W and a {a.base_clock_mhz:g} MHz base clock against {b.tdp_w:g} W and "
        f"{b.base_clock_mhz:g} MHz, {a.dram_bw_bytes_per_s / 1e9:g} against "
        f"{b.dram_bw_bytes_per_s / 1e9:g} GB/s. Median over the shapes of the first board's "
        "time over the second's, measured and predicted (the shipped weights, both boards in "
        "their fit), and of the sustained peak the predictor gives the first board over the "
        "second's (the clock share `power.py` takes from the base clock), by the second "
        "board's measured latency:\n\n"
        + tabulate(table, headers=["80GB latency, ms", "shapes", "measured 40GB/80GB",
                                   "predicted 40GB/80GB",
                                   "predicted sustained peak, 40GB/80GB"],
                   tablefmt="github"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR)
    args = ap.parse_args(argv)
    model = default_predictor()
    rows = []
    for dev_id in DEVICES:
        dev = get_device(dev_id)
        line: list[object] = [dev_id, dev.tdp_w, dev.base_clock_mhz, dev.boost_clock_mhz]
        for dtype in ("float32", "bfloat16"):
            g = GemmBatch.from_dims(m=[8192], n=[8192], k=[8192], dtype=dtype, op="linear")
            peak = dev.peak_flops_per_s(dtype)
            pred = model.predict(g, dev)
            tflops = float(g.flops[0]) / float(pred.time_ms[0]) / 1e9
            sustained = float(pred.details["peak_sustained_flops_per_s"][0])
            line += [f"{tflops:.1f}", f"{tflops * 1e12 / peak:.2f}", f"{sustained / peak:.2f}"]
        line.append(PUBLIC.get(dev_id, ""))
        rows.append(line)
    head = ["device", "board W", "base MHz", "boost MHz", "fp32 TFLOP/s", "fp32 / peak",
            "fp32 sustained peak / datasheet", "bf16 TFLOP/s", "bf16 / peak",
            "bf16 sustained peak / datasheet", "public fp32 figure"]
    text = ("# Sustained rates of an 8192³ Linear, predicted, with public figures beside\n\n"
            "Produced by `python benchmarks/sustained.py` with the shipped weights (trained on "
            "every measured GPU: P4, P100, V100, T4, A100, A40, L40S (bf16/fp8 only), H200, "
            "B200, MI210, MI300X). *sustained peak / datasheet* is the efficiency × SIMT issue "
            "share × clock share the model applies before the tile and memory limits. The public "
            "figures are checks no fit has seen, except where marked.\n\n"
            + tabulate(rows, headers=head, tablefmt="github") + "\n")
    text += "\n## Two boards of one chip, measured\n\n"
    try:
        data = load_gemms(args.data, sources=[BOARD_SOURCE])
    except FileNotFoundError as e:
        text += f"Skipped: no measured data ({e}).\n"
    else:
        text += two_boards(data, shipped_hybrid()) + "\n"
    out = ROOT / "benchmarks" / "results" / "sustained.md"
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    raise SystemExit(main())
