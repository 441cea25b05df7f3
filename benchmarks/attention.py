"""Accuracy of the fused-attention model on GPUs it never saw, beside the pure roofline and the
in-sample fit. Writes benchmarks/results/attention.md.

    python benchmarks/attention.py [--data ../shared/data] [--steps 500]

Each of the four GPUs in the attention data (A100-SXM4-80GB, H200, B200, L40S: four chips) is
held out in turn: a model fitted on the other three predicts its rows. Scores are per
(gpu, phase, KV dtype) over calls of 0.01 ms or more; calls under 0.01 ms are scored apart. The
roofline (max of needed FLOPs over the datasheet peak and compulsory bytes over the datasheet
DRAM bandwidth, nothing fitted) is computed in the same run. The last section measures, from the
data alone, the effects the shared model does not capture.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.measured.attention import KERNEL_OF, MeasuredAttention, load_attention
from torch_gemm_cost.predict.attention import (
    AttentionPredictor,
    AttentionRoofline,
    attention_bytes,
    attention_flops,
)
from torch_gemm_cost.train.attention import (
    MIN_MS,
    AttentionScore,
    fit_attention_intervals,
    leave_one_gpu_out,
    score_attention,
)

log = logging.getLogger("attention")
TARGET = 0.15



def boost_hz(gpu: str) -> float:
    """The catalog's boost clock of ``gpu`` in Hz (every GPU of the attention data has one)."""
    mhz = get_device(gpu).boost_clock_mhz
    if mhz is None:
        raise ValueError(f"{gpu} has no boost clock in the catalog")
    return mhz * 1e6

def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def by_key(scores: Sequence[AttentionScore]) -> dict[tuple[str, str, str], AttentionScore]:
    return {(s.gpu, s.phase, s.kv_dtype): s for s in scores}


def phase_mape(measured: MeasuredAttention, pred: torch.Tensor, gpu: str, phase: str
               ) -> tuple[int, float]:
    """Rows and MAPE of one GPU's phase, calls of MIN_MS or more, both KV dtypes pooled."""
    m = measured.mask(gpu=gpu, phase=phase) & (measured.latency_ms >= MIN_MS)
    ape = (pred[m] - measured.latency_ms[m]).abs() / measured.latency_ms[m]
    return int(m.sum()), float(ape.mean())


def median(xs: torch.Tensor) -> float:
    return float(xs.median()) if len(xs) else float("nan")


# ---------------------------------------------------------------- measured evidence
def evidence(measured: MeasuredAttention) -> dict[str, list[list[Any]]]:
    """Tables of what the data shows per GPU and kernel, with no model in them."""
    c = measured.calls
    y = measured.latency_ms
    flops = attention_flops(c)
    traffic = attention_bytes(c)["compulsory_bytes"]
    kernel_of = measured.kernel
    keys = sorted(set(zip(measured.gpu, kernel_of, measured.kv_dtype)))
    out: dict[str, list[list[Any]]] = {"prefill": [], "decode_bw": [], "decode_cta": [],
                                        "floor": []}
    for gpu, kernel, kv in keys:
        spec = get_device(gpu)
        m = (measured.mask(gpu=gpu, kernel=kernel, kv_dtype=kv))
        # large causal prefill, many heads: the compute roof
        big = m & (c.decode == 0) & (c.q_len >= 8192) & (c.batch * c.heads >= 64) & (c.window == 0)
        for d in sorted(set(c.head_dim[big].tolist())):
            sel = big & (c.head_dim == d)
            tflops = flops[sel] / y[sel] / 1e9
            peak = spec.peak_flops_per_s("bfloat16") / 1e12
            sm_cycles_per_s = spec.sm_count * boost_hz(gpu)
            out["prefill"].append([gpu, kernel, kv, int(d), int(sel.sum()),
                                   f"{median(tflops):.0f}", f"{median(tflops) / peak:.2f}",
                                   f"{median(tflops) * 1e12 / sm_cycles_per_s:.0f}",
                                   f"{peak * 1e12 / sm_cycles_per_s:.0f}"])
        # large decode: the DRAM roof
        sel = m & (c.decode > 0) & (traffic >= 5e8)
        if sel.any():
            gbs = traffic[sel] / y[sel] / 1e6
            out["decode_bw"].append([gpu, kernel, kv, int(sel.sum()), f"{median(gbs):.0f}",
                                     f"{median(gbs) / (spec.dram_bw_bytes_per_s / 1e9):.2f}"])
        # decode with almost no KV at the largest batch: the cost of one (sequence, KV head)
        sel = m & (c.decode > 0) & (c.kv_len <= 16) & (c.batch == 2048) & (c.window == 0)
        if sel.any():
            units = c.batch[sel] * c.kv_heads[sel]
            per_unit_us = y[sel] * 1e3 / units * spec.sm_count
            out["decode_cta"].append([gpu, kernel, kv, int(sel.sum()),
                                      f"{median(per_unit_us):.2f}"])
        out["floor"].append([gpu, kernel, kv, int(m.sum()), f"{float(y[m].min()) * 1e3:.1f}",
                             f"{float(y[m].quantile(0.05)) * 1e3:.1f}"])
    return out


def triton_pairs(measured: MeasuredAttention) -> list[list[Any]]:
    """vLLM's Triton kernel on the B200 and the L40S, identical calls: the median of the
    B200's time over the L40S's per (phase, window, query length), beside the ratio of their
    SM-cycles a second (the L40S's over the B200's)."""
    c = measured.calls
    gpus = ("b200", "l40s")
    specs = [get_device(g) for g in gpus]
    cycles = [d.sm_count * boost_hz(g) / 1e6 for g, d in zip(gpus, specs)]
    keyed: list[dict[tuple[float, ...], float]] = []
    for gpu in gpus:
        sel = torch.nonzero(measured.mask(gpu=gpu, kernel="vllm_triton_attn")).flatten().tolist()
        keyed.append({(float(c.decode[i]), float(c.window[i]), float(c.batch[i]),
                       float(c.q_len[i]), float(c.kv_len[i]), float(c.heads[i]),
                       float(c.kv_heads[i]), float(c.head_dim[i]), float(c.kv_bytes[i])):
                      float(measured.latency_ms[i]) for i in sel})
    bins = ((1, 1), (2, 128), (129, 1024), (1025, 8192), (8193, 10**9))
    rows = []
    for decode in (0.0, 1.0):
        for window in sorted({k[1] for k in keyed[0]}):
            for lo, hi in bins if decode == 0 else ((1, 1),):
                ratios = torch.tensor([t / keyed[1][k] for k, t in keyed[0].items()
                                       if k in keyed[1] and k[0] == decode and k[1] == window
                                       and lo <= k[3] <= hi], dtype=torch.float64)
                if len(ratios):
                    rows.append(["decode" if decode else "prefill", int(window),
                                 str(lo) if lo == hi else f"{lo}+" if hi >= 10**9
                                 else f"{lo}-{hi}", len(ratios),
                                 f"{median(ratios):.2f}", f"{cycles[1] / cycles[0]:.2f}"])
    return rows


def window_packing(measured: MeasuredAttention) -> list[list[Any]]:
    """Decode at batch 128, 32 query heads, 1024 keys: time against kv_heads, window or not."""
    c = measured.calls
    rows = []
    for gpu in sorted(set(measured.gpu)):
        for kv in sorted(set(measured.kv_dtype)):
            for w in (0, 128):
                base = (measured.mask(gpu=gpu, kv_dtype=kv) & (c.decode > 0) & (c.batch == 128)
                        & (c.heads == 32) & (c.kv_len == 1024) & (c.head_dim == 128)
                        & (c.window == w))
                if not base.any():
                    continue
                times = []
                for kvh in (1, 2, 4, 8):
                    sel = base & (c.kv_heads == kvh)
                    times.append(f"{median(measured.latency_ms[sel]):.4f}" if sel.any() else "-")
                kern = measured.kernel[int(torch.nonzero(base)[0])]
                rows.append([gpu, kern, kv, w, *times])
    return rows


def gqa_copy_step(measured: MeasuredAttention, held: torch.Tensor) -> list[list[Any]]:
    """FlashAttention 2 decode of at most 16 keys, d = 128, no window: median µs at batch 1 and
    at batches 2-8 per KV-head layout, the step between them in µs and in SM clocks, and the
    held-out median pred/meas at batches 2-8."""
    c = measured.calls
    rows = []
    layouts = (("kv_heads = heads", c.kv_heads == c.heads),
               ("kv_heads = 1 < heads", (c.kv_heads == 1) & (c.heads > 1)),
               ("1 < kv_heads < heads", (c.kv_heads > 1) & (c.kv_heads < c.heads)))
    for gpu, kern in sorted(set(zip(measured.gpu, measured.kernel))):
        if KERNEL_OF[kern] != "fa2":
            continue
        base = (measured.mask(gpu=gpu, kernel=kern) & (c.decode > 0) & (c.kv_len <= 16)
                & (c.head_dim == 128) & (c.window == 0))
        clock_hz = boost_hz(gpu)
        for name, layout in layouts:
            one = base & layout & (c.batch == 1)
            few = base & layout & (c.batch >= 2) & (c.batch <= 8)
            if not (one.any() and few.any()):
                continue
            t1 = median(measured.latency_ms[one]) * 1e3
            t2 = median(measured.latency_ms[few]) * 1e3
            ratio = median(held[few] / measured.latency_ms[few])
            rows.append([gpu, kern, name, int(one.sum()), f"{t1:.1f}", int(few.sum()),
                         f"{t2:.1f}", f"{t2 - t1:+.1f}", f"{(t2 - t1) * 1e-6 * clock_hz:+,.0f}",
                         f"{ratio:.2f}"])
    return rows


def cache_write_growth(measured: MeasuredAttention, insample: torch.Tensor,
                       cache_ms: torch.Tensor) -> list[list[Any]]:
    """Causal prefill of 8 x 4096 tokens, 32 query heads, d = 128: measured ms against kv_heads,
    and at 32 KV heads the in-sample prediction and its KV-cache write."""
    c = measured.calls
    rows = []
    for gpu, kern, kv in sorted(set(zip(measured.gpu, measured.kernel, measured.kv_dtype))):
        base = (measured.mask(gpu=gpu, kernel=kern, kv_dtype=kv) & (c.decode == 0)
                & (c.batch == 8) & (c.q_len == 4096) & (c.heads == 32) & (c.head_dim == 128)
                & (c.window == 0))
        if not base.any():
            continue
        times = []
        for kvh in (1, 8, 32):
            sel = base & (c.kv_heads == kvh)
            times.append(f"{median(measured.latency_ms[sel]):.3f}" if sel.any() else "-")
        top = base & (c.kv_heads == 32)
        rows.append([gpu, kern, kv, *times,
                     f"{median(insample[top]):.3f}" if top.any() else "-",
                     f"{median(cache_ms[top]):.3f}" if top.any() else "-"])
    return rows


LEVELS = (0.5, 0.8, 0.95)


def interval_rows(measured: MeasuredAttention, held: torch.Tensor) -> list[list[Any]]:
    """Nested interval scores: each GPU's held-out predictions get bounds from a calibration
    (``fit_attention_intervals``) fitted on the other GPUs' held-out residuals only; per GPU
    and phase, coverage and median hi/lo at each of ``LEVELS``."""
    out = []
    for gpu in sorted(set(measured.gpu)):
        mine = measured.mask(gpu=gpu)
        cal = fit_attention_intervals(measured.select(~mine), held[~mine])
        sub = measured.select(mine)
        for phase in ("prefill", "decode"):
            keep = torch.tensor([p == phase for p in sub.phase])
            t, y = held[mine][keep], sub.latency_ms[keep]
            row: list[Any] = [gpu, phase, int(keep.sum())]
            for level in LEVELS:
                lo, hi = cal.bounds(t, sub.calls.decode[keep], level)
                row += [pct(float(((y >= lo) & (y <= hi)).double().mean())),
                        f"{float((hi / lo).median()):.2f}"]
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / ".." / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "attention.md"))
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    t_start = time.perf_counter()

    measured = load_attention(args.data)
    gpus = sorted(set(measured.gpu))

    def make() -> AttentionPredictor:
        return AttentionPredictor(steps=args.steps)

    t0 = time.perf_counter()
    held, fold_models = leave_one_gpu_out(measured, make)
    t_logo = time.perf_counter() - t0
    t0 = time.perf_counter()
    full = make().fit(measured)
    insample = full.predict_measured(measured)
    cache_ms = full._predict(measured.calls.with_warm_l2(),
                             [get_device(g) for g in measured.gpu]).details["cache_write_ms"]
    t_full = time.perf_counter() - t0
    roof = AttentionRoofline().predict_measured(measured)
    folds = {gpu: model.physical_constants() for gpu, model in fold_models.items()}

    s_held = by_key(score_attention(measured, held))
    s_in = by_key(score_attention(measured, insample))
    s_roof = by_key(score_attention(measured, roof))
    small_held = by_key(score_attention(measured, held, below=True))
    small_roof = by_key(score_attention(measured, roof, below=True))
    intervals = interval_rows(measured, held)
    wall = time.perf_counter() - t_start

    cmd = "python benchmarks/attention.py" + (f" --steps {args.steps}" if args.steps != 500
                                              else "")
    lines = [
        "# Fused attention: each GPU held out",
        "",
        (f"Command: `{cmd}` (wall time {wall:.0f} s on this machine's CPU, one thread: "
        f"leave-one-GPU-out fits and predictions {t_logo:.0f} s, in-sample fit {t_full:.0f} s, the "
        "rest loading, the roofline and the evidence tables)."),
        "",
        (f"Data: `attention/aiconfigurator.csv.gz`, {len(measured)} calls (aiconfigurator, "
        "ai-dynamo/aiconfigurator, Copyright NVIDIA, Apache-2.0): vLLM's attention kernels, "
        "timed per call with CUDA events, each call re-run on the same buffers."),
        "",
        ("- **held out**: predicted by a model fitted on the other three GPUs only (the GPU was "
        "not in the fit). **in-sample**: the model fitted on all four (the GPU was in the fit)."),
        ("- **roofline**: max(needed FLOPs / datasheet bf16 peak, compulsory bytes / datasheet "
        "DRAM bandwidth), no fitted parameter, no launch floor."),
        (f"- Scores over calls of {MIN_MS} ms or more; calls under {MIN_MS} ms are in their own "
        "columns. MAPE = mean |pred − meas| / meas; pred/meas is the median ratio."),
        ("- Predictions run warm (``warm_l2=True``), as the measurements did; the kernel that "
        "ran (the data's `kernel` column) sets the GQA-packing structure, nothing fitted."),
        "",
        "## Summary: MAPE per GPU and phase (both KV dtypes pooled), target ≤ 15% held out",
        "",
    ]
    rows = []
    for gpu in gpus:
        for phase in ("prefill", "decode"):
            n, h = phase_mape(measured, held, gpu, phase)
            _, i = phase_mape(measured, insample, gpu, phase)
            _, r = phase_mape(measured, roof, gpu, phase)
            rows.append([gpu, phase, n, pct(h), "yes" if h <= TARGET else "no", pct(i), pct(r)])
    lines += [tabulate(rows, headers=["gpu", "phase", "rows", "held out", "≤ 15%", "in-sample",
                                      "roofline"], tablefmt="github"), ""]

    lines += ["## Per (gpu, phase, KV dtype)", ""]
    rows = []
    for key in sorted(s_held):
        hs, ins, rs = s_held[key], s_in[key], s_roof[key]
        sm, smr = small_held.get(key), small_roof.get(key)
        rows.append([*key, hs.rows, pct(hs.mape), pct(hs.median_ape), pct(hs.within_10),
                     pct(hs.within_25), f"{hs.median_ratio:.2f}", pct(ins.mape),
                     f"{ins.median_ratio:.2f}", pct(rs.mape), f"{rs.median_ratio:.2f}",
                     sm.rows if sm else 0, pct(sm.mape) if sm else "-",
                     pct(smr.mape) if smr else "-"])
    lines += [tabulate(rows, headers=[
        "gpu", "phase", "kv", "rows", "held MAPE", "held medAPE", "held ≤10%", "held ≤25%",
        "held pred/meas", "in-sample MAPE", "in-sample pred/meas", "roofline MAPE",
        "roofline pred/meas", "rows < 0.01 ms", "held MAPE < 0.01 ms",
        "roofline MAPE < 0.01 ms"], tablefmt="github"), ""]

    lines += ["## Held out, per kernel that ran", ""]
    rows = []
    big = measured.latency_ms >= MIN_MS
    for gpu in gpus:
        for kernel in sorted({k for g, k in zip(measured.gpu, measured.kernel) if g == gpu}):
            for phase in ("prefill", "decode"):
                m = measured.mask(gpu=gpu, kernel=kernel, phase=phase) & big
                if not m.any():
                    continue
                ratio = held[m] / measured.latency_ms[m]
                rows.append([gpu, kernel, phase, int(m.sum()),
                             pct(float((ratio - 1).abs().mean())), f"{median(ratio):.2f}",
                             pct(float(((roof[m] / measured.latency_ms[m]) - 1).abs().mean()))])
    lines += [tabulate(rows, headers=["gpu", "kernel", "phase", "rows", "held MAPE",
                                      "held pred/meas", "roofline MAPE"], tablefmt="github"), ""]

    ev = evidence(measured)
    lines += [
        "## What the held-out misses are made of: measurements from the data",
        "",
        ("Each GPU runs its own kernels (the `kernel` column), so a shared physical constant "
        "carries one kernel's habits to another's GPU. These tables use the measurements alone."),
        "",
        ("**Per-CTA cost of decode.** Decode with at most 16 keys at batch 2048: the time per "
        "(sequence, KV head), times the SM count, is what one SM spends on one such unit "
        "(µs). The model prices a CTA's fixed chain in SM-cycles, warp-specialized kernels "
        "(FlashAttention 3, TensorRT-LLM) with setup cycles of their own, beside the MMAs of "
        "the decode's tile, which run whether its rows are filled or not: FlashAttention 2 "
        "spends the same µs on the A100 and the L40S, whose tensor cores do half the A100's "
        "bf16 work per SM-cycle."),
        "",
        tabulate(ev["decode_cta"], headers=["gpu", "kernel", "kv", "rows",
                                            "µs per unit per SM"], tablefmt="github"),
        "",
        ("**DRAM roof of decode.** Decode calls whose compulsory bytes are 0.5 GB or more: "
        "achieved GB/s and its share of the datasheet DRAM bandwidth."),
        "",
        tabulate(ev["decode_bw"], headers=["gpu", "kernel", "kv", "rows", "GB/s",
                                           "share of DRAM"], tablefmt="github"),
        "",
        ("**Compute roof of prefill.** Causal prefill of 8192 tokens or more, batch × heads ≥ 64, "
        "no window: achieved TFLOP/s (needed FLOPs), its share of the dense bf16 peak, and "
         "FLOPs per SM-cycle (boost clock) beside the peak's. vLLM's Triton kernel reaches "
         "about the same FLOPs per SM-cycle on the B200 and the L40S, whose tensor peaks per "
         "SM-cycle differ 7.6x: the model prices its (row, key) pairs in SM-cycles alone."),
        "",
        tabulate(ev["prefill"], headers=["gpu", "kernel", "kv", "head_dim", "rows", "TFLOP/s",
                                         "share of peak", "FLOPs per SM-cycle",
                                         "peak per SM-cycle"], tablefmt="github"),
        "",
        ("**The KV-cache write.** Causal prefill of 8 sequences × 4096 tokens, 32 query heads, "
        "d = 128 (ms) against kv_heads. The kernel's work is the same at every kv_heads (its "
        "K/V blocks are served by the L2); what grows is the write of the new tokens' K and V "
        "into the paged cache, which vLLM's attention forward runs before the kernel and the "
        "measurements include. The last two columns are the in-sample prediction at 32 KV "
        "heads and the cache write inside it."),
        "",
        tabulate(cache_write_growth(measured, insample, cache_ms),
                 headers=["gpu", "kernel", "kv", "kv_heads 1", "8", "32", "predicted at 32",
                          "of it the cache write"], tablefmt="github"),
        "",
        "**Launch floor.** The fastest call and the 5th percentile per kernel (µs).",
        "",
        tabulate(ev["floor"], headers=["gpu", "kernel", "kv", "rows", "min µs", "p5 µs"],
                 tablefmt="github"),
        "",
        ("**vLLM's Triton kernel runs in SM-cycles.** Identical calls on the B200 and the "
        "L40S (its only two GPUs): the B200's time over the L40S's, against the ratio of the "
        "L40S's SM-cycles a second to the B200's (SMs x boost clock). The model prices the "
        "kernel's pairs in SM-cycles alone, with its own tiles (`kernel_tiles`) and the 16 key "
        "segments of its 3D decode (`triton_segmented`)."),
        "",
        tabulate(triton_pairs(measured), headers=["phase", "window", "q_len", "calls",
                                                  "B200 / L40S time", "SM-cycle ratio"],
                 tablefmt="github"),
        "",
        ("**GQA packing.** Decode at batch 128, 32 query heads, 1024 keys, d = 128 (ms) against "
        "kv_heads. A kernel that packs the query heads of a KV head into one tile grows with "
        "kv_heads; one that does not stays flat. FlashAttention 2 stops packing when a window is "
        "set (its `seqlenq_ngroups_swapped` needs `window_size_left < 0`); the model encodes "
        "that rule (`KERNELS`), it does not fit it."),
        "",
        tabulate(window_packing(measured), headers=["gpu", "kernel", "kv", "window",
                                                    "kv_heads 1", "2", "4", "8"],
                 tablefmt="github"),
        "",
        ("**FlashAttention 2's GQA copies.** Decode of at most 16 keys, d = 128, no "
         "window, on the two GPUs that run vLLM's FlashAttention 2: median µs at batch 1 and at "
         "batches 2-8 per KV-head layout, the step between them, and the held-out median "
         "pred/meas at batches 2-8. To pack a decode's GQA group (`seqlenq_ngroups_swapped`), "
         "`mha_varlen_fwd` reshapes q as `q.reshape(b, h_k, g, d).transpose(1, 2)"
         ".reshape(b·g, h_k, d)` and the output back the same way. `reshape` returns a view only "
         "where the strides allow one, which a transposed tensor's do only when a dimension it "
         "merges is 1: with more than one sequence and more than one KV head both reshapes copy, "
         "two small kernels beside the attention kernel. The step is there only in that layout, "
         "and it is about the same count of SM clocks on both GPUs (two copies of 4,300-4,500 "
         "clocks each), as a short kernel's floor is. The model prices them so "
         "(`gqa_copy_kernels`, two kernels of `extra_kernel_kcycles` thousand clocks, the "
         "constant a split-KV combine kernel costs too): held out, the A100's calls in this "
         "layout come out as close as in the others (last column; 0.69 of the measured time "
         "before the copies were priced). The L40S's small decodes come out slow in every "
         "layout: held out, its launch floor is the other GPUs' (its batch-1 calls take "
         "7.7-8.7 µs, the A100's 10.9-12.6)."),
        "",
        tabulate(gqa_copy_step(measured, held),
                 headers=["gpu", "kernel", "layout", "rows b=1", "µs b=1", "rows b=2-8",
                          "µs b=2-8", "step µs", "step SM clocks", "held out pred/meas b=2-8"],
                 tablefmt="github"),
        "",
        "## Intervals, each GPU held out",
        "",
        ("The shipped weights carry split-conformal quantiles of log(measured / predicted) from "
         "leave-one-GPU-out fits, per phase and decade of predicted time, each GPU weighing the "
         "same, widened by a tail map across GPUs (`train.attention.fit_attention_intervals`); "
         "`predict-csv --interval` reads them. Scored nested: a GPU's bounds come from a "
         "calibration fitted on the other GPUs' held-out residuals only, over every call. "
         "For reference, the GEMM target at 80%: coverage 75-85% overall, at least 65% on "
         "every GPU."),
        "",
        tabulate(intervals, headers=["gpu", "phase", "calls",
                                     *(f"{c} {lv:.0%}" for lv in LEVELS
                                       for c in ("coverage", "hi/lo"))], tablefmt="github"),
        "",
        "## Fitted constants",
        "",
        "Physical, shared by all GPUs; the in-sample fit and each held-out fold.",
        "",
    ]
    names = list(full.physical_constants())
    rows = [[n, f"{full.physical_constants()[n]:.4g}", *(f"{folds[g][n]:.4g}" for g in gpus)]
            for n in names]
    lines += [tabulate(rows, headers=["constant", "all GPUs", *(f"without {g}" for g in gpus)],
                       tablefmt="github"), ""]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} in {wall:.0f} s")
    summary = [[g, p, pct(phase_mape(measured, held, g, p)[1])] for g in gpus
               for p in ("prefill", "decode")]
    print(tabulate(summary, headers=["gpu", "phase", "held-out MAPE"]))
    overall = statistics.fmean(s.mape for s in s_held.values())
    print(f"mean of group MAPEs, held out: {pct(overall)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
