"""The GeForce terms (clock, half rate) on the RTX 3090's GEMMs, held out by board and by chip.

    python benchmarks/geforce_boost.py [--data ../shared/data] [--golden PREDICTIONS.json]
        [--fold gemm-v15-seed0-GA102.json]

Two terms set from a GeForce board's catalog facts, no fitted number. Clock: a GeForce board runs
above its rated boost clock while power and temperature allow (``predict/gemm/power.py``:
``top_clock_over_boost``, 1.10, set from other GeForce boards' public clocks). Half rate: its
tensor-core floats with fp32 accumulation, what PyTorch asks cuBLAS for, run at half the rate of
a datacenter board's SM, so a tile taller than a GEMM's m is priced in 16-row MMA steps
(``hybrid._geometry``, ``tiles.mma_row_share``): decode GEMMs stream their weights instead of
running a whole tile's padded math at half rate. The RTX 3090's rows (``llmservingsim``:
Llama-3.1-8B's layer GEMMs in HF's fp16 code, kernel time) are never fitted
(``hybrid.UNFITTED_SOURCES``), so the shipped weights score them held out, with no refit: the
same device with ``board_class`` set back to "datacenter" is the predictor without either term,
bit for bit. NB: the shipped fit saw the A40, a datacenter board of the same GA102 chip, so
that is held out by board, not by chip. ``--fold`` adds a hybrid fitted without any GA102 board
(``benchmarks/e2e.py --held-out --cache DIR`` saves one per chip), so the same rows are scored
held out by chip too, beside the roofline in the same run.

Rows are scored twice: without the rows ``impossible_rows`` drops (faster than the datasheet's
71 TFLOP/s allows, as ``benchmarks/accuracy.py`` scores them), and all of them: the 998 rows
above 71 TFLOP/s are the boost the clock term models, not data errors.

Then checks against public measurements no fit has seen: an RTX 4090 (GeForce) and an RTX PRO
6000 Blackwell (workstation) running cuBLASLt GEMMs (xzwgit/gpu-flops-bench README, the median
of each precision's best size), against the predicted rate of an 8192³ Linear; and the golden
predictions of ``--golden`` (a ``tests/fixtures/predictions.json`` from before a term: ``git
show 41639be:tests/fixtures/predictions.json`` before both, or ``git show
72da592:tests/fixtures/predictions.json`` before the half-rate term, after the GEMV rule, which
moved fp32 GEMVs on every board): every device that is not a GeForce board predicts the same
bits as before it. Writes ``benchmarks/results/geforce_boost.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch_gemm_cost.hardware.catalog import DeviceSpec, get_device, list_devices
from torch_gemm_cost.measured.gemm import MeasuredGemms, load_gemms
from torch_gemm_cost.predict import shipped_hybrid
from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor
from torch_gemm_cost.predict.gemm.roofline import RooflinePredictor, impossible_rows
from torch_gemm_cost.records.types import GemmBatch

OUT = ROOT / "benchmarks" / "results" / "geforce_boost.md"
GOLDEN = ROOT / "tests" / "fixtures" / "predictions.json"
# (device, dtype, public TFLOP/s): xzwgit/gpu-flops-bench README, cuBLASLt dense GEMMs
PUBLIC_TFLOPS: tuple[tuple[str, str, float], ...] = (
    ("rtx_4090", "float16", 179.20), ("rtx_4090", "bfloat16", 179.20),
    ("rtx_4090", "float8_e4m3fn", 354.31),
    ("rtx_pro_6000", "float16", 457.44), ("rtx_pro_6000", "bfloat16", 457.61),
    ("rtx_pro_6000", "float8_e4m3fn", 905.32),
)
SIZE_BINS_MS = ((0.0, 0.05), (0.05, 0.2), (0.2, 1.0), (1.0, 1e9))
M_BINS = ((1, 32), (33, 128), (129, 512), (513, 4096))


def scores(rows: MeasuredGemms, pred: torch.Tensor) -> dict[str, str]:
    """MAPE, median APE, share within 10%, median pred/meas."""
    meas = rows.latency_ms
    ape = (pred - meas).abs() / meas
    return {"rows": str(len(rows)), "MAPE": f"{float(ape.mean()):.1%}",
            "median APE": f"{float(ape.median()):.1%}",
            "within 10%": f"{float((ape <= 0.1).double().mean()):.0%}",
            "median pred/meas": f"{float((pred / meas).median()):.3f}"}


def ape(pred: torch.Tensor, meas: torch.Tensor) -> torch.Tensor:
    return (pred - meas).abs() / meas


def predicted_ms(model: HybridPredictor, device: DeviceSpec, part: MeasuredGemms
                 ) -> torch.Tensor:
    """``part``'s rows (the RTX 3090's, kernel-timed, source llmservingsim) measured on
    ``device``, priced by the path ``predict-csv`` takes (``predict_measured``)."""
    return model.predict_measured(part.on_device(device))


def rtx_3090_tables(data: Path, fold: HybridPredictor | None = None) -> list[str]:
    """The 3090's rows scored by the roofline, the shipped weights with and without the clock
    term (held out by board) and, given ``fold``, a hybrid fitted without any GA102 board
    (held out by chip), all in one run."""
    rows = load_gemms(data, sources=["llmservingsim"])
    hybrid = shipped_hybrid()
    geforce = get_device("rtx_3090")
    as_datacenter = replace(geforce, board_class="datacenter")
    predict = predicted_ms

    def predictors(part: MeasuredGemms) -> dict[str, torch.Tensor]:
        out = {"roofline (datasheet peak)": RooflinePredictor().predict(part.gemms,
                                                                        geforce).time_ms,
               "shipped, as a datacenter board (before)": predict(hybrid, as_datacenter, part),
               "shipped, GeForce terms": predict(hybrid, geforce, part)}
        if fold is not None:
            out["GA102 fold, as a datacenter board"] = predict(fold, as_datacenter, part)
            out["GA102 fold, GeForce terms"] = predict(fold, geforce, part)
        return out

    out = []
    dropped = impossible_rows(rows)
    for title, part in (("rows under the datasheet peak (as benchmarks/accuracy.py scores them)",
                         rows.select(~dropped)), ("all rows", rows)):
        table = [{"predictor": name, **scores(part, pred)}
                 for name, pred in predictors(part).items()]
        out += [f"### RTX 3090, {title}", "", tabulate(table, headers="keys", tablefmt="github"),
                ""]
    part = rows.select(~dropped)
    preds = predictors(part)
    shown = {"roofline": preds["roofline (datasheet peak)"],
             "before": preds["shipped, as a datacenter board (before)"],
             "shipped": preds["shipped, GeForce terms"]}
    if fold is not None:
        shown["GA102 fold"] = preds["GA102 fold, GeForce terms"]
    meas = part.latency_ms

    def group_row(sel: torch.Tensor) -> dict[str, str]:
        row = {"rows": str(int(sel.sum()))}
        for name, pred in shown.items():
            row[f"MAPE {name}"] = f"{float(ape(pred, meas)[sel].mean()):.1%}"
        for name, pred in shown.items():
            if name not in ("roofline", "before"):
                row[f"pred/meas {name}"] = f"{float((pred / meas)[sel].median()):.3f}"
        return row

    table = [{"measured ms": f"{lo:g}-{hi:g}" if hi < 1e9 else f">= {lo:g}",
              **group_row((meas >= lo) & (meas < hi))} for lo, hi in SIZE_BINS_MS]
    out += ["### RTX 3090 by size (rows under the datasheet peak)", "",
            tabulate(table, headers="keys", tablefmt="github"), ""]
    m = part.gemms.m
    table = [{"tokens (m)": f"{lo}-{hi}", **group_row((m >= lo) & (m <= hi))}
             for lo, hi in M_BINS]
    out += ["### RTX 3090 by tokens (rows under the datasheet peak)", "",
            tabulate(table, headers="keys", tablefmt="github"), "",
            ("NB: the smallest tile of the candidates is 32 or 64 rows, and a grid short of one "
             "wave is charged a whole wave's work. At half rate, a decode GEMM's padded math "
             "would outlast its weights' stream, where the 3090's measured decode GEMMs move "
             "their weights at 570-890 GB/s flat in m; the half-rate term prices them in "
             "16-row MMA steps (mma.m16n8k16) instead. On full-rate boards the padded rows hide "
             "under DRAM time, so the rule is left off there (no refit)."), ""]
    return out


def load_fold(path: Path) -> HybridPredictor:
    """A hybrid fitted without any board of the 3090's chip, as ``benchmarks/e2e.py
    --held-out --cache DIR`` saves it (``DIR/gemm-v<version>-seed<seed>-GA102.json``)."""
    chip = get_device("rtx_3090").chip
    if not path.is_file():
        raise SystemExit(f"--fold {path}: no such file; `python benchmarks/e2e.py --held-out "
                         f"--cache DIR` writes DIR/gemm-v{HybridPredictor.version}-seed0-"
                         f"{chip}.json")
    if not path.name.endswith(f"-{chip}.json"):
        raise SystemExit(f"--fold {path.name}: not a fold without the {chip} chip (its name "
                         f"ends -{chip}.json, e.g. gemm-v{HybridPredictor.version}-seed0-"
                         f"{chip}.json)")
    return HybridPredictor.load(path)


def public_checks() -> list[str]:
    hybrid = shipped_hybrid()
    table = []
    for gpu, dtype, public in PUBLIC_TFLOPS:
        device = get_device(gpu)
        g = GemmBatch.from_dims(m=[8192], n=[8192], k=[8192], dtype=dtype, op="linear")
        ms = float(hybrid.predict(g, device, timing="kernel").time_ms[0])
        rate = float(g.flops[0]) / (ms * 1e-3) / 1e12
        peak = device.peak_flops_per_s(dtype) / 1e12
        table.append({"device": gpu, "board": device.board_class, "dtype": dtype,
                      "datasheet TFLOP/s": f"{peak:.1f}", "public TFLOP/s": f"{public:.1f}",
                      "predicted TFLOP/s": f"{rate:.1f}",
                      "predicted/public": f"{rate / public:.3f}"})
    return ["### Public GEMM rates of boards without measured rows (8192³ Linear)", "",
            tabulate(table, headers="keys", tablefmt="github"), ""]


def fixture_check(golden_path: Path) -> list[str]:
    """Golden GEMM predictions of every device, compared bit for bit, by board class."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fixture", ROOT / "tests" /
                                                  "test_prediction_fixture.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    golden = json.loads(golden_path.read_text())["gemms"]
    now = dict(module.gemm_predictions())
    board = {d.id: d.board_class for d in list_devices()}
    table = []
    for cls in ("datacenter", "workstation", "geforce"):
        keys = [k for k in now if board[k.split()[0]] == cls and k in golden]
        same = sum(now[k] == golden[k] for k in keys)
        new = sorted({k.split()[0] for k in now if board[k.split()[0]] == cls
                      and k not in golden})
        table.append({"board class": cls,
                      "devices": len({k.split()[0] for k in keys}),
                      "(device, dtype, op) keys": len(keys), "bit-identical": same,
                      "new devices": ", ".join(new) or "-"})
    return [f"### Golden predictions from before the term ({golden_path.name}, GEMM section)",
            "",
            tabulate(table, headers="keys", tablefmt="github"), ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / ".." / "shared" / "data")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--golden", type=Path, default=GOLDEN,
                    help="the fixture predictions to compare with, from before the terms")
    ap.add_argument("--fold", type=Path, default=None,
                    help="a hybrid fitted without the GA102 chip (benchmarks/e2e.py --held-out "
                         "--cache DIR writes DIR/gemm-v<version>-seed0-GA102.json): also score "
                         "the 3090 held out by chip")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    fold = load_fold(args.fold) if args.fold is not None else None
    command = "python benchmarks/geforce_boost.py --golden before.json"
    if fold is not None:
        command += f" --fold {args.fold.name}"
    lines = ["# The GeForce terms (clock, half rate), held out", "",
             (f"Command: `{command}` (before.json: "
              "`git show 72da592:tests/fixtures/predictions.json`, the golden predictions "
              "before the half-rate term; against 41639be's, before both terms, the page at "
              "31be47d shows every non-GeForce key bit-identical, before the GEMV rule moved "
              "fp32 GEMVs"
              + ("; the fold: `python benchmarks/e2e.py --held-out --cache DIR` writes "
                 f"DIR/{args.fold.name}" if fold is not None else "") + ")"), "",
             ("No refit of the shipped weights. The RTX 3090's rows are never fitted. The "
              "shipped fit saw the A40 (a datacenter GA102), so \"shipped\" is held out by "
              "board, not by chip" + ("; \"GA102 fold\" is the leave-one-chip-out fit "
                                      "(seed 0) without any GA102 board's rows: "
                                      "held out by chip." if fold is not None else ".")), ""]
    if (args.data / "gemm" / "llmservingsim.csv.gz").exists():
        lines += rtx_3090_tables(args.data, fold)
    else:
        lines += [f"(skipped: no {args.data / 'gemm' / 'llmservingsim.csv.gz'})", ""]
    lines += public_checks() + fixture_check(args.golden)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
