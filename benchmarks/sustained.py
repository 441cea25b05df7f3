"""What each catalog GPU sustains on a large GEMM, against public figures no fit has seen.

    python benchmarks/sustained.py

For an 8192³ Linear in fp32 and in bf16, the shipped predictor's sustained rate (TFLOP/s and
share of the datasheet peak), and the two factors ``power.py`` takes from catalog facts: the
SIMT issue share and the share of boost clock the board holds. Beside them, public figures for
boards no measured data in ``../shared/data`` covers (L4, L40S fp32, RTX 3090/4090, H100) and
sustained clocks where published. They are checks, not training data: nothing here is fitted.
Writes ``benchmarks/results/sustained.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch_gemm_cost.devices import get_device
from torch_gemm_cost.gemms.records import GemmBatch
from torch_gemm_cost.predict import default_predictor

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


def main() -> int:
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
    out = ROOT / "benchmarks" / "results" / "sustained.md"
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    raise SystemExit(main())
