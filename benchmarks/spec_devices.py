"""A GPU from its datasheet: each measured GPU taken out of the catalog and given as a spec file
predicts its rows exactly as through the catalog. Writes benchmarks/results/spec_devices.md.

    python benchmarks/spec_devices.py [--data ../shared/data] [--heldout [GPU ...]] [-v]

For each catalog GPU with measured GEMM rows (``load_all_gemms``: ../shared/data and this
project's H200 rows), rows the data cannot physically hold dropped as in accuracy.py:
  1. the catalog path: the device by its id, the shipped predictor;
  2. the spec path: the GPU removed from the catalog (its id no longer resolves), its record
     written to a temporary spec file, the device resolved from that file as
     ``device="gpu.json"`` is, the same shipped predictor. The record is gpus.json's plus the
     facts scripts/build_catalog.py adds (driver names, base clock, interconnect), the record a
     user who copied the catalog's sources would write. Both paths must agree to the last bit;
  3. gpus.json's record alone (no base clock): what the fallbacks cost.
Then the L40S's aiconfigurator rows through ``predict-csv --device-spec`` against
``predict-csv`` with the catalog. The MAPEs of 1-3 are the shipped predictor's, fitted on these
rows: not held-out scores.

``--heldout`` adds the nearest this repo can come to a GPU nobody measured: for each GPU of
aiconfigurator's LLM linear layers (or the ones named), the hybrid refitted without any board of
its chip, the GPU given by its spec file alone, scored on those layers in bf16 and fp8 of
0.01 ms or more. Each refit is the shipped training (1000 full-batch Adam steps), about half an
hour on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from build_catalog import spec_file_record

from torch_gemm_cost.cli import main as cli_main
from torch_gemm_cost.hardware import catalog as devices
from torch_gemm_cost.hardware.catalog import DeviceSpec, get_device
from torch_gemm_cost.hardware.target import resolve_target
from torch_gemm_cost.measured.gemm import MeasuredGemms, load_all_gemms
from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor, variants
from torch_gemm_cost.predict.gemm.roofline import impossible_rows
from torch_gemm_cost.train.gemm import chip_of

WEIGHTS = ROOT / "torch_gemm_cost" / "data" / "hybrid_weights.json"
log = logging.getLogger("spec_devices")


@contextmanager
def catalog_without(device_id: str) -> Iterator[None]:
    """The catalog without ``device_id``: its id and driver names stop resolving."""
    full = devices._catalog()
    cut = {k: v for k, v in full.items() if k != device_id}
    saved = devices._catalog
    devices._catalog = lambda: cut  # type: ignore[assignment]
    devices._by_name.cache_clear()
    try:
        try:
            get_device(device_id)
        except ValueError:
            pass
        else:
            raise RuntimeError(f"{device_id} still resolves")
        yield
    finally:
        devices._catalog = saved  # type: ignore[assignment]
        devices._by_name.cache_clear()


def spec_from_file(record: dict, directory: Path) -> tuple[DeviceSpec, list[str]]:
    """The device a spec file holding ``record`` resolves to, as ``device="x.json"`` does, and
    the fields it fell back on (its warning says what stood in)."""
    path = directory / f"{record['id']}.json"
    path.write_text(json.dumps(record, indent=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        target = resolve_target(str(path))
    spec = target.spec
    assert target.source == f"spec file {path}" and spec.origin == "spec_file"
    return spec, [n.removeprefix("fallback ").split(" -> ")[0] for n in spec.notes
                  if n.startswith("fallback ")]


def mape(pred: torch.Tensor, meas: torch.Tensor) -> float:
    return float(((pred - meas).abs() / meas).mean())


def exactness(measured: MeasuredGemms, gpus_json: dict[str, dict], tmp: Path
              ) -> tuple[list[list], float]:
    catalog_pred, spec_pred = HybridPredictor.load(WEIGHTS), HybridPredictor.load(WEIGHTS)
    rows, worst = [], 0.0
    for gpu in sorted(set(measured.gpu)):
        sub = measured.select(measured.mask(gpu=gpu))
        t0 = time.perf_counter()
        by_catalog = catalog_pred.predict_measured(sub.on_device(resolve_target(gpu).spec))
        with catalog_without(gpu):
            spec, _ = spec_from_file(spec_file_record(gpus_json[gpu]), tmp)
            by_spec = spec_pred.predict_measured(sub.on_device(spec))
            raw, fallbacks = spec_from_file(gpus_json[gpu], tmp)
            by_raw = spec_pred.predict_measured(sub.on_device(raw))
        diff = float((by_spec - by_catalog).abs().max())
        worst = max(worst, diff)
        meas = sub.latency_ms
        rows.append([gpu, len(sub), f"{diff:.3g}", bool(torch.equal(by_spec, by_catalog)),
                     f"{100 * mape(by_catalog, meas):.2f}%", f"{100 * mape(by_spec, meas):.2f}%",
                     f"{100 * mape(by_raw, meas):.2f}%", ", ".join(fallbacks)])
        log.info("%s: %d rows, max |diff| %.3g ms, %.1fs", gpu, len(sub), diff,
                 time.perf_counter() - t0)
    return rows, worst


def _write_csv(path: Path, sub: MeasuredGemms) -> None:
    g = sub.gemms
    names = g.dtype_names()
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["gpu", "source", "timing", "op", "dtype", "batch", "m", "n", "k"])
        for i in range(len(sub)):
            w.writerow([sub.gpu[i], sub.source[i], sub.timing[i], "linear", names[i],
                        int(g.batch[i]), int(g.m[i]), int(g.n[i]), int(g.k[i])])


def _predicted(path: Path) -> list[str]:
    with open(path, newline="") as fh:
        return [r["predicted_ms"] for r in csv.DictReader(fh)]


def l40s_predict_csv(measured: MeasuredGemms, gpus_json: dict[str, dict], tmp: Path
                     ) -> tuple[int, int]:
    """(rows, rows whose predict-csv output differs) for the L40S's aiconfigurator rows."""
    sub = measured.select(measured.mask(gpu="l40s", source="aiconfigurator"))
    src = tmp / "l40s_rows.csv"
    _write_csv(src, sub)
    assert cli_main(["predict-csv", str(src), "--out", str(tmp / "by_catalog.csv")]) == 0
    spec = tmp / "l40s_spec.json"
    spec.write_text(json.dumps(spec_file_record(gpus_json["l40s"])))
    with catalog_without("l40s"):
        assert cli_main(["predict-csv", str(src), "--out", str(tmp / "by_spec.csv"),
                         "--device-spec", str(spec)]) == 0
    a, b = _predicted(tmp / "by_catalog.csv"), _predicted(tmp / "by_spec.csv")
    return len(a), sum(x != y for x, y in zip(a, b))


def heldout(measured: MeasuredGemms, gpus_json: dict[str, dict], tmp: Path,
            gpus: list[str]) -> list[list]:
    """Each aiconfigurator GPU (of ``gpus``, all when empty) from its spec file, by a hybrid
    fitted without its chip."""
    names = measured.gemms.dtype_names()
    aic = measured.mask(source="aiconfigurator") & (measured.latency_ms >= 0.01)
    out = []
    for gpu in sorted({g for g, a in zip(measured.gpu, aic.tolist())
                       if a and (not gpus or g in gpus)}):
        chip = chip_of(gpu)
        held = torch.tensor([chip_of(g) == chip for g in measured.gpu])
        t0 = time.perf_counter()
        model = variants(seed=0)["hybrid"].fit(measured.select(~held))
        log.info("fitted without %s in %.0fs", chip, time.perf_counter() - t0)
        with catalog_without(gpu):
            spec, _ = spec_from_file(spec_file_record(gpus_json[gpu]), tmp)
            for dtype in ("bfloat16", "float8_e4m3fn"):
                mask = aic & measured.mask(gpu=gpu) & torch.tensor([n == dtype for n in names])
                if not mask.any():
                    continue
                sub = measured.select(mask)
                pred = model.predict_measured(sub.on_device(spec))
                ape = (pred - sub.latency_ms).abs() / sub.latency_ms
                out.append([gpu, chip, dtype, len(sub), f"{100 * float(ape.mean()):.1f}%",
                            f"{100 * float(ape.median()):.1f}%",
                            f"{100 * float((ape <= 0.25).double().mean()):.0f}%"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / ".." / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "spec_devices.md"))
    ap.add_argument("--heldout", nargs="*", metavar="GPU", default=None,
                    help="also refit without each aiconfigurator GPU's chip (or the GPUs named; "
                         "about half an hour each)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(message)s")
    data = Path(args.data)
    gpus_json = {r["id"]: r for r in json.loads((data / "devices" / "gpus.json").read_text())}
    measured = load_all_gemms(data)
    measured = measured.select(~impossible_rows(measured))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows, worst = exactness(measured, gpus_json, tmp)
        csv_rows, csv_diff = l40s_predict_csv(measured, gpus_json, tmp)
        held = ([] if args.heldout is None
                else heldout(measured, gpus_json, tmp, list(args.heldout)))
    lines = [
        "# A GPU from its datasheet: the spec path against the catalog path",
        "",
        "Command: `python benchmarks/spec_devices.py"
        + ("" if args.heldout is None else " --heldout " + " ".join(args.heldout)).rstrip()
        + "`",
        "",
        ("Each measured GPU is taken out of the catalog (its id no longer resolves), its record "
         "written to a temporary spec file and resolved from it as `device=\"gpu.json\"` is; the "
         "shipped predictor then predicts its rows (impossible rows dropped, as in accuracy.py). "
         "'spec file' is gpus.json's record plus the facts scripts/build_catalog.py adds (driver "
         "names, base clock, interconnect); 'gpus.json alone' leaves those out, so the base "
         "clock falls back to none (no clock drop). MAPEs are in-sample: the shipped predictor "
         "was fitted on these rows."),
        "",
        tabulate(rows, headers=["gpu", "rows", "max |spec - catalog| ms", "bit-identical",
                                "MAPE catalog", "MAPE spec file", "MAPE gpus.json alone",
                                "fallbacks of gpus.json alone"]),
        "",
        f"Largest difference over every GPU: {worst:.3g} ms.",
        "",
        "## L40S through predict-csv",
        "",
        (f"The L40S's {csv_rows} aiconfigurator rows written as a CSV and predicted by "
         "`predict-csv` with the catalog, then with the L40S removed from the catalog and "
         f"`--device-spec l40s_spec.json`: {csv_diff} of {csv_rows} predicted_ms values "
         "differ."),
    ]
    if held:
        lines += [
            "",
            "## Held out: the chip never seen by the fit, the GPU from its spec file alone",
            "",
            ("aiconfigurator's LLM linear layers (vLLM's F.linear in bf16, CUTLASS fp8 "
             "scaled-mm with its input cast) of 0.01 ms or more, each GPU predicted by the "
             "hybrid refitted (seed 0) without any board of its chip, the device resolved from "
             "its spec file with the catalog lacking it. The nearest this repo can come to a GPU "
             "that appears nowhere in it: the GPU's other sources stay out of the fit too, but "
             "its record was written by this project, and the predictor's design has seen its "
             "data."),
            "",
            tabulate(held, headers=["gpu", "chip held out", "dtype", "rows", "MAPE",
                                    "median APE", "within 25%"]),
        ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if worst == 0.0 and csv_diff == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
