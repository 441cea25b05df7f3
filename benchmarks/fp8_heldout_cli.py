"""Held-out fp8 GEMM accuracy through the command line a user runs.

    python benchmarks/fp8_heldout_cli.py [--data ../shared/data] [--chips GH100 GB100 AD102]

For each chip: the hybrid is fitted (seed 0, one thread, as ``accuracy.py``) on every measured
GEMM except those of any board of that chip, its weights are saved, and ``torch-gemm-cost
predict-csv --weights`` prices the chip's fp8 rows of aiconfigurator (vLLM's fp8 Linear) measured
at 0.01 ms or more, in-process, as a user's call would. The pure roofline prices the same rows
in the same run. Writes ``benchmarks/results/fp8_heldout_cli.md``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from tabulate import tabulate

from torch_gemm_cost.cli import main as cli_main
from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.measured.gemm import load_all_gemms, read_gemm_file
from torch_gemm_cost.predict.gemm.hybrid import variants
from torch_gemm_cost.predict.gemm.roofline import RooflinePredictor, impossible_rows
from torch_gemm_cost.train.gemm import chip_of

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "fp8_heldout_cli.md"
ACCURACY = ROOT / "benchmarks" / "results" / "accuracy.json"  # accuracy.py's own held-out run
SOURCE = "aiconfigurator.csv.gz"


def chip_rows(data: Path, chip: str, min_ms: float, out: Path) -> int:
    """The chip's fp8 rows of aiconfigurator at ``min_ms`` or more, written to ``out`` (the
    data's own columns); returns how many."""
    with gzip.open(data / "gemm" / SOURCE, "rt", newline="") as f:
        reader = csv.DictReader(f)
        fields = list(reader.fieldnames or [])
        rows = [r for r in reader if r["dtype"].startswith("float8")
                and float(r["latency_ms"]) >= min_ms and chip_of(r["gpu"]) == chip]
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def ape(pred: list[float], meas: list[float]) -> tuple[float, float]:
    """(MAPE in %, median pred/meas)."""
    ratios = [p / m for p, m in zip(pred, meas)]
    return 100 * statistics.fmean(abs(r - 1) for r in ratios), statistics.median(ratios)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / ".." / "shared" / "data")
    ap.add_argument("--chips", nargs="+", default=["GH100", "GB100", "AD102"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-ms", type=float, default=0.01)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    measured = load_all_gemms(args.data)
    measured = measured.select(~impossible_rows(measured))
    library = json.loads(ACCURACY.read_text())["predictors"]["hybrid"][
        "aiconfigurator_ge_0.01ms_mape"]
    table = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for chip in args.chips:
            rows_csv, out_csv = Path(tmp) / f"{chip}.csv", Path(tmp) / f"{chip}_pred.csv"
            if not chip_rows(args.data, chip, args.min_ms, rows_csv):
                raise SystemExit(f"no fp8 rows of chip {chip!r} in {SOURCE}")
            held = torch.tensor([chip_of(g) == chip for g in measured.gpu])
            t0 = time.perf_counter()
            model = variants(seed=args.seed)["hybrid"].fit(measured.select(~held))
            fit_s = time.perf_counter() - t0
            weights = Path(tmp) / f"{chip}.json"
            model.save(weights)
            if cli_main(["predict-csv", str(rows_csv), "--weights", str(weights),
                         "--out", str(out_csv)]):
                raise SystemExit(f"predict-csv failed on {rows_csv}")
            with out_csv.open(newline="") as f:
                got = list(csv.DictReader(f))
            rows = read_gemm_file(rows_csv)
            for gpu in sorted({r["gpu"] for r in got}):
                idx = [i for i, r in enumerate(got) if r["gpu"] == gpu]
                meas = [float(got[i]["latency_ms"]) for i in idx]
                hybrid = ape([float(got[i]["predicted_ms"]) for i in idx], meas)
                sub = rows.select(torch.tensor([g == gpu for g in rows.gpu]))
                roof = RooflinePredictor().predict(sub.gemms, get_device(gpu)).time_ms
                roofline = ape(roof.tolist(), sub.latency_ms.tolist())
                committed = library.get(f"{gpu} float8_e4m3fn")
                table.append([gpu, chip, len(idx), f"{roofline[0]:.1f}%", f"{hybrid[0]:.1f}%",
                              f"{hybrid[1]:.3f}",
                              "" if committed is None else f"{100 * committed:.1f}%",
                              f"{fit_s:.0f}"])
            print(f"{chip}: {table[-1]}", file=sys.stderr)
    headers = ["gpu", "chip held out", "rows", "roofline MAPE", "hybrid MAPE (predict-csv)",
               "median pred/meas", "accuracy.json", "fit s"]
    text = f"""# Held-out fp8 GEMMs through `predict-csv`

`python benchmarks/fp8_heldout_cli.py --chips {' '.join(args.chips)}` \
({time.perf_counter() - t_start:.0f} s, one thread). For each chip, the hybrid (seed {args.seed})
is fitted on every measured GEMM except any board of that chip (impossible rows dropped, as
`accuracy.py` does), saved, and `torch-gemm-cost predict-csv --weights` prices that chip's fp8
rows of aiconfigurator (vLLM's fp8 Linear: the static input cast and CUTLASS scaled-mm, kernel
time) measured at {args.min_ms} ms or more. **Each row's chip is held out: no board of it is in
the fit that priced it.** The roofline prices the same rows in the same run. These are the rows
a user would hand `predict-csv`: none is dropped, where `accuracy.py` drops the rows that run
faster than the datasheet allows (most of them the L40S's, whose six copies of the weights stay
in its 96 MB L2). "accuracy.json" is that script's own held-out figure for the same GPU, from its
own fit of the same recipe: the gap between the two columns is that of one fit to another, and of
the rows each keeps.

{tabulate(table, headers=headers, tablefmt="github")}
"""
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
