"""Fit the collective model's shared physical constants on measured NCCL collectives.

The data (``comm/`` of the measured-data bundle; DATA.md has the schema):

- ``vidur.csv.gz``, Vidur's profiling (microsoft/vidur, MIT License, Copyright (c) Microsoft
  Corporation): ``all_reduce`` and ``send_recv`` through ``torch.distributed`` on A100-SXM4-80GB
  in DGX nodes (1 or 2 nodes) and in NVLink pairs, and A40 NVLink pairs; the NCCL kernel's
  duration on rank 0 in a profiler trace (median).
- ``aiconfigurator.csv.gz`` (ai-dynamo/aiconfigurator, Apache-2.0, Copyright NVIDIA Corporation):
  nccl-tests ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``alltoall`` in one node of 2, 4
  or 8 A100-SXM4-80GB, H200, B200 or L40S, fp16 and int8, 512 B to 512 MiB; the out-of-place time.

Vidur's sizes are corrected as they are read (``measured.comm``).

    python -m torch_gemm_cost.train.collectives [--data ../shared/data] \\
        [--out torch_gemm_cost/data/collective_weights.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..measured.comm import CommRow, load_comm, to_calls
from ..predict.collectives import CollectivePredictor

__all__ = [
    "SMALL_BYTES",
    "fit_collectives",
    "leave_one_gpu_out",
    "main",
    "score",
]

log = logging.getLogger(__name__)

SMALL_BYTES = 64 * 1024  # accuracy is reported for messages of 64 KiB or more, smaller apart
DATA_SOURCES = [
    {"source": "vidur", "project": "Vidur (microsoft/vidur) collective profiling",
     "license": "MIT", "copyright": "Copyright (c) Microsoft Corporation"},
    {"source": "aiconfigurator", "project": "AIConfigurator (ai-dynamo/aiconfigurator) "
     "nccl-tests sweeps", "license": "Apache-2.0", "copyright": "Copyright NVIDIA Corporation"},
]


def fit_collectives(rows: Sequence[CommRow], **hyper: Any) -> CollectivePredictor:
    calls, devices, kept, _ = to_calls(rows)
    return CollectivePredictor(**hyper).fit(calls, devices, [rows[i].latency_ms for i in kept])


def leave_one_gpu_out(rows: Sequence[CommRow], gpus: Iterable[str] | None = None,
                      **hyper: Any) -> dict[int, float]:
    """Row index -> time predicted by a model fitted without that row's GPU."""
    calls, devices, kept, _ = to_calls(rows)
    out: dict[int, float] = {}
    for gpu in sorted(set(gpus or {rows[i].gpu for i in kept})):
        train = [j for j, i in enumerate(kept) if rows[i].gpu != gpu]
        test = [j for j, i in enumerate(kept) if rows[i].gpu == gpu]
        if not test:
            continue
        model = CollectivePredictor(**hyper).fit([calls[j] for j in train],
                                                 [devices[j] for j in train],
                                                 [rows[kept[j]].latency_ms for j in train])
        pred = model.predict([calls[j] for j in test], [devices[j] for j in test]).time_ms
        out.update({kept[j]: float(p) for j, p in zip(test, pred.tolist())})
    return out


def score(pairs: Sequence[tuple[float, float]]) -> dict[str, float]:
    """rows, MAPE %, median APE %, median pred/meas of (predicted, measured) pairs."""
    if not pairs:
        return {"rows": 0, "mape_pct": float("nan"), "median_ape_pct": float("nan"),
                "median_ratio": float("nan")}
    ape = [abs(p - m) / m * 100 for p, m in pairs]
    return {"rows": len(pairs), "mape_pct": statistics.fmean(ape),
            "median_ape_pct": statistics.median(ape),
            "median_ratio": statistics.median(p / m for p, m in pairs)}


def in_sample_all_reduce(rows: Sequence[CommRow], predict: Callable[[list[int]], list[float]]
                         ) -> dict[str, Any]:
    """MAPE of all-reduces of SMALL_BYTES or more, per GPU and over all of them."""
    _, _, kept, _ = to_calls(rows)
    big = [i for i in kept if rows[i].collective == "all_reduce"
           and rows[i].size_bytes >= SMALL_BYTES]
    pred = dict(zip(big, predict(big)))
    per_gpu = {g: score([(pred[i], rows[i].latency_ms) for i in big if rows[i].gpu == g])
               for g in sorted({rows[i].gpu for i in big})}
    return {"all_reduce_ge_64KiB": {g: round(m["mape_pct"], 4) for g, m in per_gpu.items()},
            "all_reduce_ge_64KiB_all_rows": round(
                score([(pred[i], rows[i].latency_ms) for i in big])["mape_pct"], 4)}


def main(argv: Sequence[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(root / ".." / "shared" / "data"))
    parser.add_argument("--out", default=str(root / "torch_gemm_cost" / "data" /
                                             "collective_weights.json"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = load_comm(args.data)
    calls, devices, kept, skipped = to_calls(rows)
    t0 = time.perf_counter()
    model = fit_collectives(rows, seed=args.seed)
    seconds = time.perf_counter() - t0

    def predict(idx: list[int]) -> list[float]:
        by_row = dict(zip(kept, zip(calls, devices)))
        return model.predict([by_row[i][0] for i in idx], [by_row[i][1] for i in idx]
                             ).time_ms.tolist()

    metadata = {
        "description": "torch_gemm_cost collective model: NCCL ring/tree/NVLS costs from the "
                       "catalog's link bandwidths, shared physical constants",
        "data_sources": DATA_SOURCES,
        "vidur_size_correction": "true bytes = the bundle's size_elements (its size_bytes is "
                                 "twice the buffer); see torch_gemm_cost/measured/comm.py",
        "training_command": "python -m torch_gemm_cost.train.collectives --data ../shared/data "
                            f"--out torch_gemm_cost/data/collective_weights.json --seed {args.seed}",
        "trained_gpus": sorted({rows[i].gpu for i in kept}),
        "measured_rows": len(rows),
        "priced_rows": len(kept),
        "trained_rows": model.n_train_rows_,
        "not_priced": skipped,
        "train_seconds": round(seconds, 1),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "in_sample": in_sample_all_reduce(rows, predict),
    }
    model.save(args.out, metadata)
    print(json.dumps({"physical_constants": model.physical_constants(),
                      "in_sample": metadata["in_sample"], "not_priced": skipped}, indent=1))
    print(f"wrote {args.out} ({seconds:.1f} s fit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
