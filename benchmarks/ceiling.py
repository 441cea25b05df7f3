"""How far held-out accuracy can go on this data: the hybrid's fit against its transfer.

    python benchmarks/ceiling.py [--data ../shared/data] [--seed 0] [--threads 2] [--held-out LOCO.pt]

`accuracy.py` scores models that never saw the GPU. This asks what bounds that score. Four
measurements, one seed, about 6 minutes on two cores:

1. Fit and transfer. Per GPU: MAPE of the hybrid fitted on every GPU (in-sample) and of the
   hybrid fitted without any board of its chip (leave one chip out). A GPU the model cannot fit in-sample
   cannot be predicted better held out.
2. Oracle levels. The held-out predictions rescaled per (gpu, dtype) by their median
   pred/meas ratio: the error left if a held-out model knew each GPU's overall speed per
   precision, which none does. What remains is the error in how time varies with shape.
3. What a GPU's own rows reveal. A 5-nearest-neighbour fit in (log batch, m, n, k) on 4/5 of
   one GPU's rows, scored on the other 1/5: no physics, only that GPU's measurements. Where it
   beats the hybrid's in-sample fit, the GPU has shape structure of its own (kernel choices,
   throttling) that its rows reveal and the other GPUs' rows do not.
4. Do the shape errors transfer? The correlation, between two GPUs, of the held-out log errors
   on the shapes both timed (NeuSight's `neusight-test` shapes). Near zero: what the model gets
   wrong on one GPU says nothing about another, so no shared model can learn it from the others.

``--held-out`` takes the leave-one-chip-out predictions ``accuracy.py --save-predictions`` saved
(same rows, same seed) instead of fitting them again. Writes ``benchmarks/results/ceiling.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from accuracy import per_gpu

from torch_gemm_cost.measured.gemm import MeasuredGemms
from torch_gemm_cost.predict.gemm.hybrid import HybridPredictor
from torch_gemm_cost.train.gemm import leave_one_chip_out
from torch_gemm_cost.train.intervals import held_out_rows

RESULTS = ROOT / "benchmarks" / "results" / "ceiling.md"
SHARED_SOURCE = "neusight-test"


def oracle_levels(data: MeasuredGemms, pred_ms: torch.Tensor) -> torch.Tensor:
    """``pred_ms`` divided, within each (gpu, dtype), by that group's median pred/meas."""
    out = pred_ms.clone()
    log_ratio = torch.log(pred_ms / data.latency_ms)
    dtype = data.gemms.dtype_index
    for gpu in sorted(set(data.gpu)):
        on_gpu = data.mask(gpu=gpu)
        for d in torch.unique(dtype[on_gpu]).tolist():
            m = on_gpu & (dtype == d)
            out[m] = pred_ms[m] / torch.exp(log_ratio[m].median())
    return out


def knn_own_rows(data: MeasuredGemms, *, folds: int = 5, k: int = 5, seed: int = 0) -> torch.Tensor:
    """Each row predicted from its k nearest rows of the same GPU and dtype in the other folds.

    Distance is Euclidean in log2(batch, m, n, k); the prediction is the row's FLOPs at the
    inverse-distance-weighted mean log rate (FLOPs per ms) of its neighbours."""
    g = data.gemms
    x = torch.stack([t.double().clamp(min=1).log2() for t in (g.batch, g.m, g.n, g.k)], dim=1)
    log_flops = g.flops.double().log()
    log_rate = log_flops - data.latency_ms.double().log()
    pred = torch.empty(len(data), dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    for gpu in sorted(set(data.gpu)):
        idx = torch.nonzero(data.mask(gpu=gpu)).flatten()
        fold = torch.randint(0, folds, (len(idx),), generator=gen)
        for f in range(folds):
            test, train = idx[fold == f], idx[fold != f]
            # test rows in chunks: a (chunk, train) distance matrix, not (test, train)
            for te in test.split(2048):
                dist = torch.cdist(x[te], x[train])
                # another dtype is never a neighbour while any row of the same dtype remains
                dist += 1e3 * (g.dtype_index[te][:, None] != g.dtype_index[train][None, :])
                d_k, i_k = dist.topk(min(k, len(train)), largest=False)
                w = 1.0 / (d_k + 0.05)
                rate = (w * log_rate[train][i_k]).sum(dim=1) / w.sum(dim=1)
                pred[te] = torch.exp(log_flops[te] - rate)
    return pred


def residual_correlation(data: MeasuredGemms, pred_ms: torch.Tensor
                         ) -> tuple[list[str], list[list[str]]]:
    """Pairwise correlation of log(pred/meas) over the shapes two GPUs both timed."""
    g = data.gemms
    resid = torch.log(pred_ms / data.latency_ms).tolist()
    by_gpu: dict[str, dict[tuple, float]] = {}
    for i in torch.nonzero(data.mask(source=SHARED_SOURCE)).flatten().tolist():
        key = (int(g.dtype_index[i]), int(g.batch[i]), int(g.m[i]), int(g.n[i]), int(g.k[i]),
               int(g.b_transposed[i]), int(g.bias[i]))
        by_gpu.setdefault(data.gpu[i], {})[key] = resid[i]
    gpus = sorted(by_gpu)
    table = []
    for a in gpus:
        row = [a]
        for b in gpus:
            keys = sorted(set(by_gpu[a]) & set(by_gpu[b]))
            if a == b or len(keys) < 50:
                row.append("-")
                continue
            ra = torch.tensor([by_gpu[a][key] for key in keys])
            rb = torch.tensor([by_gpu[b][key] for key in keys])
            row.append(f"{float(torch.corrcoef(torch.stack([ra, rb]))[0, 1]):+.2f}")
        table.append(row)
    return gpus, table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / ".." / "shared" / "data"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--held-out", default=None,
                    help="leave-one-chip-out predictions of the same seed saved by accuracy.py "
                         "--save-predictions, instead of fitting them again")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    data, saved = held_out_rows(args.data, args.held_out)
    y = data.latency_ms
    t0 = time.perf_counter()
    fitted = HybridPredictor(seed=args.seed).fit(data)
    in_sample = fitted.predict_measured(data)
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    held_out = saved if saved is not None else leave_one_chip_out(
        data, lambda s: HybridPredictor(seed=s), seeds=(args.seed,))
    t_logo = time.perf_counter() - t0
    oracle = oracle_levels(data, held_out)
    knn = knn_own_rows(data, seed=args.seed)

    cols = {"in-sample": per_gpu(data, in_sample), "held out": per_gpu(data, held_out),
            "held out, oracle levels": per_gpu(data, oracle), "own-rows kNN": per_gpu(data, knn)}
    gpus = sorted(set(data.gpu))
    means = {name: sum(v.values()) / len(v) for name, v in cols.items()}
    rows = [[gpu, int(data.mask(gpu=gpu).sum())] + [f"{cols[c][gpu]:.1%}" for c in cols]
            for gpu in gpus]
    rows.append(["mean over GPUs", len(data)] + [f"{means[c]:.1%}" for c in cols])
    names, corr = residual_correlation(data, held_out)
    median_ape = float(torch.median((held_out - y).abs() / y))

    lines = [
        "# How far held-out accuracy can go on this data",
        "",
        "Produced by `" + " ".join(["python benchmarks/ceiling.py",
                                    *(argv if argv is not None else sys.argv[1:])]) + "`. "
        f"Hybrid seed {args.seed}; {len(data)} rows (impossible rows dropped); fit on every GPU "
        f"{t_fit:.0f} s, leave-one-chip-out "
        + (f"{t_logo:.0f} s" if saved is None else f"read from `{Path(args.held_out).name}`")
        + ". Data: NeuSight (MIT), vidur (MIT), "
        "LLMCompass (BSD-3), DeepBench (Apache-2.0), XLA performance tables (Apache-2.0), aiconfigurator (Apache-2.0), this project's H200 rows.",
        "",
        ("MAPE per GPU; the last row averages the GPUs, each counting once, as `accuracy.py` "
        "does. `in-sample`: the hybrid fitted on every GPU. `held out`: fitted without any board of the GPU's chip "
        f"(median APE over all rows {median_ape:.1%}). `oracle levels`: the held-out "
        "predictions rescaled per (gpu, dtype) by their median pred/meas, which no held-out "
        "model knows. `own-rows kNN`: 5-fold nearest neighbours within one GPU's own rows, "
        "no physics."),
        "",
        tabulate(rows, headers=["gpu", "rows", *cols], tablefmt="github"),
        "",
        "## Reading it",
        "",
        (f"- The hybrid fits the {len(rows) - 1} GPUs to {means['in-sample']:.1%} in-sample and transfers "
        f"at {means['held out']:.1%}. A held-out mean under a target needs an in-sample mean "
        "under it by at least the transfer gap."),
        (f"- Knowing every held-out GPU's level per precision would only bring the held-out "
        f"mean to {means['held out, oracle levels']:.1%}: the rest is how time varies with "
        "shape on that GPU."),
        ("- Where `own-rows kNN` is well below `in-sample`, that GPU's time varies with shape "
        "in ways its own rows show (library kernel choices, throttling on long calls) and a "
        "model shared across GPUs does not capture. The correlations below say whether the "
        "other GPUs could teach it."),
        "",
        f"## Held-out log errors, correlated between GPUs on shared shapes (`{SHARED_SOURCE}`)",
        "",
        ("Pearson correlation of log(pred/meas) over the GEMMs (dtype, batch, m, n, k, layout, "
        "bias) both GPUs timed; `-` where fewer than 50 shapes are shared."),
        "",
        tabulate(corr, headers=["gpu", *names], tablefmt="github"),
        "",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
