"""Calibrate: time a designed GEMM sweep on the local GPU or CPU and fit a device profile.

    sweep = design_sweep(spec, dtypes)          # small shapes first
    runs = run_sweep(sweep, device, timer, budget_s)
    write_measurements(out / "measurements.csv", spec, runs, timer.timing)
    profile = fit_profile(spec, read_measurements(out / "measurements.csv"))
    save_profile(out / "profile.json", profile)
    spec, predictor = load_profile(out / "profile.json")

The GPU and the CPU share every step; only the timer differs (CUDA events with an L2 flush before
each run on a GPU, ``perf_counter`` on the CPU). On the CPU the cores take the place of SMs, the
cache levels are the CPU's own (``hardware.host.host_cpu``) and the tiles are the BLAS register and
thread blocking.

The profile is JSON (never pickle, ``predict/profile.py``): the detected ``DeviceSpec`` and a
fitted predictor, either ``CalibratedPredictor`` (sustained peak, bandwidths, blocking and call
floor per dtype) or the hybrid predictor fine-tuned from the shipped weights, whichever predicts
the sweep's held-out shapes better.

The steps live in ``sweep.py`` (what to time), ``timing.py`` (how to time it, and the timed rows
as a CSV of the measured data's schema) and ``fit.py`` (which predictor to keep); this module
runs them in turn.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import DeviceSpec, get_device
from ..hardware.host import copy_bw_bytes_per_s, host_cpu
from ..predict import shipped_weights_path
from ..predict.gemm.calibrated import CalibratedPredictor
from ..predict.profile import FORMAT, VERSION, load_profile, save_profile
from .fit import fit_profile
from .sweep import SweepPoint, alignment_dtypes, design_alignment_sweep, design_sweep, sweep_dtypes
from .timing import (
    CSV_COLUMNS,
    CpuTimer,
    CudaTimer,
    Measurement,
    kernel_names,
    read_measurements,
    run_sweep,
    time_runs,
    write_measurements,
)

__all__ = [
    "CSV_COLUMNS",
    "FORMAT",
    "VERSION",
    "CalibratedPredictor",
    "CalibrationResult",
    "CpuTimer",
    "CudaTimer",
    "Measurement",
    "SweepPoint",
    "alignment_dtypes",
    "calibrate",
    "design_alignment_sweep",
    "design_sweep",
    "fit_profile",
    "kernel_names",
    "load_profile",
    "read_measurements",
    "run_sweep",
    "save_profile",
    "sweep_dtypes",
    "time_runs",
    "write_measurements",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CalibrationResult:
    """Where ``calibrate`` wrote its files, and what it measured and fitted."""

    profile_path: Path
    measurements_path: Path
    spec: DeviceSpec
    measured: int  # sweep points timed
    planned: int  # sweep points designed
    elapsed_s: float
    fit: Mapping[str, Any]


def _cpu_times() -> tuple[float, float, float] | None:
    """(host idle CPU seconds, host total CPU seconds, this process's CPU seconds), from
    /proc/stat on Linux; None elsewhere."""
    try:
        with open("/proc/stat", encoding="utf-8") as fh:
            fields = [float(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = float(os.sysconf("SC_CLK_TCK"))
    return (fields[3] + fields[4]) / tick, sum(fields[:8]) / tick, time.process_time()


def _other_jobs_share(before: tuple[float, float, float] | None,
                      after: tuple[float, float, float] | None) -> float | None:
    """Share of the host's CPU time that other processes used between two ``_cpu_times``."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    idle, total, own = (a - b for a, b in zip(after, before))
    return min(1.0, max(0.0, 1.0 - (idle + own) / total))


def _target(device: str) -> tuple[DeviceSpec, str, Any]:
    """(spec, torch device, timer) for ``cpu``, ``cuda`` or ``cuda:N``."""
    if device == "cpu":
        return host_cpu(), "cpu", CpuTimer()
    if device == "cuda" or device.startswith("cuda:"):
        spec = get_device(device)  # raises if there is no GPU
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        dev = f"cuda:{index}"
        if not spec.dram_bw_bytes_per_s > 0:
            spec = replace(spec, dram_bw_bytes_per_s=copy_bw_bytes_per_s(dev))
        return spec, dev, CudaTimer(dev, spec.l2_bytes)
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def calibrate(
    device: str,
    budget_s: float,
    out_dir: str | Path,
    *,
    dtypes: Sequence[str] | None = None,
    reps: int = 7,
    seed: int = 0,
    fit_steps: int = 600,
    progress: Callable[[int, int, float, float], None] | None = None,
    timer: Any = None,
) -> CalibrationResult:
    """Measure a designed sweep on ``device`` for about ``budget_s`` seconds and fit a profile.

    Writes ``out_dir/measurements.csv`` (DATA.md schema) and ``out_dir/profile.json``. About 90%
    of the budget goes to timing (80% where shipped hybrid weights are to be fine-tuned), the
    rest to the fit. ``timer`` replaces the device's timer
    (tests use it to exercise the GPU path's flushes on the CPU).
    """
    if not budget_s > 0:
        raise ValueError(f"budget_s must be positive, got {budget_s!r}")
    start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec, dev, default_timer = _target(device)
    timer = timer or default_timer
    points = design_sweep(spec, dtypes, seed=seed)
    # the fit takes about 10% of the budget, 20% with the hybrid to fine-tune as well
    fit_share = 0.2 if fit_steps > 0 and shipped_weights_path().is_file() else 0.1
    sweep_s = (1.0 - fit_share) * budget_s - (time.perf_counter() - start)
    before = _cpu_times()
    runs = run_sweep(points, dev, timer, sweep_s, reps=reps, progress=progress)
    busy = _other_jobs_share(before, _cpu_times())
    if busy is not None and busy > 0.25:
        log.warning("other jobs used %.0f%% of the host's CPU time during the sweep; its "
                    "timings may include their interference", 100 * busy)
    if not runs:
        raise ValueError(f"budget_s={budget_s} timed no GEMM on {spec.name}; the smallest "
                         f"useful budget here is about {budget_s + 5:.0f} s")
    csv_path = write_measurements(out / "measurements.csv", spec, runs, timer.timing)
    data = read_measurements(csv_path)
    profile = fit_profile(spec, data, seed=seed, steps=fit_steps,
                          hybrid_steps=max(0, fit_steps // 6))
    elapsed = time.perf_counter() - start
    profile["calibration"] = {
        "device": device, "budget_s": budget_s, "elapsed_s": round(elapsed, 2),
        "timing": timer.timing, "reps": reps, "seed": seed,
        "dtypes": list(dict.fromkeys(r.point.dtype for r in runs)),
        "measured": len(runs), "planned": len(points),
        "other_jobs_cpu_share": None if busy is None else round(busy, 3),
        "measurements": csv_path.name, "torch": torch.__version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = save_profile(out / "profile.json", profile)
    return CalibrationResult(path, csv_path, spec, len(runs), len(points), elapsed,
                             profile["fit"])
