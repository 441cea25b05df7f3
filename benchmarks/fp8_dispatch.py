"""vLLM's fp8 GEMMs on Ada (sm_89): the CUTLASS configuration vLLM dispatches per shape, and how
the GEMM predictor does on each.

    python benchmarks/fp8_dispatch.py [--data ../shared/data] [--held-out LOCO.pt]

aiconfigurator's fp8 rows on an sm_89 GPU (the L40S) run vLLM's CUTLASS 2.x scaled-mm kernel,
whose tile and pipeline depth vLLM picks from the shape alone
(``csrc/quantization/cutlass_w8a8/scaled_mm_c2x_sm89_fp8_dispatch.cuh``, vllm-project/vllm,
Apache-2.0): a bucket of M (its next power of two, at least 32) and, inside it, a bucket of
N's next power of two. ``SM89_FP8`` restates that table as data. Rows of 0.01 ms or more are
grouped by the configuration that ran them and scored:

- **measured**: the median TFLOP/s of the group (the data alone);
- **in-sample**: the shipped GEMM predictor (every GPU in its fit, the L40S included);
- **held out**: predictions made with the GPU's chip left out of the fit (``--held-out``: a
  file written by ``benchmarks/accuracy.py --save-predictions``), where given.

Last, what knowing the configuration could buy at most: the MAPE left after dividing each
row's prediction by its group's median predicted/measured ratio (one constant per
configuration, and per configuration and K bucket), fitted on the scored rows themselves. The
predictor does not use this table. Writes ``benchmarks/results/fp8_dispatch.md``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results"

from accuracy import held_out_main

from torch_gemm_cost.predict import shipped_hybrid

SOURCE = "aiconfigurator"
DTYPE = "float8_e4m3fn"
CAPABILITY = "8.9"
MIN_MS = 0.01
K_EDGES: tuple[int, ...] = (1024, 4096)  # K buckets: <= 1024, <= 4096, above


@dataclass(frozen=True)
class Sm89Config:
    """One CUTLASS configuration of vLLM's sm_89 fp8 dispatch: its tile (M × N × K) and the
    number of pipeline stages."""

    tile_m: int
    tile_n: int
    tile_k: int
    stages: int

    @property
    def name(self) -> str:
        return f"{self.tile_m}x{self.tile_n}x{self.tile_k}, {self.stages} stages"


# (largest M bucket, [(largest next_pow_2(N), configuration), ...]); the last N entry has no
# upper bound. vLLM rounds M up to a power of two of at least 32, so every M ≤ 32 runs the (16, 32]
# configurations. NB: its (32, 64] bucket compares next_pow_2(N) with 8196, not 8192.
SM89_FP8: tuple[tuple[int, tuple[tuple[int, Sm89Config], ...]], ...] = (
    (32, ((8192, Sm89Config(32, 64, 128, 5)), (16384, Sm89Config(32, 128, 128, 4)),
          (0, Sm89Config(32, 64, 128, 5)))),
    (64, ((8196, Sm89Config(64, 64, 128, 5)), (16384, Sm89Config(64, 128, 128, 3)),
          (0, Sm89Config(64, 64, 128, 5)))),
    (128, ((8192, Sm89Config(64, 128, 128, 3)), (16384, Sm89Config(128, 128, 64, 5)),
           (0, Sm89Config(128, 64, 128, 3)))),
    (256, ((4096, Sm89Config(64, 128, 128, 3)), (0, Sm89Config(128, 128, 64, 5)))),
    (0, ((4096, Sm89Config(128, 128, 64, 5)), (8192, Sm89Config(256, 128, 64, 3)),
         (0, Sm89Config(128, 128, 64, 5)))),
)


def next_pow_2(x: int) -> int:
    """The smallest power of two at least ``x`` (1 for x ≤ 1).

    >>> [next_pow_2(x) for x in (1, 2, 3, 4096, 4097)]
    [1, 2, 4, 4096, 8192]
    """
    return 1 << max(int(x) - 1, 0).bit_length()


def _buckets() -> tuple[tuple[str, int, int, Sm89Config], ...]:
    """``SM89_FP8`` flattened in its order: (label, largest M bucket, largest next_pow_2(N),
    configuration), 0 standing for no upper bound."""
    out = []
    lower_m = 0
    for upper_m, by_n in SM89_FP8:
        m_label = f"M in ({lower_m}, {upper_m}]" if upper_m else f"M > {lower_m}"
        lower_n = 0
        for upper_n, config in by_n:
            n_label = f"N' in ({lower_n}, {upper_n}]" if upper_n else f"N' > {lower_n}"
            out.append((f"{m_label}, {n_label}", upper_m, upper_n, config))
            lower_n = upper_n
        lower_m = upper_m
    return tuple(out)


BUCKETS = _buckets()


def sm89_fp8_config(m: int, n: int) -> tuple[str, Sm89Config]:
    """(the bucket's label, the configuration) vLLM dispatches for an M × N output on sm_89:
    the first bucket of ``BUCKETS`` that holds M rounded up (to a power of two, at least 32)
    and N's next power of two."""
    mp2, np2 = max(32, next_pow_2(m)), next_pow_2(n)
    for label, upper_m, upper_n, config in BUCKETS:
        if (upper_m == 0 or mp2 <= upper_m) and (upper_n == 0 or np2 <= upper_n):
            return label, config
    raise AssertionError("unreachable: the last buckets have no upper bound")


def mape(ratio: Sequence[float]) -> float:
    """Mean |ratio − 1| in percent, for predicted/measured ratios."""
    return 100.0 * statistics.fmean(abs(r - 1.0) for r in ratio)


def one_factor_mape(ratio: Sequence[float], groups: Sequence[object]) -> float:
    """MAPE (%) after dividing every ratio by its group's median ratio: what one constant per
    group, fitted on these rows, could reach at best.

    >>> one_factor_mape([2.0, 2.0, 1.0, 1.0], ["a", "a", "b", "b"])
    0.0
    """
    members: dict[object, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = list(ratio)
    for idx in members.values():
        med = statistics.median(ratio[i] for i in idx)
        for i in idx:
            out[i] = ratio[i] / med
    return mape(out)


def k_bucket(k: int) -> str:
    """The K bucket of the bound: "K <= 1024", "K <= 4096" or "K > 4096"."""
    for edge in K_EDGES:
        if k <= edge:
            return f"K <= {edge}"
    return f"K > {K_EDGES[-1]}"


K_ORDER = {k_label: i for i, k_label in enumerate(
    [f"K <= {edge}" for edge in K_EDGES] + [f"K > {K_EDGES[-1]}"])}


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    args, measured, held = held_out_main(__doc__ or "", RESULTS / "fp8_dispatch.md", argv)
    g = measured.gemms
    names = g.dtype_names()
    keep = torch.tensor([s == SOURCE and d == DTYPE
                         and measured.device(gpu).compute_capability == CAPABILITY
                         for s, d, gpu in zip(measured.source, names, measured.gpu)]) \
        & (measured.latency_ms >= MIN_MS)
    if not bool(keep.any()):
        raise SystemExit(f"no {SOURCE} {DTYPE} rows of {MIN_MS} ms or more on an sm_{CAPABILITY}"
                         f" GPU under {args.data}")
    sub = measured.select(keep)
    meas = sub.latency_ms.tolist()
    priced = {"in-sample": shipped_hybrid().predict_measured(sub).to(torch.float64).tolist()}
    if held is not None:
        priced["held out"] = held[keep].tolist()
    ms, ns, ks = (sub.gemms.m.long().tolist(), sub.gemms.n.long().tolist(),
                  sub.gemms.k.long().tolist())
    flops = (2.0 * sub.gemms.batch * sub.gemms.m * sub.gemms.n * sub.gemms.k).tolist()
    labels = [sm89_fp8_config(m, n)[0] for m, n in zip(ms, ns)]
    ratios = {name: [p / y for p, y in zip(pred, meas)] for name, pred in priced.items()}

    def tflops(idx: list[int]) -> str:
        return f"{statistics.median(flops[i] / (meas[i] * 1e-3) / 1e12 for i in idx):.0f}"

    def scored(idx: list[int]) -> list[str]:
        out = []
        for r in ratios.values():
            out += [f"{mape([r[i] for i in idx]):.1f}%",
                    f"{statistics.median(r[i] for i in idx):.2f}"]
        return out

    order = {label: i for i, (label, *_) in enumerate(BUCKETS)}
    config_of = {label: config for label, _, _, config in BUCKETS}
    by_bucket: dict[str, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        by_bucket[label].append(i)
    pred_headers = [h for name in priced for h in (f"{name} MAPE", f"{name} pred/meas")]
    rows = [[label, config_of[label].name, len(idx), tflops(idx), *scored(idx)]
            for label, idx in sorted(by_bucket.items(), key=lambda kv: order[kv[0]])]
    gpus = ", ".join(sorted(set(sub.gpu)))
    command = " ".join(["python benchmarks/fp8_dispatch.py",
                        *(sys.argv[1:] if argv is None else argv)])
    lines = [
        "# vLLM's fp8 GEMMs on Ada: the configuration vLLM dispatches, and the predictor on each",
        "",
        (f"Command: `{command}` ({time.perf_counter() - t0:.0f} s on one CPU thread). Data: "
         f"aiconfigurator's {DTYPE} rows (`gemm/aiconfigurator.csv.gz`, ai-dynamo/"
         "aiconfigurator, Copyright NVIDIA, Apache-2.0) on the sm_89 GPUs measured "
         f"({gpus}), {MIN_MS} ms or more: {len(sub)} rows. The configuration is vLLM's "
         "(`csrc/quantization/cutlass_w8a8/scaled_mm_c2x_sm89_fp8_dispatch.cuh`, "
         "vllm-project/vllm, Apache-2.0); N' is N's next power of two, and M is rounded up to "
         "a power of two of at least 32. **in-sample**: the shipped predictor (the GPU in its "
         "fit)" + (f"; **held out**: the GPU's chip left out of the fit (`{args.held_out.name}`)."
                  if held is not None else ".") + " MAPE over the group's rows; pred/meas "
         "its median ratio."), "",
        "## Per dispatched configuration", "",
        tabulate(rows, ["vLLM's bucket", "configuration", "rows", "measured TFLOP/s",
                        *pred_headers], tablefmt="github"), "",
    ]
    big = [i for i, label in enumerate(labels) if label.startswith("M > ")]
    split: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in big:
        split[(labels[i], k_bucket(ks[i]))].append(i)
    lines += [
        "## M > 256 by K", "",
        ("The same rows of the M > 256 bucket split by K: a short K leaves a tile little "
         "work beside its prologue and epilogue."), "",
        tabulate([[label, config_of[label].name, kb, len(idx), tflops(idx), *scored(idx)]
                  for (label, kb), idx in sorted(
                      split.items(), key=lambda kv: (order[kv[0][0]], K_ORDER[kv[0][1]]))],
                 ["vLLM's bucket", "configuration", "K", "rows", "measured TFLOP/s",
                  *pred_headers],
                 tablefmt="github"), "",
    ]
    bound_rows = []
    for name, r in ratios.items():
        by_k = [(label, k_bucket(k)) for label, k in zip(labels, ks)]
        bound_rows.append([name, f"{mape(r):.1f}%", f"{one_factor_mape(r, labels):.1f}%",
                           f"{one_factor_mape(r, by_k):.1f}%"])
    lines += [
        "## What knowing the configuration could buy", "",
        ("Each row's prediction divided by its group's median predicted/measured ratio, the "
         "constants fitted on these very rows (so a bound, in-sample for every predictor): "
         "one per configuration, then one per configuration and K bucket "
         f"({', '.join(dict.fromkeys(k_bucket(k) for k in (1, 2048, 8192)))})."), "",
        tabulate(bound_rows, ["predictor", "MAPE", "one constant per configuration",
                              "per configuration and K bucket"], tablefmt="github"), "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
