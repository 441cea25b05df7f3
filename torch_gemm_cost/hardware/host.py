"""The host CPU as a target: its cores, SIMD width, caches, clock and memory bandwidth read from
the machine (``host_cpu``), so that ``torch-gemm-cost calibrate --device cpu`` can fit it like
a GPU."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import torch

from .catalog import DeviceSpec

__all__ = ["copy_bw_bytes_per_s", "host_cpu", "probe_bytes"]


_SIMD_BYTES: tuple[tuple[str, int], ...] = (("avx512f", 64), ("avx2", 32), ("avx", 32),
                                            ("sse2", 16), ("asimd", 16), ("neon", 16))


def _cpu_flags() -> tuple[dict[str, str], set[str]]:
    """First processor block of /proc/cpuinfo, and its flags (x86 ``flags``, Arm ``Features``)."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                info[key.strip()] = value.strip()
    except OSError:
        pass
    flags = set((info.get("flags") or info.get("Features") or "").split())
    return info, flags


def _cache_bytes(cpus: Sequence[int]) -> dict[int, float]:
    """Data/unified cache bytes per level, summed over the distinct instances serving ``cpus``."""
    total: dict[int, float] = {}
    seen: set[tuple[int, str]] = set()
    for cpu in cpus:
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/cache")
        for index in sorted(base.glob("index*")):
            try:
                kind = (index / "type").read_text().strip()
                level = int((index / "level").read_text())
                size = (index / "size").read_text().strip()
                shared = (index / "shared_cpu_list").read_text().strip()
            except (OSError, ValueError):
                continue
            if kind == "Instruction" or (level, shared) in seen:
                continue
            seen.add((level, shared))
            scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1:].upper(), 1)
            total[level] = total.get(level, 0.0) + float(size.rstrip("KkMmGg") or 0) * scale
    return total


def copy_bw_bytes_per_s(device: str = "cpu", nbytes: int = 1 << 27, runs: int = 5) -> float:
    """Copy bandwidth (bytes read + written per second) of a buffer well past the last-level
    cache; the best of ``runs`` copies. NB: counts no write-allocate traffic."""
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # fault the pages in
    best = float("inf")
    for _ in range(runs):
        if device != "cpu":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        if device != "cpu":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * nbytes / best


def probe_bytes(caches: Mapping[int, float]) -> int:
    """The buffer ``host_cpu``'s copy probe streams: four times the last-level cache (the
    highest level in ``caches``, bytes by level) so no level holds it, at least 128 MiB, and at
    most 1 GiB: a host reporting a 480 MB L3 would otherwise copy 1.9 GB buffers, seconds of
    probing and 4 GB of memory for a figure that 1 GiB (twice that with the copy) measures.

    >>> probe_bytes({1: 48 * 2**10, 2: 2**21, 3: 32 * 2**20}) // 2**20  # 4 x 32 MiB
    128
    >>> probe_bytes({2: 2**20}) // 2**20  # 4 MiB, raised to the floor
    128
    >>> probe_bytes({3: 480 * 2**20}) // 2**20  # 1920 MiB, cut to the ceiling
    1024
    """
    last = caches[max(caches)] if caches else 0.0
    return int(min(max(1 << 27, 4 * last), 1 << 30))


def _cpu_mhz(info: Mapping[str, str]) -> float | None:
    """The CPU's maximum clock from cpufreq, else the one /proc/cpuinfo reports, else None."""
    try:
        return int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) / 1e3
    except (OSError, ValueError):
        try:
            return float(info.get("cpu MHz", "")) or None
        except ValueError:
            return None


def _cpu_peaks(fp32: float, flags: set[str]) -> dict[str, float | None]:
    """Peaks per key from the fp32 vector rate: bf16/fp16/int8 only where the ISA has
    dot-product instructions for them."""
    amx = "amx_tile" in flags
    return {
        "fp64": fp32 / 2, "fp32": fp32, "fp32_matrix": None, "tf32": None, "fp8": None,
        # AMX: 16x the fp32 vector rate for bf16/fp16 (1024 FLOPs/clk/core on Sapphire Rapids)
        "bf16": fp32 * 16 if amx and "amx_bf16" in flags
        else fp32 * 2 if "avx512_bf16" in flags else None,
        "fp16": fp32 * 16 if amx and "amx_fp16" in flags
        else fp32 * 2 if "avx512_fp16" in flags else None,
        "int8": fp32 * 32 if amx and "amx_int8" in flags
        else fp32 * 4 if flags & {"avx512_vnni", "avx_vnni"} else None,
    }


def _mem_total_bytes() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            return float(fh.readline().split()[1]) * 1024  # MemTotal: N kB
    except (OSError, ValueError, IndexError):
        return None


@lru_cache(maxsize=1)
def host_cpu() -> DeviceSpec:
    """Describe the host CPU as a GEMM target: the cores torch uses take the place of SMs.

    Cache sizes come from sysfs (L1 per core, L2 summed over the cores in use, L3 shared),
    memory bandwidth from a short copy probe (about 0.1 s), and the peaks from the SIMD width:
    cores · clock · 2 FMA pipes · 2 FLOPs · lanes. bf16/fp16/int8 get a rate only where the
    ISA has dot-product instructions for them (AVX512-BF16, AVX512-FP16, VNNI, AMX).
    NB: 2 FMA pipes per core and the nominal clock are assumptions (listed in ``uncertain``);
    ``torch-gemm-cost calibrate --device cpu`` measures the sustained rates.
    """
    info, flags = _cpu_flags()
    cores = max(1, torch.get_num_threads())
    try:
        allowed = sorted(os.sched_getaffinity(0))[:cores]
    except (AttributeError, OSError):
        allowed = list(range(cores))
    caches = _cache_bytes(allowed)
    mhz = _cpu_mhz(info)
    simd = next((b for f, b in _SIMD_BYTES if f in flags), 16)
    amx = "amx_tile" in flags
    peaks = _cpu_peaks(cores * (mhz or 2000.0) * 1e6 * 2 * 2 * (simd // 4), flags)
    mem = _mem_total_bytes()
    name = info.get("model name") or platform.processor() or platform.machine() or "CPU"
    return DeviceSpec(
        id="cpu",
        name=name,
        vendor={"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(
            info.get("vendor_id", ""), info.get("vendor_id", "") or platform.machine()
        ),
        architecture="cpu",
        compute_capability=torch.backends.cpu.get_cpu_capability().lower(),
        sm_count=cores,
        boost_clock_mhz=mhz,
        tensor_cores_per_sm=1 if amx else 0,
        mem_bytes=mem,
        dram_bw_bytes_per_s=copy_bw_bytes_per_s("cpu", nbytes=probe_bytes(caches)),
        l2_bytes=caches.get(2, 0.0),
        l3_bytes=caches.get(3),
        l1_bytes_per_sm=caches.get(1, 0.0) / max(1, len(allowed)) or None,
        smem_bytes_per_sm=None,
        regfile_bytes_per_sm=float(32 * simd),  # 32 vector registers
        peak_flops=tuple(sorted(peaks.items())),
        aliases=(name,),
        uncertain=("boost_clock_mhz", "peak_flops"),
        origin="detected",
        notes=(
            f"{cores} cores in use (torch.get_num_threads()), {simd * 8}-bit SIMD",
            "dram_bw_bytes_per_s from a copy probe at detection time",
        ),
    )
