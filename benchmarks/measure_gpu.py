"""Measure a GPU in DATA.md's schemas: operand alignment, the calibration sweep, whole models.

    python benchmarks/measure_gpu.py --out benchmarks/data/h200 [--device cuda] [--budget-s 400]

Three parts, each written as soon as it is done, so a run cut short keeps what it measured:

- ``alignment.csv``: Linear layers (``F.linear``; fp8 through ``torch._scaled_mm``) whose n or k
  is moved 1, 2, 4 or 8 elements off a common weight's alignment, their ``matmul`` twins and
  their fused-bias variants, at 1 to 8192 tokens (``calibrate.design_alignment_sweep``). Shapes
  the backend refuses (fp8 off a multiple of 16) go to ``refused.csv``.
- ``e2e.csv``: the whole-model rows of ``e2e/neusight_labels.csv`` (no option, no switch
  transformer), rebuilt as ``benchmarks/e2e.py`` builds them but on the GPU, with the forward
  and the backward timed apart by CUDA events (median of the timed steps).
- ``calibrate.csv``: ``calibrate``'s designed ``bmm`` sweep in every dtype the GPU runs fast.

Then one profiler pass names the kernels each GEMM ran (``kernel``, ``n_kernels``,
``aux_kernels``). Every GEMM is timed as ``calibrate`` times it: CUDA events, the L2 flushed
before each run, the median of 7 or more runs. ``env.json`` records the device, driver, clocks
and versions. On the CPU (``--device cpu``) the same code runs with the host clock, so it can be
tried anywhere.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from torch_gemm_cost import calibrate as cal
from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.hardware.host import host_cpu
from torch_gemm_cost.measured.gemm import DEFAULT_DATA_DIR

log = logging.getLogger("measure_gpu")
PARTS = ("alignment", "e2e", "calibrate", "kernels", "vec")
VEC_COLUMNS = ("gpu", "gpu_name", "source", "op", "dtype", "rows", "cols", "latency_ms", "kernel")
# the ops of DATA.md's vec data; a trailing u: one tensor and a scalar
VEC_OPS: dict[str, Any] = {
    "add": lambda x, y: x + y, "mul": lambda x, y: x * y, "div": lambda x, y: x / y,
    "pow": lambda x, y: torch.pow(x, y), "addu": lambda x, y: x + 1.5,
    "mulu": lambda x, y: x * 1.5, "divu": lambda x, y: x / 1.5, "powu": lambda x, y: x ** 1.5,
    "relu": lambda x, y: torch.relu(x), "tanh": lambda x, y: torch.tanh(x),
    "gelu": lambda x, y: torch.nn.functional.gelu(x),
    "ln": lambda x, y: torch.nn.functional.layer_norm(x, x.shape[-1:], y[0], y[1]),
    "softmax": lambda x, y: torch.softmax(x, dim=-1),
}
E2E_STEPS = 3  # timed steps per whole model, after one warm-up step
VEC_ROWS = (1, 64, 1024, 8192, 32768, 131072, 524288)
VEC_COLS = (64, 768, 1024, 1600, 4096, 50257)
E2E_COLUMNS = ("gpu", "gpu_name", "model", "mode", "seq_len", "batch", "option", "num_layer",
               "measured_total_ms", "measured_fw_ms", "measured_bwall_ms", "steps")


class Clock:
    """Seconds left of the run's budget."""

    def __init__(self, budget_s: float) -> None:
        self.start = time.perf_counter()
        self.budget_s = budget_s

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)


def target(device: str) -> tuple[Any, str, Any]:
    if device == "cpu":
        return host_cpu(), "cpu", cal.CpuTimer()
    spec = get_device(device)
    dev = device if ":" in device else "cuda:0"
    return spec, dev, cal.CudaTimer(dev, spec.l2_bytes)


def environment(spec: Any, dev: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "gpu": spec.id, "gpu_name": spec.name, "torch": torch.__version__,
        "python": platform.python_version(), "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    if dev.startswith("cuda"):
        props = torch.cuda.get_device_properties(dev)
        env.update(cuda=torch.version.cuda, device_name=props.name,
                   sm_count=props.multi_processor_count,
                   l2_bytes=getattr(props, "L2_cache_size", None),
                   mem_bytes=props.total_memory, capability=f"{props.major}.{props.minor}")
        try:
            query = ("--query-gpu=driver_version,clocks.max.sm,clocks.max.mem,power.limit,"
                     "clocks.sm,temperature.gpu")
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", query, "--format=csv"], capture_output=True, text=True,
                timeout=20, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            env["nvidia_smi"] = f"unavailable: {exc}"
    return env


def write_refused(path: Path, spec: Any, refused: list[tuple[cal.SweepPoint, str]]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("gpu", "op", "dtype", "batch", "m", "n", "k", "bias", "error"))
        for p, msg in refused:
            w.writerow((spec.id, p.op, p.dtype, p.batch, p.m, p.n, p.k, int(p.bias), msg))


def gemm_part(points: list[cal.SweepPoint], dev: str, timer: Any, budget_s: float,
              ) -> tuple[list[cal.Measurement], list[tuple[cal.SweepPoint, str]]]:
    refused: list[tuple[cal.SweepPoint, str]] = []
    runs = cal.run_sweep(points, dev, timer, budget_s, refused=refused)
    log.info("timed %d of %d points, %d refused", len(runs), len(points), len(refused))
    return runs, refused


def e2e_rows(data_dir: Path) -> list[tuple[str, str, int, int, str]]:
    """(model, mode, batch, seq, num_layer) of each label row rebuilt, cheapest first."""
    from e2e import load_rows

    seen: dict[tuple[str, str, int, int], str] = {}
    for r in load_rows(data_dir, own_dirs=()):  # the NeuSight labels this script re-measures
        seen.setdefault((r["model"], r["mode"], int(r["batch"]), int(r["seq_len"])),
                        r["num_layer"])
    cost = {"bert_large": 0.34, "gpt2_large": 0.77, "gpt3_xl": 1.3, "opt_13": 1.3,
            "gpt3_27": 2.7}  # billions of parameters, for the order only
    keys = sorted(seen, key=lambda r: cost.get(r[0], 3.0) * r[2] * r[3] * (3 if r[1] == "train"
                                                                           else 1))
    return [(m, mode, b, s, seen[(m, mode, b, s)]) for m, mode, b, s in keys]


def time_model(net: Any, args: tuple, kwargs: dict, mode: str, dev: str, steps: int,
               ) -> tuple[float, float]:
    """Median forward and backward ms over ``steps`` timed steps after one warm-up step."""
    cuda = dev.startswith("cuda")

    def mark() -> Any:
        if cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) if cuda else (b - a) * 1e3

    if mode == "inf":
        net.eval()
    fw, bw = [], []
    for step in range(steps + 1):
        if mode == "inf":
            with torch.no_grad():
                t0 = mark()
                net(*args, **kwargs)
                t1 = mark()
            t2 = t1
        else:
            net.zero_grad(set_to_none=True)
            t0 = mark()
            out = net(*args, **kwargs)
            t1 = mark()
            out.loss.backward()
            t2 = mark()
            del out
        if cuda:
            torch.cuda.synchronize(dev)
        if step:
            fw.append(ms(t0, t1))
            bw.append(ms(t1, t2))
    return statistics.median(fw), statistics.median(bw)


def time_built(build: Callable[..., Any], data_dir: Path, model: str, batch: int, seq: int,
               mode: str, dev: str) -> tuple[float, float]:
    """(forward, backward) ms of one e2e label model built on ``dev``; the model and its
    inputs are freed when this returns, before the next one is built."""
    net, args, kwargs = build(data_dir, model, batch, seq, mode, device=dev)
    return time_model(net, args, kwargs, mode, dev, E2E_STEPS)


def e2e_part(data_dir: Path, spec: Any, dev: str, path: Path, clock: Clock,
             budget_s: float, models: list[str] | None) -> None:
    from e2e import build

    end = clock.left() - budget_s
    rows = [r for r in e2e_rows(data_dir) if not models or r[0] in models]
    out: list[dict[str, Any]] = []
    for model, mode, batch, seq, layers in rows:
        if out and clock.left() < end:
            log.info("e2e: out of time before %s %s b%d s%d", model, mode, batch, seq)
            break
        try:
            t = time.perf_counter()
            fw, bw = time_built(build, data_dir, model, batch, seq, mode, dev)
            log.info("e2e %s %s b%d s%d: fw %.1f ms, bw %.1f ms (%.0f s)", model, mode, batch,
                     seq, fw, bw, time.perf_counter() - t)
            out.append({"gpu": spec.id, "gpu_name": spec.name, "model": model, "mode": mode,
                        "seq_len": seq, "batch": batch, "option": "", "num_layer": layers,
                        "measured_total_ms": f"{fw + bw:.4f}", "measured_fw_ms": f"{fw:.4f}",
                        "measured_bwall_ms": f"{bw:.4f}", "steps": E2E_STEPS})
        except torch.OutOfMemoryError:
            log.warning("e2e %s %s b%d s%d: out of memory", model, mode, batch, seq)
        finally:
            if dev.startswith("cuda"):
                torch.cuda.empty_cache()
        write_e2e(path, out)
    write_e2e(path, out)


def write_e2e(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, E2E_COLUMNS)
        w.writeheader()
        w.writerows(rows)


def time_vec(fn: Any, x: torch.Tensor, other: torch.Tensor, timer: Any) -> float:
    """Median ms of 7 runs of ``fn(x, other)`` after 2 warm-up runs."""
    cal.time_runs(lambda: fn(x, other), 2, timer)
    return statistics.median(cal.time_runs(lambda: fn(x, other), 7, timer))


def vec_part(spec: Any, dev: str, timer: Any, path: Path, clock: Clock, budget_s: float,
             max_elems: int = 1 << 28) -> None:
    """DATA.md's vec ops on float32 (rows, cols) tensors: median of 7 runs, L2 flushed."""
    end = clock.left() - budget_s
    shapes = sorted(((r, c) for r in VEC_ROWS for c in VEC_COLS if r * c <= max_elems),
                    key=lambda rc: rc[0] * rc[1])
    out = []
    for rows, cols in shapes:
        if clock.left() < end:
            break
        x = torch.rand(rows, cols, device=dev) + 0.5
        y = torch.rand(rows, cols, device=dev) + 0.5
        ln_params = torch.ones(2, cols, device=dev)
        for op, fn in VEC_OPS.items():
            ms = time_vec(fn, x, ln_params if op == "ln" else y, timer)
            out.append({"gpu": spec.id, "gpu_name": spec.name, "source": "tgc-vec", "op": op,
                        "dtype": "float32", "rows": rows, "cols": cols,
                        "latency_ms": f"{ms:.6g}", "kernel": ""})
        del x, y
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, VEC_COLUMNS)
        w.writeheader()
        w.writerows(out)
    log.info("vec: %d rows", len(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR,
                        help="for e2e/neusight_labels.csv and e2e/configs")
    parser.add_argument("--budget-s", type=float, default=400.0)
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--models", nargs="*", help="e2e models to rebuild (default: all)")
    parser.add_argument("--tokens", type=int, nargs="*", help="alignment token counts")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        handlers=[logging.StreamHandler(),
                                  logging.FileHandler(args.out / "log.txt")])
    spec, dev, timer = target(args.device)
    (args.out / "env.json").write_text(json.dumps(environment(spec, dev), indent=1) + "\n")
    # the budget is for measuring: describing the target (a host CPU's copy probe) comes first
    clock = Clock(args.budget_s)
    log.info("measuring %s (%s) for %.0f s: %s", spec.name, dev, args.budget_s, args.parts)
    timing = timer.timing
    # shares of the budget: alignment 25%, e2e 30%, calibrate the rest less 10% for kernels
    align: list[cal.Measurement] = []
    sweep: list[cal.Measurement] = []
    refused: list[tuple[cal.SweepPoint, str]] = []
    if "alignment" in args.parts:
        points = (cal.design_alignment_sweep(spec, tokens=tuple(args.tokens)) if args.tokens
                  else cal.design_alignment_sweep(spec))
        align, refused = gemm_part(points, dev, timer, 0.25 * args.budget_s)
        cal.write_measurements(args.out / "alignment.csv", spec, align, timing, "tgc-align")
        write_refused(args.out / "refused.csv", spec, refused)
    if "e2e" in args.parts:
        e2e_part(args.data, spec, dev, args.out / "e2e.csv", clock, 0.3 * args.budget_s,
                 args.models)
    if "calibrate" in args.parts:
        left = clock.left() - 0.1 * args.budget_s * sum(p in args.parts for p in ("kernels", "vec"))
        if left > 1:
            sweep, more = gemm_part(cal.design_sweep(spec), dev, timer, left)
            cal.write_measurements(args.out / "calibrate.csv", spec, sweep, timing)
            refused += more
    if "vec" in args.parts:
        vec_part(spec, dev, timer, args.out / "vec.csv", clock, 0.1 * args.budget_s)
    if "kernels" in args.parts and (align or sweep):
        t = time.perf_counter()
        named = []
        for runs in (align, sweep):
            names: list[tuple[str, ...]] = []
            for i in range(0, len(runs), 500):
                if clock.left() < 5:
                    break
                names += cal.kernel_names([r.point for r in runs[i:i + 500]], dev)
            named.append([cal.Measurement(r.point, r.latency_ms, r.runs, k)
                          for r, k in zip(runs, names)] + runs[len(names):])
        align, sweep = named
        if align:
            cal.write_measurements(args.out / "alignment.csv", spec, align, timing, "tgc-align")
        if sweep:
            cal.write_measurements(args.out / "calibrate.csv", spec, sweep, timing)
        log.info("named kernels in %.0f s", time.perf_counter() - t)
    log.info("done in %.0f s", args.budget_s - clock.left())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
