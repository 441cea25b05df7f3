"""The attention time physics: each call's time from its geometry, its device's datasheet
columns and the fitted constants, and the KV-cache write (see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from ...hardware.catalog import DeviceSpec
from .calls import AttentionBatch
from .geometry import AttentionGeometry, attention_bytes
from .kernels import FAMILIES


# ---------------------------------------------------------------- the device side, per call
@dataclass(frozen=True)
class DeviceColumns:
    """Datasheet facts of each call's device, (N,) each, in SI units."""

    sm_count: torch.Tensor
    clock_hz: torch.Tensor  # boost clock
    peak_flops_per_s: torch.Tensor  # dense tensor-core peak of the call's compute dtype
    dram_bw_bytes_per_s: torch.Tensor
    l2_bytes: torch.Tensor

    @classmethod
    def of(cls, devices: Sequence[DeviceSpec], dtypes: Sequence[str]) -> DeviceColumns:
        facts: dict[tuple[str, str], tuple[float, ...]] = {}
        for d, name in zip(devices, dtypes):
            if (d.id, name) in facts:
                continue
            if not d.boost_clock_mhz or not math.isfinite(d.dram_bw_bytes_per_s):
                raise ValueError(f"device {d.id!r} lacks a boost clock or a DRAM bandwidth; the "
                                 "attention model needs both (calibrate the device first)")
            facts[(d.id, name)] = (float(d.sm_count), d.boost_clock_mhz * 1e6,
                                   d.peak_flops_per_s(name), d.dram_bw_bytes_per_s, d.l2_bytes)
        rows = torch.tensor([facts[(d.id, n)] for d, n in zip(devices, dtypes)],
                            dtype=torch.float64).reshape(-1, 5)  # (N, 5)
        return cls(*rows.unbind(dim=1))


def _pnorm(a: torch.Tensor, b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Soft maximum (a^p + b^p)^(1/p), written relative to the larger so it cannot overflow."""
    hi = torch.maximum(a, b)
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


# fitted constants: name -> (initial physical value, how raw maps to physical)
PARAMS: dict[str, tuple[float, str]] = {
    "mma_efficiency": (0.7, "sigmoid"),  # share of the dense tensor peak the MMAs sustain
    "softmax_cycles_flash": (0.05, "softplus"),  # SM-cycles per executed (row, key) pair
    "pair_cycles_triton": (1.0, "softplus"),  # … of the Triton kernel, its MMAs included
    "fp8_kv_cycles": (0.05, "softplus"),  # SM-cycles to convert one fp8 K/V element
    "mask_cycles": (0.05, "softplus"),  # … to mask one pair of a block seen in part
    "overlap_p": (1.7, "softplus+1"),  # MMA ⊕ softmax: 1 adds them, large overlaps them …
    "overlap_p_specialized": (1.7, "softplus+1"),  # … in a warp-specialized kernel
    "cta_kcycles": (1.0, "softplus"),  # a CTA's fixed chain (prologue, Q, epilogue), SM-cycles
    "cta_kcycles_specialized": (1.0, "softplus"),  # … more in a warp-specialized kernel
    "block_latency_ns": (50.0, "softplus"),  # per key block: the loop's exposed latency
    "block_p": (3.0, "softplus+1"),  # a block's compute ⊕ traffic
    "dram_efficiency": (0.8, "sigmoid"),  # share of datasheet DRAM bandwidth sustained
    "cache_write_efficiency": (0.6, "sigmoid"),  # … by the KV-cache write
    "cache_token_ns": (50.0, "softplus"),  # SM-time of the cache write's CTA for one token
    "cache_fp8_cycles": (0.1, "softplus"),  # SM-cycles per element written to an fp8 cache
    "l2_bytes_per_cycle_per_sm": (64.0, "softplus"),
    "roof_p": (3.0, "softplus+1"),  # grid ⊕ DRAM ⊕ L2
    "launch_us": (5.0, "softplus"),  # event-timed floor of one kernel
    # a small kernel beside the main one (split-KV combine, ``side_kernels``), in thousands
    # of SM clocks
    "extra_kernel_kcycles": (4.0, "softplus"),
}


def _to_raw(value: float, kind: str) -> float:
    if kind == "sigmoid":
        return math.log(value / (1.0 - value))
    if kind == "softplus+1":
        value -= 1.0
    return value + math.log(-math.expm1(-value))  # inverse softplus


def _to_physical(raw: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "sigmoid":
        return torch.sigmoid(raw)
    out = torch.nn.functional.softplus(raw)
    return out + 1.0 if kind == "softplus+1" else out


def _warm_hit(working_set: torch.Tensor, dev: DeviceColumns, l2_share: float,
              l2_steepness: float, warm_l2: torch.Tensor) -> torch.Tensor:
    """Share of ``working_set`` bytes (N,) a warm L2 still holds when the call is re-run on the
    same buffers (``warm_l2`` 1, per call or for all): 1 / (1 + (bytes / (share · L2))^steepness);
    0 with a cold L2."""
    hit = 1.0 / (1.0 + (working_set / (l2_share * dev.l2_bytes)) ** l2_steepness)
    return torch.where(warm_l2 > 0, hit, torch.zeros_like(hit))


def attention_time(b: AttentionBatch, geo: AttentionGeometry, dev: DeviceColumns,
                   family: torch.Tensor, constants: Mapping[str, torch.Tensor], *,
                   fp8_elements: torch.Tensor | float = 0.0,
                   side_count: torch.Tensor | float = 0.0,
                   specialized: torch.Tensor | float = 0.0,
                   l2_share: float, l2_steepness: float) -> dict[str, torch.Tensor]:
    """Time (ms) of every call and its parts, the KV-cache write (``kv_cache_write_s``)
    included where the call makes one, from physical ``constants`` (``PARAMS`` names, physical
    units). ``family`` (N,) indexes ``FAMILIES``; ``fp8_elements`` (N,) is
    ``fp8_converted``; ``side_count`` (N,) is ``side_kernels``; ``specialized`` (N,) is 1 where
    the kernel is warp-specialized (``warp_specialized``). Differentiable in the constants. In a batch run warm
    (``AttentionBatch.warm_l2``), a compulsory working set below ``l2_share`` of the L2 stays
    resident between runs (hit share 1 / (1 + (bytes / (share · L2))^steepness)).
    """
    c = constants
    sm, clk = dev.sm_count, dev.clock_hz
    traffic = attention_bytes(b)
    compulsory = traffic["compulsory_bytes"]  # (N,)
    qo = traffic["q_bytes"] + traffic["o_bytes"]
    kv_compulsory = traffic["k_bytes"] + traffic["v_bytes"]

    # one key block of one CTA: tensor cores ⊕ online softmax, in SM-cycles
    pairs = geo.rows_per_tile * geo.kv_tile  # (N,) (row, key) pairs per block
    flops_per_cycle = dev.peak_flops_per_s / (sm * clk)  # per SM
    # vLLM's Triton kernel is priced per pair in SM-cycles alone: its tl.dot tiles (16 query
    # rows in decode) do not bind at the tensor cores' rate, and it reaches the same FLOPs per
    # SM-cycle on the B200 and the L40S (226 and 208 in its compute-bound prefill), whose
    # tensor peaks per SM-cycle differ 7.6x
    triton = family == FAMILIES.index("triton")
    mma_cycles = torch.where(
        triton, torch.zeros_like(pairs),
        4.0 * b.head_dim * pairs / (flops_per_cycle * c["mma_efficiency"]))
    pair_cycles = torch.stack([c["softmax_cycles_flash"], c["pair_cycles_triton"]])
    softmax_cycles = pairs * pair_cycles[family]
    # an fp8 KV block's conversion on the SM (``fp8_converted``) runs beside the softmax
    softmax_cycles = softmax_cycles + (fp8_elements * c["fp8_kv_cycles"] * geo.kv_tile
                                       * b.head_dim)
    # a warp-specialized kernel overlaps them by its own schedule (``KernelTraits``)
    overlap_p = c["overlap_p"] + specialized * (c["overlap_p_specialized"] - c["overlap_p"])
    block_compute_s = _pnorm(mma_cycles, softmax_cycles, overlap_p) / clk

    # traffic: the compulsory bytes from DRAM (or a warm L2), every re-read from the L2
    hit = _warm_hit(compulsory, dev, l2_share, l2_steepness, b.warm_l2)
    blocks = geo.ctas * geo.tiles_mean  # key blocks run by all CTAs
    block_bytes = geo.requested_kv_bytes / blocks
    from_dram = (kv_compulsory / geo.requested_kv_bytes).clamp(max=1.0) * (1.0 - hit)
    sm_l2_bw = c["l2_bytes_per_cycle_per_sm"] * clk
    # CTAs that share an SM (``resident_ctas``; the busiest SM holds ⌈CTAs / SMs⌉ of them, at
    # most as many as fit) split its tensor cores, softmax units and bandwidth, and overlap
    # their latency chains: a wave of them takes their summed throughput work and one chain
    resident = torch.minimum(geo.ctas_per_sm, torch.ceil(geo.ctas / sm))  # (N,)
    # a running CTA draws DRAM bytes at its share of the chip's DRAM bandwidth among the CTAs
    # that run at once (an SM's share when the grid fills the SMs), never faster than its
    # SM's L2 port, which its SM's resident CTAs share
    running = torch.minimum(geo.ctas, resident * sm)  # (N,)
    cta_l2_bw = sm_l2_bw / resident
    cta_dram_bw = torch.minimum(c["dram_efficiency"] * dev.dram_bw_bytes_per_s / running,
                                cta_l2_bw)
    block_memory_s = (block_bytes * (from_dram / cta_dram_bw + (1.0 - from_dram) / cta_l2_bw)
                      + c["block_latency_ns"] * 1e-9)
    block_s = _pnorm(resident * block_compute_s, block_memory_s, c["block_p"])
    # a block some row sees only in part has its scores masked on the SM (``masked_blocks``)
    mask_s = resident * pairs * c["mask_cycles"] / clk

    # one CTA: its fixed chain in SM-cycles (a warp-specialized kernel's setup of barriers,
    # descriptors and warp roles on top), its Q load, then its key blocks …
    chain_s = (c["cta_kcycles"] + specialized * c["cta_kcycles_specialized"]) * 1e3 / clk
    cta_byte_s = (1.0 - hit) / cta_dram_bw + hit / cta_l2_bw  # a CTA's Q or O byte
    cta_fixed_s = chain_s + traffic["q_bytes"] / geo.ctas * cta_byte_s
    # … and its O store, which holds the SM only in the last wave (a CTA retires once its
    # stores are issued; the kernel ends when the last ones land)
    store_s = traffic["o_bytes"] / geo.ctas * cta_byte_s
    waves = torch.ceil(geo.ctas / (resident * sm))
    # … and one that prefetches pays its fixed chain once: the later tiles' are hidden
    hidden_s = geo.persistent * (waves - 1.0) * chain_s
    grid_s = torch.maximum(waves * (cta_fixed_s + geo.tiles_mean * block_s
                                    + geo.masked_mean * mask_s) - hidden_s,
                           cta_fixed_s + geo.tiles_max * block_s
                           + geo.masked_max * mask_s) + store_s
    dram_s = compulsory * (1.0 - hit) / (c["dram_efficiency"] * dev.dram_bw_bytes_per_s)
    l2_s = (geo.requested_kv_bytes + qo) / (sm_l2_bw * sm)
    memory_s = _pnorm(dram_s, l2_s, c["roof_p"])
    kernel_s = _pnorm(grid_s, memory_s, c["roof_p"])
    extra_kernels = geo.combines + side_count
    overhead_s = c["launch_us"] * 1e-6 + extra_kernels * c["extra_kernel_kcycles"] * 1e3 / clk
    cache_s = kv_cache_write_s(b, dev, c, l2_bw=sm_l2_bw * sm, l2_share=l2_share,
                               l2_steepness=l2_steepness)
    # key blocks on the busiest SM
    busy = torch.maximum(waves * resident * geo.tiles_mean, geo.tiles_max)
    return {
        "time_ms": (kernel_s + overhead_s + cache_s) * 1e3,
        "cache_write_ms": cache_s * 1e3,
        "compute_ms": busy * block_compute_s * 1e3,
        "memory_ms": memory_s * 1e3,
        "latency_ms": (waves * cta_fixed_s + overhead_s) * 1e3,
        "grid_ms": grid_s * 1e3,
        "dram_bytes": compulsory * (1.0 - hit),
        "l2_bytes": geo.requested_kv_bytes + qo,
        "l2_hit": hit,
        "waves": waves,
    }


def kv_cache_write_s(b: AttentionBatch, dev: DeviceColumns, c: Mapping[str, torch.Tensor], *,
                     l2_bw: torch.Tensor, l2_share: float, l2_steepness: float
                     ) -> torch.Tensor:
    """Seconds to write each call's new K and V into its paged cache, (N,); zero where
    ``cache_write`` is 0.

    The write (vLLM's ``reshape_and_cache_flash``) moves q_len · kv_heads · d · 2 elements per
    sequence, read in the compute dtype and written in the cache's: its bytes at
    ``cache_write_efficiency`` of the DRAM bandwidth, or at ``l2_bw`` for the share a warm L2
    holds; one CTA per token, ``cache_token_ns`` of SM-time each; into an fp8 cache,
    ``cache_fp8_cycles`` SM-cycles per element more. NB: the fit puts the last near 0.9, many
    times what the scaled conversion's arithmetic issues (a few instructions an element at 128
    lanes a cycle): the fp8 write is slower than its instructions, for a reason these
    measurements do not separate, and the constant carries it.
    """
    elements = b.batch * b.q_len * b.kv_heads * b.head_dim * 2.0  # (N,)
    cache_bytes = elements * (b.in_bytes + b.kv_bytes)
    hit = _warm_hit(cache_bytes, dev, l2_share, l2_steepness, b.warm_l2)
    dram_bw = c["cache_write_efficiency"] * dev.dram_bw_bytes_per_s
    sm_s = (b.batch * b.q_len * c["cache_token_ns"] * 1e-9
            + (b.kv_bytes == 1).double() * elements * c["cache_fp8_cycles"] / dev.clock_hz)
    seconds = cache_bytes * ((1.0 - hit) / dram_bw + hit / l2_bw) + sm_s / dev.sm_count
    return seconds * b.cache_write
