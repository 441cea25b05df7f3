"""Whole-model estimates against NeuSight's measured end-to-end latencies.

Each single-GPU row of ``e2e/neusight_labels.csv`` is rebuilt as DATA.md describes: the HF class
from ``e2e/configs`` (AutoModelForCausalLM for GPT/OPT; BERT: AutoModelForSequenceClassification
for inference, AutoModelForPreTraining for training), ``attn_implementation="eager"``, float32,
``torch.ones(batch, seq)`` input ids (BERT also gets the all-ones attention mask its eager
attention then added to the scores), on the meta device. ``inf`` is one eval forward; ``train``
is forward + backward of the HF cross-entropy loss, with no optimizer step. The rows with an
``option`` (fusion, dp4, tp4, pp4_1) and the switch-transformer rows are left out.

Each (model, batch, seq, mode) is captured once and predicted on all of its GPUs in one call.

Besides our total, each row shows a diagnostic: the same total with every GEMM whose exact
(batch, m, n, k) NeuSight measured on that GPU replaced by its measured latency ("meas-GEMM"),
which separates the GEMM predictor's error from the rest.

    python benchmarks/e2e.py [--data ../shared/data] [--weights W.json] [--out benchmarks/results/e2e.md]
    python benchmarks/e2e.py --held-out-gemm --out benchmarks/results/e2e_heldout.md

``--held-out-gemm`` predicts each GPU's rows with a GEMM predictor fitted without that GPU
(seed 0), the way a GPU outside the data is predicted; the non-GEMM op costs are the shipped ones.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import logging
import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch_gemm_cost
from torch_gemm_cost.api import compare
from torch_gemm_cost.predict import default_predictor

LEFT_OUT_OPTIONS = ("fusion", "dp4", "tp4", "pp4_1")
LEFT_OUT_MODELS = ("switchxl4",)
INCONSISTENT_GPUS = ("a100_pcie_40gb",)  # in-model GEMMs ~1.5x slower than the op-level data
MODE = {"inf": "inference", "train": "train"}
TARGET_MAPE_PCT = 10.0
# A training step's backward runs twice its forward's GEMM FLOPs, so a forward label above this
# share of its backward holds time no kernel model explains (label_consistency.py, check 5).
FORWARD_SHARE_MAX = 0.7


def load_rows(data_dir: Path) -> list[dict[str, str]]:
    with open(data_dir / "e2e" / "neusight_labels.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [r for r in rows if not r["option"] and r["model"] not in LEFT_OUT_MODELS]


def build(
    data_dir: Path, model: str, batch: int, seq: int, mode: str, device: str = "meta"
) -> tuple[Any, tuple, dict]:
    """The HF model on ``device`` (meta: shapes only) and its call arguments."""
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(data_dir / "e2e" / "configs" / f"{model}.json")
    bert = cfg.model_type == "bert"
    if mode == "train":
        cls = transformers.AutoModelForPreTraining if bert else transformers.AutoModelForCausalLM
    else:
        cls = (
            transformers.AutoModelForSequenceClassification
            if bert
            else transformers.AutoModelForCausalLM
        )
    with torch.device(device):
        net = cls.from_config(cfg, attn_implementation="eager", torch_dtype=torch.float32)
    ids = torch.ones(batch, seq, dtype=torch.int64, device=device)
    kwargs: dict[str, Any] = {}
    if bert:
        # the transformers releases of the measurements (the first with attn_implementation)
        # built an all-ones mask when none was given and added it to every layer's scores;
        # current ones skip that add unless a mask is passed
        kwargs["attention_mask"] = torch.ones(batch, seq, dtype=torch.int64, device=device)
    if not bert:
        # those releases kept the KV cache as the key/value tensors themselves; current ones
        # copy them into a cache object, kernels the measured runs did not have
        kwargs["use_cache"] = False
    if mode == "train":
        kwargs["labels"] = ids
        if bert:
            kwargs["next_sentence_label"] = torch.zeros(batch, dtype=torch.int64, device=device)
    return net, (ids,), kwargs


def measured_gemms(data_dir: Path, gpus: set[str]) -> dict[tuple, float]:
    """(gpu, batch, m, n, k) -> fastest measured float32 latency (ms) in NeuSight's GEMM data."""
    table: dict[tuple, float] = {}
    for name in ("neusight.csv.gz", "neusight-test.csv.gz"):
        path = data_dir / "gemm" / name
        if not path.is_file():  # the diagnostic is then empty, the benchmark still runs
            continue
        with gzip.open(path, "rt", newline="") as f:
            for r in csv.DictReader(f):
                if r["gpu"] not in gpus or r["dtype"] != "float32":
                    continue
                key = (r["gpu"], int(r["batch"]), int(r["m"]), int(r["n"]), int(r["k"]))
                t = float(r["latency_ms"])
                table[key] = min(t, table.get(key, t))
    return table


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100.0


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def run(data_dir: Path, predictor: Any) -> tuple[list[dict[str, Any]], float]:
    rows = load_rows(data_dir)
    groups: dict[tuple, list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        groups[(r["model"], int(r["batch"]), int(r["seq_len"]), MODE[r["mode"]])].append(r)
    gemm_data = measured_gemms(data_dir, {r["gpu"] for r in rows})
    out: list[dict[str, Any]] = []
    start = time.perf_counter()
    for (model, batch, seq, mode), members in sorted(groups.items()):
        net, args, kwargs = build(data_dir, model, batch, seq, mode)
        gpus = sorted({r["gpu"] for r in members})
        reports = compare(net, args, kwargs, devices=gpus, mode=mode, predictor=predictor)
        by_gpu = {rep.device.id: rep for rep in reports}
        for r in members:
            rep = by_gpu[r["gpu"]]
            matched = swapped = 0.0
            for g in rep.gemms:
                t = gemm_data.get((r["gpu"], g.site.batch, g.site.m, g.site.n, g.site.k))
                if t is not None:
                    matched += g.time_ms
                    swapped += t
            meas = float(r["measured_total_ms"])
            fwd_ms = sum(g.time_ms for g in rep.gemms if g.site.phase == "forward") + sum(
                o.time_ms or 0.0 for o in rep.others if o.op.phase == "forward"
            )
            out.append(
                {
                    "gpu": r["gpu"],
                    "model": model,
                    "mode": r["mode"],
                    "seq": seq,
                    "batch": batch,
                    "measured_ms": meas,
                    "ours_ms": rep.total_ms,
                    "gemm_ms": rep.gemm_ms,
                    "other_ms": rep.other_ms,
                    "unmodelled": len(rep.unmodelled),
                    "gemm_cover_pct": 100.0 * matched / rep.gemm_ms if rep.gemm_ms else 0.0,
                    "matched_pred_ms": matched,
                    "matched_meas_ms": swapped,
                    "meas_gemm_total_ms": rep.total_ms - matched + swapped,
                    "neusight_ms": float(r["neusight_pred_ms"]),
                    "fwd_ms": fwd_ms,
                    "bwd_ms": rep.total_ms - fwd_ms,
                    "measured_fwd_ms": float(r["measured_fw_ms"]),
                    "measured_bwd_ms": float(r["measured_bwall_ms"]),
                    "n_gemms": len(rep.gemms),
                    "n_others": len(rep.others),
                }
            )
    return out, time.perf_counter() - start


def render(results: list[dict[str, Any]], predictor: Any, wall_s: float, command: str) -> str:
    from tabulate import tabulate

    body = []
    for r in sorted(results, key=lambda r: (r["gpu"], r["mode"], r["model"], r["batch"])):
        body.append(
            [
                r["gpu"],
                r["model"],
                r["mode"],
                r["seq"],
                r["batch"],
                r["measured_ms"],
                r["ours_ms"],
                ape(r["ours_ms"], r["measured_ms"]),
                r["neusight_ms"],
                ape(r["neusight_ms"], r["measured_ms"]),
                r["gemm_ms"],
                r["other_ms"],
                100 * r["other_ms"] / r["ours_ms"],
                r["gemm_cover_pct"],
                ape(r["meas_gemm_total_ms"], r["measured_ms"]),
                r["unmodelled"],
            ]
        )
    headers = [
        "gpu",
        "model",
        "mode",
        "seq",
        "batch",
        "measured ms",
        "ours ms",
        "ours err%",
        "NeuSight ms",
        "NeuSight err%",
        "ours GEMM ms",
        "ours other ms",
        "other %",
        "GEMM cover %",
        "meas-GEMM err%",
        "unmodelled",
    ]
    rows_md = tabulate(body, headers=headers, tablefmt="github", floatfmt=".1f")

    members: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def line(label: str, mode: str, rs: list[dict[str, Any]]) -> list[Any]:
        members[(label, mode)] = rs
        swapped = [
            ape(r["meas_gemm_total_ms"], r["measured_ms"]) for r in rs if r["gemm_cover_pct"] >= 80
        ]
        return [
            label,
            mode,
            len(rs),
            statistics.fmean(ape(r["ours_ms"], r["measured_ms"]) for r in rs),
            statistics.fmean(100 * (r["ours_ms"] / r["measured_ms"] - 1) for r in rs),
            statistics.fmean(ape(r["neusight_ms"], r["measured_ms"]) for r in rs),
            statistics.fmean(100 * r["other_ms"] / r["ours_ms"] for r in rs),
            _ratio(sum(r["matched_pred_ms"] for r in rs), sum(r["matched_meas_ms"] for r in rs)),
            statistics.fmean(swapped) if swapped else float("nan"),
        ]

    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[(r["gpu"], r["mode"])].append(r)
    summary = [
        line(gpu, mode, rs)
        for (gpu, mode), rs in sorted(groups.items())
        if gpu not in INCONSISTENT_GPUS
    ]
    for mode in ("inf", "train"):
        pooled = [r for r in results if r["mode"] == mode and r["gpu"] not in INCONSISTENT_GPUS]
        if pooled:
            summary.append(line("all but A100-40GB", mode, pooled))
    apart = [
        line(gpu, mode, rs)
        for (gpu, mode), rs in sorted(groups.items())
        if gpu in INCONSISTENT_GPUS
    ]
    headers = [
        "gpu",
        "mode",
        "rows",
        "ours MAPE%",
        "ours mean bias%",
        "NeuSight MAPE%",
        "ours non-GEMM share%",
        "GEMM pred/meas",
        "meas-GEMM MAPE% (cover>=80%)",
    ]
    split = [
        [
            r["gpu"],
            r["model"],
            r["batch"],
            r["measured_fwd_ms"],
            r["fwd_ms"],
            100 * (r["fwd_ms"] / r["measured_fwd_ms"] - 1),
            r["measured_bwd_ms"],
            r["bwd_ms"],
            100 * (r["bwd_ms"] / r["measured_bwd_ms"] - 1),
            r["measured_fwd_ms"] / r["measured_bwd_ms"],
            r["fwd_ms"] / r["bwd_ms"],
        ]
        for r in sorted(results, key=lambda r: (r["gpu"], r["model"], r["batch"]))
        if r["mode"] == "train"
    ]
    split_md = tabulate(
        split,
        headers=[
            "gpu",
            "model",
            "batch",
            "measured fwd ms",
            "ours fwd ms",
            "fwd err%",
            "measured bwd ms",
            "ours bwd ms",
            "bwd err%",
            "measured fwd/bwd",
            "ours fwd/bwd",
        ],
        tablefmt="github",
        floatfmt=".1f",
    )
    bwd_mape = {
        gpu: statistics.fmean(abs(row[8]) for row in split if row[0] == gpu)
        for gpu in sorted({row[0] for row in split})
    }
    misses = []
    for label, mode, n, mape, _bias, ns, _share, ratio, swapped in summary + apart:
        if mape > TARGET_MAPE_PCT:
            why = (
                "no measured GEMM matches these models' shapes"
                if math.isnan(ratio)
                else f"our GEMM times are {ratio:.2f}x the measured ones on the matched shapes; "
                f"with those measured GEMMs in place of ours the error is {swapped:.1f}%"
            )
            consistent = [
                r for r in members[(label, mode)]
                if r["mode"] == "train"
                and r["measured_fwd_ms"] <= FORWARD_SHARE_MAX * r["measured_bwd_ms"]
            ]
            if consistent and len(consistent) < n:
                why += (
                    f"; on its {len(consistent)} of {n} rows whose measured forward is at most "
                    f"{FORWARD_SHARE_MAX} of the backward: "
                    f"{statistics.fmean(ape(r['ours_ms'], r['measured_ms']) for r in consistent):.1f}% "
                    f"(NeuSight "
                    f"{statistics.fmean(ape(r['neusight_ms'], r['measured_ms']) for r in consistent):.1f}%)"
                )
            misses.append(f"- {label} {mode}: {mape:.1f}% (NeuSight {ns:.1f}%); {why}.")
    fmt = (".1f",) * 7 + (".2f", ".1f")
    sum_md = tabulate(summary, headers=headers, tablefmt="github", floatfmt=fmt)
    apart_md = tabulate(apart, headers=headers, tablefmt="github", floatfmt=fmt)
    name = getattr(predictor, "name", type(predictor).__name__)
    version = getattr(predictor, "version", "")
    return (
        "# Whole-model estimates against NeuSight's end-to-end labels\n\n"
        f"Produced by `{command}` (torch_gemm_cost {torch_gemm_cost.__version__}, GEMM predictor "
        f"{name} v{version}, non-GEMM ops: predict/ops.py with data/op_costs.json); "
        f"{len(results)} rows, {wall_s:.0f} s of capture and prediction.\n\n"
        "Measured latencies and NeuSight's predictions: NeuSight (MIT License). Rows with an "
        "`option` (fusion, dp4, tp4, pp4_1) and the switch-transformer rows are left out. "
        "A100-40GB labels are known to be inconsistent with the op-level data (in-model GEMMs "
        "about 1.5x slower); they are reported, not tuned to.\n\n"
        "`meas-GEMM err%` replaces every GEMM that NeuSight measured on that GPU with the "
        "same (batch, m, n, k) by its measured (CUDA-event) latency; `GEMM cover %` is the share "
        "of our GEMM time so replaced. Where cover is high, the remaining error is the non-GEMM "
        "model's (and the unmatched GEMMs'). `GEMM pred/meas` is our predicted time over the "
        "measured time, summed over those matched GEMMs: the GEMM predictor's own error on "
        "these models' shapes.\n\n"
        "## MAPE per GPU and mode\n\n" + sum_md + "\n\n"
        "## A100-40GB (labels known to be inconsistent; reported, not tuned to)\n\n"
        + apart_md
        + "\n\n"
        f"## Where the {TARGET_MAPE_PCT:.0f}% target is missed\n\n"
        + ("\n".join(misses) if misses else "Nowhere.")
        + "\n\n"
        "## Training rows: forward and backward apart\n\n"
        "The labels split each training step into its forward and its backward. Backward "
        "MAPE: " + ", ".join(f"{g} {m:.1f}%" for g, m in bwd_mape.items()) + ". Where the "
        "measured forward is close to or above the measured backward (which runs twice the "
        "forward's GEMM FLOPs), the forward label holds time that no kernel model explains.\n\n"
        + split_md
        + "\n\n"
        "## Non-GEMM op costs, each GPU left out of the fit (`python -m torch_gemm_cost.train.ops`)"
        "\n\n" + _op_cost_table() + "\n\n## Rows\n\n" + rows_md + "\n"
    )


def _op_cost_table() -> str:
    """The fitter's leave-GPU-out scores, as stored in the shipped ``data/op_costs.json``."""
    from importlib import resources

    from tabulate import tabulate

    doc = json.loads(resources.files("torch_gemm_cost").joinpath("data/op_costs.json").read_text())
    body = [
        [c, gpu, m["n"], m["mape_pct"], m["median_ape_pct"], m["mape_ge_0.1ms_pct"]]
        for c, per_gpu in doc["leave_gpu_out"].items()
        for gpu, m in per_gpu.items()
    ]
    return tabulate(
        body,
        headers=[
            "op class",
            "held-out gpu",
            "ops",
            "MAPE%",
            "median APE%",
            "MAPE% (ops >= 0.1 ms)",
        ],
        tablefmt="github",
        floatfmt=".1f",
    )


class HeldOutGemm:
    """Predicts each device's GEMMs with a hybrid fitted on every other GPU's measured GEMMs."""

    name = "hybrid (refitted without each GPU)"

    def __init__(self, data_dir: Path, gpus: list[str], seed: int = 0) -> None:
        from torch_gemm_cost.gemms.measured import load_gemms
        from torch_gemm_cost.predict.hybrid import HybridPredictor

        measured = load_gemms(data_dir)
        self.version = HybridPredictor.version
        self.by_gpu = {}
        for gpu in gpus:
            self.by_gpu[gpu] = HybridPredictor(seed=seed).fit(
                measured.select(~measured.mask(gpu=gpu)))

    def predict(self, gemms: Any, device: Any, **kw: Any) -> Any:
        return self.by_gpu[device.id].predict(gemms, device, **kw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / ".." / "shared" / "data")
    parser.add_argument(
        "--weights",
        type=Path,
        default=None,
        help="HybridPredictor weights (JSON); default: default_predictor()",
    )
    parser.add_argument("--held-out-gemm", action="store_true",
                        help="fit the GEMM predictor without each row's GPU (about 3 minutes)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "e2e.md")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.held_out_gemm:
        predictor: Any = HeldOutGemm(args.data, sorted({r["gpu"] for r in load_rows(args.data)}))
    elif args.weights is not None:
        from torch_gemm_cost.predict.hybrid import HybridPredictor

        predictor = HybridPredictor.load(args.weights)
    else:
        predictor = default_predictor()
    results, wall_s = run(args.data, predictor)
    command = "python benchmarks/e2e.py" + (f" --weights {args.weights}" if args.weights else "")
    command += " --held-out-gemm" if args.held_out_gemm else ""
    if args.out != parser.get_default("out"):
        command += f" --out {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}"
    text = render(results, predictor, wall_s, command)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
