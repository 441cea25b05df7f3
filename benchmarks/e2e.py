"""Whole-model estimates against measured end-to-end latencies.

The labels are NeuSight's (``e2e/neusight_labels.csv``) and this project's own H200 runs of the
same models (``benchmarks/data/h200/e2e/labels.csv``). Each single-GPU row is rebuilt as DATA.md
describes: the HF class from ``e2e/configs`` (AutoModelForCausalLM for GPT/OPT; BERT:
AutoModelForSequenceClassification for inference, AutoModelForPreTraining for training),
``attn_implementation="eager"``, float32, ``torch.ones(batch, seq)`` input ids (BERT also gets
the all-ones attention mask its eager attention then added to the scores), on the meta device.
``inf`` is one eval forward; ``train`` is forward + backward of the HF cross-entropy loss, with
no optimizer step. The rows with an ``option`` (fusion, dp4, tp4, pp4_1) and the
switch-transformer rows are left out.

Each (model, batch, seq, mode) is captured once and predicted on all of its GPUs in one call.

Besides our total, each row shows a diagnostic: the same total with every GEMM whose exact
(batch, m, n, k) NeuSight measured on that GPU replaced by its measured latency ("meas-GEMM"),
which separates the GEMM predictor's error from the rest.

    python benchmarks/e2e.py --held-out [--cache DIR]   # the headline: each chip held out
    python benchmarks/e2e.py [--weights W.json]           # the shipped weights (every GPU seen)

``--held-out`` predicts each GPU's rows with a GEMM predictor and non-GEMM op costs fitted
without any board of that GPU's chip (seed 0), the way a GPU outside the data is predicted.
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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch_gemm_cost
from torch_gemm_cost.api import compare
from torch_gemm_cost.measured.gemm import DEFAULT_OWN_DIRS
from torch_gemm_cost.predict import default_predictor
from torch_gemm_cost.predict.ops import OpBatch, OpCostModel
from torch_gemm_cost.train.gemm import chip_of

LEFT_OUT_OPTIONS = ("fusion", "dp4", "tp4", "pp4_1")
LEFT_OUT_MODELS = ("switchxl4",)
MODE = {"inf": "inference", "train": "train"}
TARGET_MAPE_PCT = 10.0
TARGET_BIAS_PCT = 10.0
# A training step's backward runs twice its forward's GEMM FLOPs, so a forward label above this
# share of its backward holds time no kernel model explains (label_consistency.py, check 5).
FORWARD_SHARE_MAX = 0.7


def load_rows(data_dir: Path, own_dirs: Sequence[Path] = DEFAULT_OWN_DIRS
              ) -> list[dict[str, str]]:
    """NeuSight's single-GPU labels, then this project's own (no NeuSight prediction)."""
    with open(data_dir / "e2e" / "neusight_labels.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for own in own_dirs:
        path = Path(own) / "e2e" / "labels.csv"
        if path.is_file():
            with open(path, newline="") as f:
                rows += [{**r, "neusight_pred_ms": ""} for r in csv.DictReader(f)]
    return [r for r in rows if not r["option"] and r["model"] not in LEFT_OUT_MODELS]


def build(
    data_dir: Path, model: str, batch: int, seq: int, mode: str, device: str = "meta"
) -> tuple[Any, tuple, dict]:
    """The HF model on ``device`` (meta: shapes only) and its call arguments."""
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(data_dir / "e2e" / "configs" / f"{model}.json")
    bert = cfg.model_type == "bert"
    cls: Any  # one of the Auto classes, which share no public base
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


def _mean(values: Iterable[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return statistics.fmean(kept) if kept else float("nan")


def run(data_dir: Path, predictor: Any, op_costs: Any = None,
        own_dirs: Sequence[Path] = DEFAULT_OWN_DIRS, keep_estimates: bool = False
        ) -> tuple[list[dict[str, Any]], float]:
    """Every label row predicted. ``op_costs(device)`` gives the non-GEMM op cost model for a
    device (None: the shipped one, as ``estimate`` prices them). ``keep_estimates`` adds each
    row's device and GEMM estimates (``device``, ``gemms``: not JSON) for the intervals."""
    rows = load_rows(data_dir, own_dirs)
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
            if op_costs is None:
                other = {id(o): o.time_ms or 0.0 for o in rep.others}
            else:
                times = op_costs(rep.device).predict(OpBatch(tuple(o.op for o in rep.others)),
                                                     rep.device).times_or_none()
                other = {id(o): t or 0.0 for o, t in zip(rep.others, times)}
            other_ms = sum(other.values())
            total_ms = rep.gemm_ms + other_ms
            matched = swapped = 0.0
            for g in rep.gemms:
                t = gemm_data.get((r["gpu"], g.site.batch, g.site.m, g.site.n, g.site.k))
                if t is not None:
                    matched += g.time_ms
                    swapped += t
            meas = float(r["measured_total_ms"])
            fwd_ms = sum(g.time_ms for g in rep.gemms if g.site.phase == "forward") + sum(
                other[id(o)] for o in rep.others if o.op.phase == "forward"
            )
            ns = r["neusight_pred_ms"]
            out.append(
                {
                    "gpu": r["gpu"],
                    "model": model,
                    "mode": r["mode"],
                    "seq": seq,
                    "batch": batch,
                    "measured_ms": meas,
                    "ours_ms": total_ms,
                    "gemm_ms": rep.gemm_ms,
                    "other_ms": other_ms,
                    "unmodelled": len(rep.unmodelled),
                    "gemm_cover_pct": 100.0 * matched / rep.gemm_ms if rep.gemm_ms else 0.0,
                    "matched_pred_ms": matched,
                    "matched_meas_ms": swapped,
                    "meas_gemm_total_ms": total_ms - matched + swapped,
                    "neusight_ms": float(ns) if ns else float("nan"),
                    "fwd_ms": fwd_ms,
                    "bwd_ms": total_ms - fwd_ms,
                    "measured_fwd_ms": float(r["measured_fw_ms"]),
                    "measured_bwd_ms": float(r["measured_bwall_ms"]),
                    "n_gemms": len(rep.gemms),
                    "n_others": len(rep.others),
                    **({"device": rep.device, "gemms": rep.gemms} if keep_estimates else {}),
                }
            )
    return out, time.perf_counter() - start


def _consistent(r: dict[str, Any]) -> bool:
    """A training label whose forward is at most FORWARD_SHARE_MAX of its backward (inference
    rows always pass)."""
    return r["mode"] != "train" or r["measured_fwd_ms"] <= FORWARD_SHARE_MAX * r["measured_bwd_ms"]


def own_gemm_levels(data_dir: Path, predictor: Any, gpus: Iterable[str]
                    ) -> dict[str, dict[str, float]]:
    """Per GPU with measured fp32 GEMMs of 1e10 FLOPs or more (the labels' precision, where the
    kernel level shows): the predictor's median pred/meas on them, and the issue share it gives
    fp32 on that GPU's CUDA cores, min(1, issue lanes per FP32 lane / (1 + r)) with r its
    fitted non-FMA instructions per FMA. A whole model with no measured GEMM of its own shapes
    inherits that level."""
    from torch_gemm_cost.hardware.catalog import get_device
    from torch_gemm_cost.measured.gemm import load_all_gemms
    from torch_gemm_cost.predict.gemm.features import simt_issue_per_lane
    from torch_gemm_cost.predict.gemm.power import simt_issue_share
    from torch_gemm_cost.predict.gemm.roofline import impossible_rows

    data = load_all_gemms(data_dir)
    data = data.select(~impossible_rows(data))
    fp32 = torch.tensor([n == "float32" for n in data.gemms.dtype_names()])
    out: dict[str, dict[str, float]] = {}
    for gpu in sorted(set(gpus)):
        keep = data.mask(gpu=gpu) & fp32 & (data.gemms.flops >= 1e10)
        model = (predictor._gemm_model(chip_of(gpu)) if isinstance(predictor, HeldOutByChip)
                 else predictor)
        if not bool(keep.any()) or not hasattr(model, "physical_constants"):
            continue
        rows = data.select(keep)
        r = float(model.physical_constants()["simt_overhead_per_fma"])
        out[gpu] = {
            "rows": float(keep.sum()),
            "ratio": float(torch.median(model.predict_measured(rows) / rows.latency_ms)),
            "r": r,
            "share": float(simt_issue_share(torch.tensor(simt_issue_per_lane(get_device(gpu))),
                                            r)),
        }
    return out


def render(results: list[dict[str, Any]], predictor: Any, wall_s: float, command: str,
           own_levels: dict[str, dict[str, float]] | None = None) -> str:
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
                100 * (r["ours_ms"] / r["measured_ms"] - 1),
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
        "gpu", "model", "mode", "seq", "batch", "measured ms", "ours ms", "ours err%",
        "NeuSight ms", "NeuSight APE%", "ours GEMM ms", "ours other ms", "other %",
        "GEMM cover %", "meas-GEMM APE%", "unmodelled",
    ]
    rows_md = tabulate(body, headers=headers, tablefmt="github", floatfmt=".1f")

    members: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def line(label: str, mode: str, rs: list[dict[str, Any]]) -> list[Any]:
        members[(label, mode)] = rs
        swapped = [
            ape(r["meas_gemm_total_ms"], r["measured_ms"]) for r in rs if r["gemm_cover_pct"] >= 80
        ]
        kept = [r for r in rs if _consistent(r)]
        return [
            label,
            mode,
            len(rs),
            _mean(ape(r["ours_ms"], r["measured_ms"]) for r in rs),
            _mean(100 * (r["ours_ms"] / r["measured_ms"] - 1) for r in rs),
            _mean(ape(r["neusight_ms"], r["measured_ms"]) for r in rs),
            _mean(100 * r["other_ms"] / r["ours_ms"] for r in rs),
            _ratio(sum(r["matched_pred_ms"] for r in rs), sum(r["matched_meas_ms"] for r in rs)),
            _mean(swapped),
            f"{len(kept)}: {_mean(ape(r['ours_ms'], r['measured_ms']) for r in kept):.1f}"
            if kept and len(kept) < len(rs) else "",
        ]

    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[(r["gpu"], r["mode"])].append(r)
    summary = [line(gpu, mode, rs) for (gpu, mode), rs in sorted(groups.items())]
    neusight = [r for r in results if not math.isnan(r["neusight_ms"])]
    own = [r for r in results if math.isnan(r["neusight_ms"])]
    for label, pool in (("all NeuSight labels", neusight), ("this project's H200", own)):
        for mode in ("inf", "train"):
            pooled = [r for r in pool if r["mode"] == mode]
            if pooled:
                summary.append(line(label, mode, pooled))
    headers = [
        "gpu",
        "mode",
        "rows",
        "ours MAPE%",
        "ours mean signed err%",
        "NeuSight MAPE% (same rows)",
        "ours non-GEMM share%",
        "GEMM pred/meas",
        "meas-GEMM MAPE% (cover>=80%)",
        "rows passing the fwd/bwd label check: ours MAPE%",
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
    for label, mode, n, mape, bias, ns, _share, ratio, swapped, _kept in summary:
        if mape <= TARGET_MAPE_PCT and abs(bias) <= TARGET_BIAS_PCT:
            continue
        why = (
            "no measured GEMM matches these models' shapes"
            if math.isnan(ratio)
            else f"our GEMM times are {ratio:.2f}x the measured ones on the matched shapes; "
            f"with those measured GEMMs in place of ours the error is {swapped:.1f}%"
        )
        level = (own_levels or {}).get(label)
        if math.isnan(ratio) and level is not None:
            why += (
                f"; on its own measured fp32 GEMMs of 1e10 FLOPs or more ({level['rows']:.0f}) "
                f"our times are {level['ratio']:.2f}x the measured ones, with fp32 on its CUDA "
                f"cores at an issue share of {level['share']:.2f} (r = {level['r']:.3f} non-FMA "
                "instructions per FMA, a term only chips with as many issue lanes as FP32 "
                "lanes teach)"
            )
        consistent = [r for r in members[(label, mode)] if r["mode"] == "train" and _consistent(r)]
        if consistent and len(consistent) < n:
            why += (
                f"; on its {len(consistent)} of {n} rows whose measured forward is at most "
                f"{FORWARD_SHARE_MAX} of the backward: "
                f"{_mean(ape(r['ours_ms'], r['measured_ms']) for r in consistent):.1f}% "
                f"(NeuSight {_mean(ape(r['neusight_ms'], r['measured_ms']) for r in consistent):.1f}%)"
            )
        ns_text = "" if math.isnan(ns) else f" (NeuSight {ns:.1f}%)"
        misses.append(f"- {label} {mode}: {mape:.1f}%{ns_text}, mean signed error "
                      f"{bias:+.1f}%; {why}.")
    fmt = (".1f",) * 7 + (".2f", ".1f")
    sum_md = tabulate(summary, headers=headers, tablefmt="github", floatfmt=fmt)
    name = getattr(predictor, "name", type(predictor).__name__)
    version = getattr(predictor, "version", "")
    return (
        "# Whole-model estimates against measured end-to-end latencies\n\n"
        f"Produced by `{command}` (torch_gemm_cost {torch_gemm_cost.__version__}, GEMM predictor "
        f"{name} v{version}); {len(results)} rows, {wall_s:.0f} s of capture and prediction.\n\n"
        "Measured latencies and NeuSight's predictions: NeuSight (MIT License); the H200 rows: "
        "this project's own runs of the same models (`benchmarks/data/README.md`), with no "
        "NeuSight prediction. Rows with an `option` (fusion, dp4, tp4, pp4_1) and the "
        "switch-transformer rows are left out.\n\n"
        "`meas-GEMM` replaces every GEMM that NeuSight measured on that GPU with the "
        "same (batch, m, n, k) by its measured (CUDA-event) latency; `GEMM cover %` is the share "
        "of our GEMM time so replaced. Where cover is high, the remaining error is the non-GEMM "
        "model's (and the unmatched GEMMs'). `GEMM pred/meas` is our predicted time over the "
        "measured time, summed over those matched GEMMs: the GEMM predictor's own error on "
        "these models' shapes. The last column scores only the training rows whose measured "
        "forward is at most "
        f"{FORWARD_SHARE_MAX} of the backward (a filter on the labels, reported beside the "
        "headline, never instead of it). Where no measured GEMM matches a GPU's models, its "
        "miss below gives the same predictor's median pred/meas on that GPU's own measured fp32 "
        "GEMMs of 1e10 FLOPs or more instead, with the issue share its CUDA cores get.\n\n"
        "## MAPE per GPU and mode\n\n" + sum_md + "\n\n"
        f"## Where the {TARGET_MAPE_PCT:.0f}% MAPE or ±{TARGET_BIAS_PCT:.0f}% bias target is "
        "missed\n\n"
        + ("\n".join(misses) if misses else "Nowhere.")
        + "\n\n"
        "## Training rows: forward and backward apart\n\n"
        "The labels split each training step into its forward and its backward. Backward "
        "MAPE: " + ", ".join(f"{g} {m:.1f}%" for g, m in bwd_mape.items()) + ". Where the "
        "measured forward is close to or above the measured backward (which runs twice the "
        "forward's GEMM FLOPs), the forward label holds time that no kernel model explains.\n\n"
        + split_md
        + "\n\n"
        "## Non-GEMM op costs, each chip left out of the fit (`python -m torch_gemm_cost.train.ops`)"
        "\n\n" + _op_cost_table() + "\n\n## Rows\n\n" + rows_md + "\n"
    )


def _op_cost_table() -> str:
    """The fitter's leave-GPU-out scores, as stored in the shipped ``data/op_costs.json``."""
    from importlib import resources

    from tabulate import tabulate

    doc = json.loads(resources.files("torch_gemm_cost").joinpath("data/op_costs.json").read_text())
    body = [
        [c, gpu, m["n"], m["mape_pct"], m["median_ape_pct"], m["mape_ge_0.1ms_pct"]]
        for c, per_gpu in doc["leave_chip_out"].items()
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


class HeldOutByChip:
    """Each device's GEMMs priced by a hybrid, and its non-GEMM ops by op costs, fitted on every
    measured GPU but the boards of its chip. ``cache`` keeps the fitted files between runs."""

    name = "hybrid (refitted without each chip)"

    def __init__(self, data_dir: Path, seed: int = 0, cache: Path | None = None) -> None:
        from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor

        self.data_dir, self.seed, self.cache = data_dir, seed, cache
        self.version = HybridPredictor.version
        self.gemm: dict[str, Any] = {}
        self.ops: dict[str, Any] = {}
        self._measured: Any = None

    def _path(self, kind: str, chip: str) -> Path | None:
        if self.cache is None:
            return None
        self.cache.mkdir(parents=True, exist_ok=True)
        return self.cache / f"{kind}-v{self.version}-seed{self.seed}-{chip}.json"

    def _gemm_model(self, chip: str) -> Any:
        from torch_gemm_cost.measured.gemm import load_all_gemms
        from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor
        from torch_gemm_cost.predict.gemm.roofline import impossible_rows

        if chip not in self.gemm:
            path = self._path("gemm", chip)
            if path is not None and path.is_file():
                self.gemm[chip] = HybridPredictor.load(path)
            else:
                if self._measured is None:
                    data = load_all_gemms(self.data_dir)
                    self._measured = data.select(~impossible_rows(data))
                keep = torch.tensor([chip_of(g) != chip for g in self._measured.gpu])
                model = HybridPredictor(seed=self.seed).fit(self._measured.select(keep))
                if path is not None:
                    model.save(path)
                self.gemm[chip] = model
        return self.gemm[chip]

    def op_costs(self, device: Any) -> Any:
        from torch_gemm_cost.train.ops import fit_op_costs

        chip = chip_of(device.id)
        if chip not in self.ops:
            path = self._path("ops", chip)
            if path is not None and path.is_file():
                doc = json.loads(path.read_text())
            else:
                doc = fit_op_costs(self.data_dir, exclude_chips=(chip,), metrics=False)
                if path is not None:
                    path.write_text(json.dumps(doc, indent=1))
            self.ops[chip] = OpCostModel.from_dict(doc)
        return self.ops[chip]

    def predict(self, gemms: Any, device: Any, **kw: Any) -> Any:
        return self._gemm_model(chip_of(device.id)).predict(gemms, device, **kw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / ".." / "shared" / "data")
    parser.add_argument(
        "--weights",
        type=Path,
        default=None,
        help="HybridPredictor weights (JSON); default: default_predictor()",
    )
    parser.add_argument("--held-out", action="store_true",
                        help="fit the GEMM predictor and the op costs without each row's chip "
                             "(about 15 minutes on two cores; --cache keeps the fits)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder for the held-out fits, reused when present")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/e2e_heldout.md with --held-out, "
                             "else benchmarks/results/e2e.md")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    op_costs = None
    if args.held_out:
        held = HeldOutByChip(args.data, cache=args.cache)
        predictor: Any = held
        op_costs = held.op_costs
    elif args.weights is not None:
        from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor

        predictor = HybridPredictor.load(args.weights)
    else:
        predictor = default_predictor()
    out = args.out or ROOT / "benchmarks" / "results" / (
        "e2e_heldout.md" if args.held_out else "e2e.md")
    results, wall_s = run(args.data, predictor, op_costs)
    command = "python benchmarks/e2e.py" + (f" --weights {args.weights}" if args.weights else "")
    command += " --held-out" if args.held_out else ""
    levels = own_gemm_levels(args.data, predictor, {r["gpu"] for r in results})
    text = render(results, predictor, wall_s, command, levels)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
