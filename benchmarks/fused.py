"""Fused kernels against measurements: vidur's fused LLM-layer ops with each GPU held out, and
NeuSight's ``fusion`` labels (``torch.compile``'d whole models) compiled against eager.

1. vidur (``vec/vidur.csv.gz``, fp16 kernel times on A100-SXM4-80GB and A40): the fused-op
   constants (``train.ops.fit_fused_ops``) fitted on the other chip's rows only, scored per op
   on ops of 0.01 ms or more (shorter ones apart), beside a pure bandwidth roofline (bytes at
   the datasheet DRAM bandwidth, nothing fitted) and the in-sample fit, in the same run.
2. NeuSight's ``option=fusion`` labels (A100-PCIe-40GB, inference, float32, eager attention),
   rebuilt as ``benchmarks/e2e.py`` builds its rows: ours compiled (``estimate(...,
   compiled=True)``) and eager against the measured compiled and eager runs, beside
   NeuSight's own prediction. Twice: with the shipped GEMM predictor and op costs (the A100
   chip in their fit), and with both refitted without the GA100 chip (the GEMM weights from
   ``--cache`` when they are there, read only).

    python benchmarks/fused.py [--data ../shared/data] [--cache E2E]
"""

from __future__ import annotations

import argparse
import csv
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from e2e import build

from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.compiled.fusion import fuse_kernels
from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.predict import default_predictor
from torch_gemm_cost.predict.ops import OpCostModel, load_op_costs
from torch_gemm_cost.predict.price import estimate_gemms, estimate_ops
from torch_gemm_cost.records import extract
from torch_gemm_cost.train.gemm import chip_of
from torch_gemm_cost.train.ops import (
    FUSED_MIN_MS,
    fit_fused_ops,
    fit_op_costs,
    load_fused,
    predict_fused,
)

OUT = ROOT / "benchmarks" / "results" / "fused.md"
FUSION_GPU = "a100_pcie_40gb"
TARGET_VIDUR_PCT = 15.0
TARGET_FUSION_PCT = 10.0


def _ape(pred: torch.Tensor, meas: torch.Tensor) -> torch.Tensor:
    return (pred - meas).abs() / meas


def vidur_rows(data_dir: Path) -> list[dict[str, Any]]:
    """Per (op, GPU): held-out, in-sample and roofline scores."""
    rows = load_fused(data_dir)
    held = torch.full((len(rows),), float("nan"), dtype=torch.float64)
    for chip in sorted({chip_of(g) for g in rows.gpu}):
        out = torch.tensor([chip_of(g) == chip for g in rows.gpu])
        held[out] = predict_fused(rows.select(out), *fit_fused_ops(rows.select(~out)))
    inside = predict_fused(rows, *fit_fused_ops(rows))
    roofline = rows.dram_bytes / rows.dram_bw_bytes_per_s * 1e3
    y = rows.latency_ms
    result = []
    for op in sorted(set(rows.measured_op)):
        for gpu in sorted(set(rows.gpu)):
            keep = torch.tensor([o == op and g == gpu for o, g in zip(rows.measured_op, rows.gpu)])
            big, small = keep & (y >= FUSED_MIN_MS), keep & (y < FUSED_MIN_MS)
            result.append({
                "op": op, "gpu": gpu, "rows": int(big.sum()),
                "held_mape": float(_ape(held, y)[big].mean()),
                "held_median": float(_ape(held, y)[big].median()),
                "held_ratio": float((held / y)[big].median()),
                "inside_mape": float(_ape(inside, y)[big].mean()),
                "roof_mape": float(_ape(roofline, y)[big].mean()),
                "roof_median": float(_ape(roofline, y)[big].median()),
                "small_rows": int(small.sum()),
                "small_held_mape": float(_ape(held, y)[small].mean()) if small.any() else None,
                "small_roof_mape": float(_ape(roofline, y)[small].mean()) if small.any() else None,
            })
    return result


class _GA100Held:
    """The GEMM predictor and op costs fitted without the GA100 chip; the GEMM weights are read
    from ``cache`` when there (never written there), else fitted."""

    name = "hybrid (refitted without GA100)"

    def __init__(self, data_dir: Path, cache: Path | None) -> None:
        from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor

        self.version = HybridPredictor.version
        path = cache / f"gemm-v{self.version}-seed0-GA100.json" if cache else None
        if path is not None and path.is_file():
            self.gemm = HybridPredictor.load(path)
            self.source = f"{path} (read only)"
        else:
            from torch_gemm_cost.measured.gemm import load_all_gemms
            from torch_gemm_cost.predict.gemm.roofline import impossible_rows

            data = load_all_gemms(data_dir)
            data = data.select(~impossible_rows(data))
            keep = torch.tensor([chip_of(g) != "GA100" for g in data.gpu])
            self.gemm = HybridPredictor(seed=0).fit(data.select(keep))
            self.source = "fitted in this run"
        self.ops = OpCostModel.from_dict(fit_op_costs(data_dir, exclude_chips=("GA100",),
                                                      metrics=False))

    def predict(self, gemms: Any, device: Any, **kw: Any) -> Any:
        return self.gemm.predict(gemms, device, **kw)


def fusion_rows(data_dir: Path, cache: Path | None) -> tuple[list[dict[str, Any]], str]:
    """NeuSight's fusion labels with their eager twins, ours both ways, shipped and held out.

    Each model is captured once; its records are priced as ``estimate`` prices them (eager:
    op by op; compiled: ``fuse_kernels``), with either pair of GEMM predictor and op costs."""
    with open(data_dir / "e2e" / "neusight_labels.csv", newline="") as f:
        labels = list(csv.DictReader(f))
    fusion = [r for r in labels if r["option"] == "fusion" and r["mode"] == "inf"]
    eager = {(r["gpu"], r["model"], r["batch"], r["seq_len"]): r for r in labels
             if not r["option"] and r["mode"] == "inf"}
    held = _GA100Held(data_dir, cache)
    out = []
    for r in fusion:
        twin = eager[(r["gpu"], r["model"], r["batch"], r["seq_len"])]
        net, args, kwargs = build(data_dir, r["model"], int(r["batch"]), int(r["seq_len"]),
                                  "inference")
        captured = capture(net, args, kwargs)
        sites, others = extract(captured, "float32", native_dtype=torch.float32)
        fused_ops, kernels = fuse_kernels(captured, others, "float32",
                                          native_dtype=torch.float32)
        spec = get_device(r["gpu"])
        row: dict[str, Any] = {
            "gpu": r["gpu"], "model": r["model"], "batch": int(r["batch"]),
            "seq": int(r["seq_len"]), "measured_compiled": float(r["measured_total_ms"]),
            "measured_eager": float(twin["measured_total_ms"]),
            "neusight_compiled": float(r["neusight_pred_ms"]),
            "neusight_eager": float(twin["neusight_pred_ms"]),
            "kernels": sum(1 for k in kernels if k.launches),
        }
        for label, predictor, costs in (("shipped", default_predictor(), load_op_costs()),
                                        ("held", held, held.ops)):
            gemm_ms = sum(g.time_ms for g in estimate_gemms(sites, spec, predictor))
            eager_ops = estimate_ops(others, spec, costs)
            compiled_ops = estimate_ops(fused_ops, spec, costs, kernels)
            row[f"{label}_eager"] = gemm_ms + sum(o.time_ms or 0.0 for o in eager_ops)
            row[f"{label}_compiled"] = gemm_ms + sum(o.time_ms or 0.0 for o in compiled_ops)
        out.append(row)
    return out, held.source


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def render(vidur: list[dict[str, Any]], fusion: list[dict[str, Any]], held_source: str,
           wall_s: float, command: str = "python benchmarks/fused.py") -> str:
    from tabulate import tabulate

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    body = [[r["op"], r["gpu"], r["rows"], pct(r["held_mape"]), pct(r["held_median"]),
             "yes" if r["held_mape"] <= TARGET_VIDUR_PCT / 100 else "no",
             f"{r['held_ratio']:.2f}", pct(r["inside_mape"]), pct(r["roof_mape"]),
             pct(r["roof_median"]), r["small_rows"], pct(r["small_held_mape"]),
             pct(r["small_roof_mape"])] for r in vidur]
    vidur_md = tabulate(body, headers=[
        "op", "gpu (held out)", "rows >= 0.01 ms", "held MAPE", "held medAPE",
        f"<= {TARGET_VIDUR_PCT:.0f}%", "held pred/meas", "in-sample MAPE", "roofline MAPE",
        "roofline medAPE", "rows < 0.01 ms", "held MAPE < 0.01 ms", "roofline MAPE < 0.01 ms"],
        tablefmt="github")

    def err(pred: float, meas: float) -> str:
        return f"{100 * (pred / meas - 1):+.1f}%"

    frows = []
    for r in fusion:
        frows.append([
            r["model"], r["batch"], r["seq"], f"{r['measured_eager']:.1f}",
            f"{r['measured_compiled']:.1f}", f"{r['measured_compiled'] / r['measured_eager']:.3f}",
            f"{r['shipped_eager']:.1f}", f"{r['shipped_compiled']:.1f}",
            f"{r['shipped_compiled'] / r['shipped_eager']:.3f}",
            err(r["shipped_compiled"], r["measured_compiled"]),
            err(r["shipped_eager"], r["measured_eager"]),
            err(r["held_compiled"], r["measured_compiled"]),
            err(r["held_eager"], r["measured_eager"]),
            err(r["neusight_compiled"], r["measured_compiled"]),
            err(r["neusight_eager"], r["measured_eager"]), r["kernels"]])
    fusion_md = tabulate(frows, headers=[
        "model", "batch", "seq", "measured eager ms", "measured compiled ms",
        "measured compiled/eager", "ours eager ms", "ours compiled ms", "ours compiled/eager",
        "ours compiled err", "ours eager err", "ours compiled err (GA100 held out)",
        "ours eager err (GA100 held out)", "NeuSight compiled err", "NeuSight eager err",
        "fused kernels"], tablefmt="github")

    def mape(key: str, meas: str) -> float:
        return _mean([abs(r[key] / r[meas] - 1) for r in fusion])

    summary = tabulate([
        ["ours, compiled", pct(mape("shipped_compiled", "measured_compiled")),
         pct(mape("held_compiled", "measured_compiled"))],
        ["ours, eager (against the eager labels)", pct(mape("shipped_eager", "measured_eager")),
         pct(mape("held_eager", "measured_eager"))],
        ["ours, eager (against the compiled labels)",
         pct(mape("shipped_eager", "measured_compiled")),
         pct(mape("held_eager", "measured_compiled"))],
        ["NeuSight, compiled", pct(mape("neusight_compiled", "measured_compiled")), ""],
        ["NeuSight, eager", pct(mape("neusight_eager", "measured_eager")), ""],
    ], headers=["MAPE over the 4 fusion rows", "A100 in the fit (shipped)",
                "GA100 held out of the GEMM and op fits"], tablefmt="github")
    offsets = [100 * (r["shipped_eager"] / r["measured_eager"] - 1) for r in fusion]
    held_vidur = [r for r in vidur]
    by_gpu = {g: _mean([r["held_mape"] for r in held_vidur if r["gpu"] == g])
              for g in sorted({r["gpu"] for r in held_vidur})}
    return (
        "# Fused kernels: vidur's fused ops held out by GPU, and torch.compile'd whole models\n\n"
        f"Command: `{command}` ({wall_s:.0f} s on this machine's CPU, one "
        "thread). MAPE = mean |pred − meas| / meas; medAPE its median; pred/meas the median "
        "ratio.\n\n"
        "## vidur's fused LLM-layer ops, each GPU held out\n\n"
        "Data: `vec/vidur.csv.gz` (vidur, MIT), fp16 kernel times (no host overhead) on "
        "A100-SXM4-80GB (GA100) and A40 (GA102). **held**: the fused-op constants "
        "(`train.ops.fit_fused_ops`: one DRAM share η for every op, per op bytes per SM-cycle "
        "and a kernel floor, one soft-maximum exponent) fitted on the other GPU's rows only, so the GPU was not in the "
        "fit. **in-sample**: fitted on both (the shipped constants; the GPU was in the fit). "
        "**roofline**: the op's bytes at the datasheet DRAM bandwidth, nothing fitted, no "
        f"floor. Rows of {FUSED_MIN_MS} ms or more are scored; shorter ones in their own "
        f"columns. Target: {TARGET_VIDUR_PCT:.0f}% per op class held out.\n\n"
        + vidur_md + "\n\n"
        "Mean held-out MAPE over the ops: " + ", ".join(
            f"{g} {100 * v:.1f}%" for g, v in by_gpu.items()) + ".\n\n"
        "What the misses are made of: the DRAM share η is the memory system's, one for every "
        "op, so an op that runs below it on one GPU is held back by its SM side, and that "
        "limit (bytes per SM-cycle) carries to the other GPU. A share per op let the A40's "
        "fused RMSNorm (about 0.6 of its bandwidth, where SiLU·mul and add reach 0.79–0.83) "
        "pass as DRAM-bound, and the A100 held out came out 0.55 of its time. The SM side "
        "carries for the rotary kernel and SiLU·mul, either GPU held out, and for LayerNorm "
        "onto the A100; it does not for the fused RMSNorm, which the A40 runs at about 2.8 bytes per SM-cycle and the A100 at about "
        "4.5, so each GPU held out is priced at the other's rate (the pred/meas column). The "
        "kernel runs one block of min(d, 1024) threads per token, and an A40 SM (1,536 "
        "threads) holds one such block where an A100 SM (2,048) holds two; scaling the SM side "
        "by the resident threads made SiLU·mul and the gather worse in a scratch fit, so the "
        "model does not. The gather runs at 0.29–0.31 TB/s on the A100 and 0.35 on the A40, "
        "slower on the GPU with 2.9× the bandwidth. With two GPUs in the data there is no "
        "third one to tell these apart.\n\n"
        "## NeuSight's `fusion` labels: torch.compile'd models against eager\n\n"
        "Data: `e2e/neusight_labels.csv` (NeuSight, MIT), `option=fusion`: the A100-PCIe-40GB, "
        "inference, float32, `attn_implementation=\"eager\"`, and the eager runs of the same "
        "rows; rebuilt as `benchmarks/e2e.py` builds its rows. Ours compiled is "
        "`estimate(..., compiled=True)`: inductor's fusion rules (`compiled/fusion.py`) on the "
        "model as captured with this transformers release. **A100 in the fit**: the shipped "
        "GEMM weights and op costs, fitted with the A100 boards' rows. **GA100 held out**: "
        f"both refitted without any GA100 board (GEMM weights: {held_source}; op costs "
        "fitted in this run). Target: compiled within "
        f"{TARGET_FUSION_PCT:.0f}% MAPE.\n\n"
        + summary + "\n\n" + fusion_md + "\n\n"
        "The predicted speedup of compiling follows the measured one on GPT-2 large (0.90 "
        "against 0.87–0.89) and falls short on BERT-large (0.96 against 0.85–0.87): our eager "
        "BERT prices its non-GEMM ops at 11% of the run, less than the 13–15% compiling saved "
        "there. The level is the eager model's: ours eager is "
        f"{min(offsets):.0f}–{max(offsets):.0f}% above these A100-40GB "
        "labels, which `benchmarks/e2e.py` reports as inconsistent with the op-level data, and "
        "compiling keeps that offset. NeuSight's own predictions for these rows are beside "
        "ours.\n\n"
        "NB: the measured runs used the transformers release of NeuSight's time, whose BERT "
        "and GPT-2 spelled eager attention as inductor's `_sfdp_pattern_14` and "
        "`_sfdp_pattern_18` (`fx_passes/fuse_attention.py`: scale by a division, then the "
        "mask added or applied with `torch.where`); a compiled estimate rewrites those into "
        "one SDPA call as inductor does (`compiled.attention_rewrite`). In the torch release "
        "this project runs, inductor refuses the rewrite for fp32 on CUDA unless fp32 "
        "matmuls may use TF32 (`_sfdp_params_check`), and these runs are fp32, so ours keeps "
        "the two batched GEMMs and one fused softmax kernel. NeuSight files its operator "
        "measurements under `p2.1.0` (PyTorch 2.1.0); the releases of that time had no TF32 "
        "condition in `_sfdp_params_check`, so if its labels ran such a release and a "
        "pattern matched, its compiled attention ran as one fp32 SDPA call, a saving this "
        "estimate does not take; its labels do not record the release. The transformers "
        "release captured here multiplies by the scale before adding the mask, which no "
        "pattern matches either way.\n\n"
        "## Attention calls\n\n"
        "The fused-attention model that prices SDPA on a GPU, compiled or not, is scored with "
        "each GPU held out in `benchmarks/results/attention.md` (`python "
        "benchmarks/attention.py`).\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / ".." / "shared" / "data")
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder of benchmarks/e2e.py --held-out fits: its "
                             "gemm-v<version>-seed0-GA100.json is read (never written); "
                             "without it the GA100 fold is fitted here")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    vidur = vidur_rows(args.data)
    if args.cache is not None and not args.cache.is_dir():
        parser.error(f"--cache {args.cache} is not a folder (benchmarks/e2e.py --held-out "
                     "--cache DIR writes one)")
    fusion, source = fusion_rows(args.data, args.cache)
    command = " ".join(["python benchmarks/fused.py",
                        *(sys.argv[1:] if argv is None else argv)])
    text = render(vidur, fusion, source, time.perf_counter() - t0, command)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
