"""Fused attention (FlashAttention-class kernels): FLOPs, traffic, grid and time, prefill and decode.

A fused attention kernel computes O = softmax(Q·Kᵀ·scale + mask)·V without writing the score
matrix: each CTA holds a tile of query rows on chip and streams the key/value blocks of its
KV head past them, keeping the softmax online. Its cost is set by

- the FLOPs of the two products, QKᵀ and PV: 4·d per (query, key) pair a query head sees;
- the online softmax (exponentials, running max and sum) per pair, on the SMs' special-function
  and fp32 units, not on the tensor cores: one exponential per pair against 4·d tensor-core FLOPs,
  so at d = 64 the exponentials of an H100 (16 per SM-cycle) take about as long as the MMAs;
- the bytes of Q, K and V read and O written once (the compulsory traffic): the score matrix
  never leaves the chip, and a GQA KV head is read once for the heads / kv_heads query heads that
  share it;
- the K/V blocks every query tile re-reads, which the L2 serves (below);
- how the grid of CTAs lands on the SMs, and what each CTA pays before its first block.

**Which pairs run.** A causal or sliding-window mask is exact per element, but kernels skip work
per *tile*: FlashAttention 2/3, FlashInfer and TensorRT-LLM visit, for each query tile, only the
key blocks its mask intersects (FA2's ``n_block_min``/``n_block_max``), and run the full MMA on a
block the mask cuts, masking elementwise afterwards. So the pairs a kernel *executes* are
tile-granular (``AttentionGeometry.executed_pairs``: padding of a partial query tile included),
while the pairs the attention *needs* are the exact count of unmasked elements
(``attended_pairs``). The time uses the executed pairs; ``attention_flops`` counts the needed.
Query i of ``q_len`` sits at position p = kv_len − q_len + i and sees keys j with
lo(p) ≤ j < hi(p): hi = p + 1 when causal (else kv_len), lo = p − window + 1 with a window (else
0), i.e. ``window`` keys including its own, as vLLM sets FlashAttention's
``window_size = (window − 1, 0)``.

**Grid.** A CTA holds a tile of query rows of one head and runs the key blocks of its rows. The
tile's rows and a key block's keys are the kernel's own for the head size (``kernel_tiles``:
FlashAttention 2 and 3, FlashInfer's prefill and vLLM's Triton kernel as their sources pick
them; 128 × 128 for kernels whose source is not public). Where a kernel packs GQA (``KERNELS``), the query heads
of one KV head share a tile, interleaved per position, so K/V are loaded once for the group:
FA3 always does (``pack_gqa`` in its varlen path), FlashInfer and vLLM's Triton kernel do,
FlashAttention 2 only for one-token queries without a window (``seqlenq_ngroups_swapped``
requires ``window_size_left < 0``), TensorRT-LLM only in decode. A tile's MMAs step through
its rows 16 (``MMA_M``) at a time, so a prefill shorter than a tile runs the steps its rows
fill.
Single-query calls (decode, and one-token prefill, which vLLM sends to its decode kernel) run
the rows their kernel's tile holds, whether the packed heads fill them or not (16 where the
source is not public; vLLM runs FlashInfer's decode through its prefill kernel, whose planner
sizes the tile to the packed group), and split the key blocks of each (sequence, KV head) over several
CTAs when there are too few of those to fill the SMs (``split_kv_splits``, FlashAttention 2's
heuristic, which counts two CTA slots an SM; FlashAttention 3's never splits 4 blocks or
fewer), adding a combine kernel. vLLM's FlashAttention 2 splits only a decode whose query
heads it swaps into rows (GQA without a window); vLLM's Triton kernel splits none by a
heuristic, but a decode of at most 128 / kv_heads sequences into 16 key segments
(``triton_segmented``).
TensorRT-LLM's generation kernels (FlashInfer's ``trtllm_paged_attention_decode``; TensorRT-LLM's
``trtllmGenKernels/fmha/fmhaKernels.h`` selects them) hold all the query heads of a KV head in
one CTA: a group of up to 8 or 16 heads sits on the N side of a swapped MMA whose M side steps
256 keys, a larger group takes a 128-row tile. FlashInfer always enables their multi-CTA KV
mode: ``computeNumCtas`` splits each (sequence, KV head)'s keys ⌊SMs / CTAs⌋ ways, at most one
split per key block (``fill_splits``), and the kernel merges the splits itself (a cluster's
shared memory or global-memory counters), with no combine kernel. Where that leaves one split
it switches to its persistent scheduler: one CTA per SM walks the tiles and loads the next
tile's K/V while it finishes the current one, so its fixed latency chain is paid once per SM,
not once per tile (``KernelTraits.prefetches_next_tile``).
FlashAttention 3 and FlashInfer split a multi-token query's key blocks the same way
(``KernelTraits.splits_prefill``): FA3's ``get_num_splits`` runs for every call, and
FlashInfer's prefill planner shrinks its KV chunk until the tiles fill the SMs; vLLM's
FlashAttention 2 and TensorRT-LLM's prefill do not split. PyTorch's own FlashAttention 2 (SDPA
on a GPU) does: its ``mha_fwd`` runs the decode heuristic for every call, counting 64-row query
blocks, and a call it splits runs the split-KV kernel's tiles (``mha_fwd_splits``).

**What the L2 serves.** In prefill every query tile re-reads the K/V blocks it needs: the requested
K/V bytes exceed the compulsory ones by about the number of query tiles (/ 2 when causal). The
tiles of one head (FA2's grid runs the query tiles fastest) or of one packed group run together,
and one head's K/V (kv_len · d · 2 · bytes: 8 MiB at 16k tokens, d = 128, bf16) fits in every
L2 here, so the re-reads hit the L2: DRAM moves the compulsory bytes once, and the L2 moves every
requested byte, at its own rate. The measured data re-runs each call on the same buffers, so a
working set that fits in the L2 stays there between runs (``warm_l2``): on an L40S (96 MB of L2,
0.86 TB/s of DRAM) a decode over 67 MB of KV cache runs at 1.5 TB/s and one over 134 MB at
0.6 TB/s. Inside a model every layer reads other K/V, so predictions default to a cold L2.

**Time.** Per CTA: a fixed chain in SM-cycles (prologue, epilogue), its Q load, and per key
block the larger (soft max) of its compute (tensor cores ⊕ softmax, and with an fp8 KV cache
the conversion its kernel does on the SM: ``fp8_converted``) and its traffic plus a per-block
latency. How far the MMAs and the softmax overlap, and how long a CTA's setup is, follow the
kernel's schedule (``KernelTraits.warp_specialized``): FlashAttention 3 and TensorRT-LLM run
producer and consumer warps over asynchronous MMAs and overlap one tile's softmax with
another's MMAs, while FlashAttention 2, FlashInfer's sm80 template and the Triton kernels issue
``mma.sync`` and run the softmax in the same warps, so the two add up. Each schedule has its
own overlap exponent and setup cycles; every fold fits the synchronous exponent at 1.07-1.17
(about a sum) and the specialized one at 2.3-3.3. Pricing the chain in µs, one overlap for all
kernels, made FlashAttention 2's decode on the L40S, held out, 1.17x slow (its unit of work
takes 4.7 µs there as on the A100, but the L40S does half the A100's bf16 MMA work per
SM-cycle, so its chain is shorter in µs); with the schedules and the chain in cycles its
held-out decode went from 20.2% to 11.8% MAPE, and every GPU's held-out MAPE fell
(``benchmarks/results/attention.md``). A key block that some row of the tile sees only in part (the
causal diagonal, a window's left edge, the ragged end of the keys) has its scores masked
element by element on the SM: SM-cycles per pair of such a block (``masked_blocks``). A CTA
retires once its O store is issued, so the store holds an SM in the grid's last wave alone.
Both moved the held-out L40S prefill from 19.8% to 16.1% MAPE: its windowed prefill of more
than 128 tokens, whose tiles run two or three key blocks, all of them masked, came out at a
median 1.19x (FlashAttention 2) and 1.21x (FlashInfer) of its measured time, now 1.13x and
1.04x. A CTA's traffic runs at its SM's L2 port (shared by
the CTAs resident on the SM), and what comes from DRAM at the CTA's share of the chip's DRAM
bandwidth among the CTAs that run at once, no faster than the port: a grid that fills the
SMs gets an SM's share each, but a decode of a few long MHA sequences (vLLM's FlashAttention 2
splits no MHA decode) streams each CTA's keys faster. On an L40S that took held-out MHA
decode from 48% to 24% MAPE (32 CTAs over 268 MB ran at 743 GB/s, where an SM's share,
1/142 of the DRAM, priced them at 190 GB/s).
The grid takes max(⌈CTAs / SMs⌉ · mean CTA, longest CTA); the kernel takes the soft max of the
grid and the chip-wide DRAM and L2 roofs; a launch floor comes on top, and each small kernel
the call runs beside its main one (a split-KV combine, FlashAttention 2's GQA copies and
FlashAttention 3's schedule: ``side_kernels``) costs a count of SM clocks, as the GEMM model's
kernel floor does: the copies' measured step is 8,648 clocks on the A100 and 9,032 on the L40S
for two of them (``benchmarks/results/attention.md``), and every held-out fit puts the
constant at 4,600-5,000.
Where a kernel's launch sizes it to run r CTAs an SM at once (``resident_ctas``:
FlashInfer's prefill kernel, two where two fit in an SM's shared memory), the r CTAs of the
busiest SM (at most ⌈CTAs / SMs⌉) share its tensor cores, softmax units and bandwidth but
overlap their latency chains: a wave of r · SMs CTAs takes one fixed chain and one per-block
latency, and r times each CTA's compute and traffic. On an L40S this took FlashInfer's held-out
decode at 16 waves or more from 1.36-1.38x too slow to 1.00-1.07x.

**The KV-cache write.** A serving engine's attention layer first writes the new tokens' K and V
into its paged cache, then runs the kernel: vLLM's ``reshape_and_cache_flash``, one CTA per
token, reads q_len · kv_heads · d · 2 elements in the compute dtype and writes them in the cache
dtype (quantizing them when the cache is fp8). The measured calls time the layer's ``forward``,
write included (aiconfigurator's ``collector/vllm/collect_attn.py`` calls ``impl.forward``
with the new K and V), and it is what a prefill pays on top of its kernel: at a fixed count of
query heads the measured prefill grows with the KV heads, whose K/V blocks the kernel reads
from the L2 either way (``benchmarks/results/attention.md``). The write runs at a fitted share
of DRAM bandwidth (or the L2's when it fits, warm), with a fitted SM-time per token and, into
an fp8 cache, per element (``kv_cache_write_s``). ``AttentionCall.cache_write`` switches it
off where no paged cache is written (PyTorch's SDPA).

Every fitted constant is physical and shared by all GPUs: device facts come from
``devices.get_device``.

NB: what a kernel does beyond its structure in ``KERNELS`` is not modelled, and shows when a GPU
is held out (``benchmarks/results/attention.md`` measures each): FlashAttention 3 runs a
persistent scheduler too, but its producer loads a tile's V only after the previous tile's
epilogue has freed the shared memory V shares with O (``barrier_O`` in
``hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp``), so the model credits it no prefetch; its decode
spends about twice the per-(sequence, KV head) SM-time of TensorRT-LLM's (4 µs against 2 µs);
TensorRT-LLM's context kernels run persistent as well, but prefill tiles run many key blocks
each and crediting them the prefetch made the held-out prefill worse, so they are priced
launched one CTA per tile. FlashAttention 3's fp8-KV path on the H200 reaches 0.49 of DRAM
bandwidth in decode against 0.81 in bf16, and the fastest event-timed call differs by GPU and
kernel (6-11 µs) where the model has one launch floor. A decode split 64 ways or more takes
1.2-1.75x its predicted time held out (medians: FlashAttention 2 1.75x on the A100 and 1.60x on
the L40S, FlashAttention 3 1.22x, TensorRT-LLM 1.59x), whether a combine kernel merges its
splits (FlashAttention) or the kernel itself (TensorRT-LLM); FlashInfer's on the L40S 1.16x
(its planner's split, PrefillSplitQOKVIndptr, is not modelled; pricing it split more fit
worse); a cost per merged split fitted no better.
Calls with more than ``exact_tiles`` query tiles have their key blocks summed on a sample of
tiles (within about 2%).

Every function here is a pure batched tensor function; shapes are (N,) unless marked.
"""

from __future__ import annotations

import difflib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..devices import DeviceSpec, get_device
from ..dtypes import resolve_dtype
from .base import read_fitted
from .intervals import AttentionIntervals

__all__ = [
    "KERNELS",
    "PHASES",
    "AttentionBatch",
    "AttentionCall",
    "AttentionGeometry",
    "AttentionPrediction",
    "AttentionPredictor",
    "AttentionRoofline",
    "KernelTraits",
    "attended_pairs",
    "attention_bytes",
    "attention_flops",
    "attention_geometry",
    "attention_time",
    "fa2_split_tiles",
    "fill_splits",
    "fp8_converted",
    "gqa_copy_kernels",
    "kernel_tiles",
    "masked_blocks",
    "mha_fwd_splits",
    "pack_gqa",
    "resident_ctas",
    "sdpa_kernel",
    "side_kernels",
    "single_query",
    "split_kv_splits",
    "triton_segmented",
    "varlen_schedule_kernels",
    "vllm_kernel",
    "warp_specialized",
]

PHASES: tuple[str, ...] = ("prefill", "decode")


@dataclass(frozen=True)
class KernelTraits:
    """What the time model needs to know of an attention kernel: its structure, not its speed.

    ``family`` chooses how a (row, key) pair is priced ("flash": CUDA kernels whose MMAs run
    at the tensor cores' rate, beside an online softmax; "triton": vLLM's Triton kernel, priced
    in SM-cycles per pair alone, see ``attention_time``). ``packs_prefill``: query heads of a
    KV head share tiles in multi-token prefill; ``packs_windowed_decode``: they still do in
    decode when a sliding window is set. ``min_split_blocks``: the fewest key blocks split-KV
    splits. ``splits_prefill``: a multi-token query's key blocks are split too when its tiles
    do not fill the SMs. ``split_slots_per_sm``: the CTAs per SM the split heuristic counts
    (FlashAttention 2: two, "128 threads per block"). ``splits_packed_decode_only``: a single
    query splits only when the kernel packs a GQA group into its rows (vLLM's FlashAttention 2
    calls ``set_params_splitkv`` only under ``seqlenq_ngroups_swapped``: more query heads than KV
    heads, no window); otherwise every kernel may split a single query.
    ``splits_prefill_as_decode``: a multi-token query splits where the heuristic, counting
    64-row query blocks as for a decode, says so, and then runs the split-KV kernel's tiles
    (PyTorch's FlashAttention 2: ``mha_fwd_splits``).
    ``splits_to_fill``: a single query's key blocks are split ⌊SMs / CTAs⌋ ways (at most one
    split per key block) instead of by FlashAttention 2's heuristic (``fill_splits``: TensorRT-LLM's
    ``computeNumCtas``). ``combine_kernel``: the splits' partial outputs are merged by a second
    kernel (FlashAttention's combine); False where the main kernel merges them itself
    (TensorRT-LLM's cluster shared-memory or global-memory reduction).
    ``prefetches_next_tile``: a persistent CTA loads its next tile while it finishes the
    current one, so a CTA's latency chain is paid once per SM, not once per tile; it holds
    where the kernel runs its persistent scheduler (TensorRT-LLM: context kernels always, a
    generation kernel when it does not split the keys, as ``computeNumCtas`` switches).
    ``copies_packed_gqa``: the entry point packs a single query's GQA group with a reshape that
    torch can only copy, and copies the output back the same way (``gqa_copy_kernels``).
    ``schedules_varlen``: the varlen entry runs a kernel of its own before the attention kernel
    to plan its tiles and splits (``varlen_schedule_kernels``).
    ``segments``: a single query's keys are split into this many segments, no split heuristic,
    when the batch is at most ``segment_grid`` / kv_heads, and never otherwise
    (``triton_segmented``). ``ctas_per_sm``: the CTAs an SM runs at once where the launch
    fixes it (``resident_ctas``).
    ``warp_specialized``: producer warps load K/V (TMA) while consumer warps issue asynchronous
    MMAs (Hopper's wgmma, Blackwell's tcgen05) and scheduling overlaps one tile's softmax with
    another's MMAs: FlashAttention 3's ping-pong and intra-warpgroup pipelining (its paper,
    section 3.1-3.2), TensorRT-LLM's Blackwell FMHA. A kernel whose warps issue synchronous
    ``mma.sync`` and then run the softmax themselves (FlashAttention 2, FlashInfer's sm80
    template, Triton's ``tl.dot``) does not. It sets how a key block's MMAs and softmax overlap
    and what a CTA's setup costs (``attention_time``), each a constant of its own.
    """

    family: str  # "flash" or "triton" (``FAMILIES``)
    packs_prefill: bool
    packs_windowed_decode: bool
    min_split_blocks: int
    splits_prefill: bool
    source: str
    split_slots_per_sm: int = 1
    splits_packed_decode_only: bool = False
    splits_prefill_as_decode: bool = False
    splits_to_fill: bool = False
    combine_kernel: bool = True
    prefetches_next_tile: bool = False
    copies_packed_gqa: bool = False
    schedules_varlen: bool = False
    segments: int = 0
    segment_grid: int = 0
    ctas_per_sm: int = 1
    warp_specialized: bool = False


KERNELS: dict[str, KernelTraits] = {
    "fa2": KernelTraits("flash", False, False, 2, False,
                        "FlashAttention 2 (vllm-flash-attn): packs only through "
                        "seqlenq_ngroups_swapped; num_splits_heuristic",
                        split_slots_per_sm=2, splits_packed_decode_only=True,
                        copies_packed_gqa=True),
    "torch_fa2": KernelTraits("flash", False, False, 2, False,
                             "PyTorch's bundled FlashAttention 2 (no paged KV cache): "
                             "packs only through seqlenq_ngroups_swapped; mha_fwd calls "
                             "set_params_splitkv for every call (num_splits_heuristic)",
                             split_slots_per_sm=2, splits_prefill_as_decode=True),
    "fa3": KernelTraits("flash", True, True, 5, True,
                        "FlashAttention 3 (and 4) on Hopper: pack_gqa in the varlen path; "
                        "get_num_splits for every call, never 4 key blocks or fewer; "
                        "prepare_varlen_num_blocks before a varlen call of at most 992 "
                        "sequences",
                        schedules_varlen=True, warp_specialized=True),
    "flashinfer": KernelTraits("flash", True, True, 2, True,
                               "FlashInfer prefill/decode (vLLM's decode runs the prefill kernel, "
                               "use_tensor_cores=True): the GQA group is fused into the tile; "
                               "its planner splits the KV (PrefillSplitQOKVIndptr), "
                               "approximated by FlashAttention 2's heuristic"),
    "trtllm": KernelTraits("flash", False, True, 2, False,
                           "TensorRT-LLM FMHA through FlashInfer (Blackwell): trtllm-gen "
                           "generation kernels group a KV head's query heads (fmhaKernels.h); "
                           "FlashInfer enables multi-CTA KV, split by computeNumCtas and "
                           "reduced inside the kernel",
                           splits_to_fill=True, combine_kernel=False,
                           prefetches_next_tile=True, warp_specialized=True),
    "triton": KernelTraits("triton", True, True, 2, False,
                           "vLLM's Triton unified attention (triton_unified_attention.py): the "
                           "query heads of a KV head in BLOCK_M rows; a single query of at most "
                           "128 / kv_heads sequences runs its 3D kernel, 16 key segments and a "
                           "reduce_segments kernel (backends/triton_attn.py: "
                           "MIN_LAUNCH_GRID_SIZE_2D, NUM_PAR_SOFTMAX_SEGMENTS)",
                           segments=16, segment_grid=128, ctas_per_sm=2),
    "aotriton": KernelTraits("triton", True, True, 2, False,
                             "AOTriton (PyTorch's SDPA on AMD GPUs): Triton flash attention, "
                             "tiles not public (the model's defaults)"),
}
FAMILIES: tuple[str, ...] = ("flash", "triton")
KERNEL_CHOICES: tuple[str, ...] = ("auto", *KERNELS)


def vllm_kernel(device: DeviceSpec, head_dim: int, kv_dtype: str) -> str:
    """The attention kernel vLLM runs on ``device`` for this head size and KV cache dtype.

    As vLLM picks its backend by architecture (and as the aiconfigurator measurements record it):
    Blackwell (sm 10.x) runs TensorRT-LLM's FMHA for head sizes 64/128/256/512; Hopper (9.x)
    FlashAttention 3; Ampere and Ada (8.x) FlashAttention 2 for a 16-bit KV cache and FlashInfer
    for an fp8 one (head sizes 64/128/256). Everything else falls back to the Triton kernel.
    """
    if device.vendor != "NVIDIA" or not device.compute_capability[:1].isdigit():
        return "triton"
    major = int(device.compute_capability.split(".")[0])
    fp8 = resolve_dtype(kv_dtype).in_bytes == 1
    if major >= 10:
        return "trtllm" if head_dim in (64, 128, 256, 512) else "triton"
    if major == 9:
        return "fa3"
    if major == 8:
        if not fp8:
            return "fa2"
        return "flashinfer" if head_dim in (64, 128, 256) else "triton"
    return "triton"


def sdpa_kernel(device: DeviceSpec) -> str:
    """The kernel structure PyTorch's ``scaled_dot_product_attention`` runs on ``device``.

    On NVIDIA GPUs PyTorch's SDPA dispatches to its bundled FlashAttention 2 (fp16/bf16, no
    explicit mask) or to its memory-efficient kernel (fp32, or a mask), both tiled kernels with
    an online softmax that keep the scores on chip and do not pack GQA heads in prefill: both are
    priced with FlashAttention 2's structure, as PyTorch builds it ("torch_fa2": its own tiles,
    no paged KV cache). On AMD GPUs PyTorch runs AOTriton's Triton kernels ("aotriton").
    NB: the memory-efficient kernel's own speed was not measured.
    """
    return "aotriton" if device.vendor == "AMD" else "torch_fa2"


MMA_M = 16  # rows of one tensor-core MMA step (mma.sync m16n8k16; a wgmma's 64 is 4 of them)


def fa2_split_tiles(head_dim: int) -> tuple[int, int, int]:
    """FlashAttention 2's split-KV kernel tiles (``run_mha_fwd_splitkv_dispatch``): 64 query
    rows, and 256 keys up to d = 64, 128 up to 128, else 64 (the ``block_n`` that
    ``set_params_splitkv`` counts key blocks in)."""
    return 64, 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64, 64


def kernel_tiles(kernel: str, head_dim: int, kv_bytes: int, *, causal: bool, windowed: bool,
                 single: bool, default: tuple[int, int, int] = (128, 128, 16),
                 sm8x: bool = False, smem_bytes_per_sm: float | None = None,
                 in_bytes: int = 2, packed_q: int = 0, group: int = 1,
                 segmented: bool = False) -> tuple[int, int, int]:
    """(query rows, keys) of one CTA's tile, and the rows a single-query tile runs, as the
    kernel's source picks them for this head size; ``default`` where the source is not public.

    - ``fa2``: vLLM's FlashAttention 2 reads a paged KV cache, which ``mha_varlen_fwd`` sends
      to the split-KV kernel whatever the split count (``run_mha_fwd(params, stream,
      /*force_split_kernel=*/paged_KV)``); ``run_mha_fwd_splitkv_dispatch`` tiles it 64 rows by
      256 keys up to d = 64, 128 up to d = 128, 64 beyond. A one-token query runs all 64 rows:
      each of the 4 warps' MMAs covers 16 of them, empty or not.
    - ``fa3``: ``tile_size_fwd_sm90`` (hopper/tile_size.h), with a paged KV cache that TMA does
      not load (vLLM's 16-token pages): 16-bit, 192 × 128 (causal) or 160 up to d = 64, 192 ×
      128 up to 96, 128 × 128 up to 128, 128 × 96 up to 192, 128 × 80 (64 with a window)
      beyond; fp8, 192 × 160, 192 × 128, 128 × 160, 128 × 160, 128 × 128 (64 with a window).
      A query of at most 64 packed rows runs one MMA warpgroup (``use_one_mma_wg``): 64 × 192
      (16-bit) or 64 × 128 (fp8) up to d = 64, 64 × 128 or 64 × 96 up to 128.
    - ``torch_fa2``: PyTorch's FlashAttention 2 runs a multi-token query in its non-split kernel,
      tiled by ``run_mha_fwd_hdim*``: 128 × 128 up to d = 64; up to 128, 128 × 64, but on sm86
      and sm89 (``sm8x``) 128 × 32, or 64 × 64 when causal (96: 128 × 64, 64 × 64 causal on
      sm8x); 128 × 64 up to 192; 128 × 64 at 256 where an SM holds at least 128 KiB of shared
      memory but less than 192 KiB (the A100), else 64 × 64. A one-token query takes the
      split-KV kernel's tiles, as ``fa2``, and so does (``single``) a multi-token query
      that ``mha_fwd_splits`` splits.
    - ``flashinfer``: vLLM builds FlashInfer's decode wrapper with ``use_tensor_cores=True``
      (``vllm/v1/attention/backends/flashinfer.py``), which runs a single query through the
      prefill kernel as a one-token prefill, so decode and prefill share its tiles: the
      planner's ``FA2DetermineCtaTileQ`` takes 128 rows when the packed query (``packed_q`` =
      q_len · heads / kv_heads) exceeds 64 and d < 256, 64 when it exceeds 16, else 16, with
      4 warps along the rows (1 for 16 rows, which put 4 along the keys instead). The keys are
      16 · warps along the keys · ``NUM_MMA_KV``, the largest power of two that both the
      registers (8 / the row MMAs per warp) and a CTA's shared memory allow: an SM's shared
      memory (``smem_bytes_per_sm``), halved when two minimal CTAs fit, less the Q tile
      (rows · d · ``in_bytes``), over 2 · d · 16 · warps along the keys · ``kv_bytes`` per
      ``NUM_MMA_KV`` (``BatchPrefillWithPagedKVCacheDispatched``). An L40S, d = 128, fp8 cache:
      128 × 64, 64 × 128, 16 × 128. Two CTAs an SM where they fit (``resident_ctas``).
    - ``trtllm`` (single query; its context kernels are 128 × 128, ``default``): TensorRT-LLM's
      generation kernels (``hashFromRunnerParams`` in ``fmhaKernels.h``) hold the ``group``
      query heads of a KV head in one CTA: up to 16 heads the "SwapsMmaAb" kernels put the keys
      on the MMA's M side and 8 heads (a group of at most 8) or 16 on its N side, stepping 256
      keys an iteration (their ``mStepKv`` in ``kernelMetaInfo.h``); a larger group runs the
      "KeepsMmaAb" kernels' 128-row tile (``TileSizeQ128``), 128 keys at a time.
    - ``triton``: vLLM's Triton unified attention (``unified_attention``) holds the ``group``
      query heads of a KV head in ``BLOCK_M`` rows, 16 up to a group of 16, else the group's
      next power of two, and steps ``TILE_SIZE`` keys: 32 (``TILE_SIZE_PREFILL``), but in the
      3D kernel (``segmented``, ``triton_segmented``) 16 for a 16-bit query, 32 for an 8-bit one
      (``TILE_SIZE_DECODE``).
    """
    if kernel == "triton":
        rows = 16 if group <= 16 else 1 << (group - 1).bit_length()
        return rows, (16 if in_bytes >= 2 else 32) if segmented else 32, rows
    if kernel == "trtllm" and single:
        if group <= 16:
            rows = 8 if group <= 8 else 16
            return rows, 256, rows
        return 128, 128, 128
    if kernel == "flashinfer":
        return _flashinfer_prefill_tiles(head_dim, kv_bytes, in_bytes, packed_q,
                                         smem_bytes_per_sm, default)
    if kernel == "fa2" or (kernel == "torch_fa2" and single):
        return fa2_split_tiles(head_dim)
    if kernel == "torch_fa2":
        if head_dim <= 64:
            return 128, 128, 128
        if head_dim <= 128:
            if sm8x:
                return (64, 64, 64) if causal else (128, 32 if head_dim > 96 else 64, 128)
            return 128, 64, 128
        if head_dim <= 192:
            return 128, 64, 128
        smem = smem_bytes_per_sm or 0.0
        return (128, 64, 128) if 128 * 1024 <= smem < 192 * 1024 else (64, 64, 64)
    if kernel != "fa3":
        return default
    fp8 = kv_bytes == 1
    if single and head_dim <= 128:
        return 64, (128 if fp8 else 192) if head_dim <= 64 else (96 if fp8 else 128), 64
    if fp8:
        rows, keys = ((192, 160) if head_dim <= 64 else (192, 128) if head_dim <= 96
                      else (128, 160) if head_dim <= 192 else (128, 64 if windowed else 128))
    else:
        rows, keys = ((192, 128 if causal else 160) if head_dim <= 64
                      else (192, 128) if head_dim <= 96 else (128, 128) if head_dim <= 128
                      else (128, 96) if head_dim <= 192 else (128, 64 if windowed else 80))
    return rows, keys, rows


def _flashinfer_layout(head_dim: int, kv_bytes: int, in_bytes: int, packed_q: int,
                       smem_bytes_per_sm: float | None) -> tuple[int, int, int] | None:
    """FlashInfer's prefill kernel as its dispatch builds it: (query rows, keys of a key block,
    CTAs an SM holds), or None without the shared memory (``kernel_tiles``)."""
    if not smem_bytes_per_sm:
        return None
    rows = 128 if packed_q > 64 and head_dim < 256 else 64 if packed_q > 16 else 16
    warps_q = 4 if rows > 16 else 1
    warps_kv = 4 // warps_q
    mma_q = rows // (16 * warps_q)  # row MMAs per warp
    q_smem = rows * head_dim * in_bytes
    per_mma_kv = 2 * head_dim * 16 * warps_kv * kv_bytes  # K and V of 16 keys per warp
    ctas = 2 if smem_bytes_per_sm >= 2 * (q_smem + per_mma_kv) else 1
    fit = int((smem_bytes_per_sm // ctas - q_smem) // per_mma_kv)
    mma_kv = min(fit, 8 // mma_q)
    if mma_kv < 1:
        return None
    mma_kv = 1 << (mma_kv.bit_length() - 1)  # DISPATCH_NUM_MMA_KV: a power of two
    return rows, 16 * warps_kv * mma_kv, ctas


def _flashinfer_prefill_tiles(head_dim: int, kv_bytes: int, in_bytes: int, packed_q: int,
                              smem_bytes_per_sm: float | None, default: tuple[int, int, int]
                              ) -> tuple[int, int, int]:
    """FlashInfer's prefill tile (``kernel_tiles``); ``default`` without the shared memory."""
    layout = _flashinfer_layout(head_dim, kv_bytes, in_bytes, packed_q, smem_bytes_per_sm)
    if layout is None:
        return default
    rows, keys, _ = layout
    return rows, keys, rows


def resident_ctas(kernel: str, head_dim: int, kv_bytes: int, *, in_bytes: int = 2,
                  packed_q: int = 0, smem_bytes_per_sm: float | None = None) -> int:
    """CTAs of ``kernel`` one SM runs at once, as the kernel's launch sizes them.

    FlashInfer's prefill kernel (which vLLM's decode runs too, ``kernel_tiles``) sizes its
    shared memory for two CTAs an SM ("we expect each sm execute two threadblocks":
    ``num_ctas_per_sm`` in ``BatchPrefillWithPagedKVCacheDispatched``,
    ``include/flashinfer/attention/prefill.cuh``) wherever two of its smallest CTAs (the Q tile
    and one key MMA of K and V per warp along the keys) fit in an SM's shared memory; its 128
    threads a CTA never bind before the shared memory does. Every other kernel here is priced
    one CTA an SM (FlashAttention 3 and TensorRT-LLM fill an SM's shared memory with one; vLLM's
    FlashAttention 2 split-KV CTA is not counted twice: pricing it so made A100 and L40S worse),
    but vLLM's Triton kernel, two: its launch sets no ``num_warps``, so a CTA is Triton's
    default 4 warps, and 128 threads at Triton's cap of 255 registers take half an SM's 64K
    registers (a count from the register file, not from the kernel's compiled use). Those
    fixed counts are each kernel's ``KernelTraits.ctas_per_sm``.
    """
    if kernel != "flashinfer":
        return KERNELS[kernel].ctas_per_sm
    layout = _flashinfer_layout(head_dim, kv_bytes, in_bytes, packed_q, smem_bytes_per_sm)
    return 1 if layout is None else layout[2]


# K/V elements of a key block (× kv_tile · head_dim) a kernel converts on the SM before its
# MMAs when the KV cache is fp8: FlashInfer and vLLM's Triton kernel dequantize K and V to the
# 16-bit compute dtype; FlashAttention 3 runs fp8 MMAs but transposes V in shared memory, which
# Hopper's fp8 wgmma needs K-major (the FlashAttention 3 paper, its FP8 section); TensorRT-LLM's
# Blackwell kernels run fp8 MMAs on both layouts. FlashAttention 2 takes no fp8 cache (as
# FlashInfer where it would).
FP8_CONVERTED: dict[str, float] = {"flashinfer": 2.0, "triton": 2.0, "fa2": 2.0,
                                   "torch_fa2": 2.0, "fa3": 1.0, "trtllm": 0.0,
                                   "aotriton": 2.0}


def warp_specialized(kernels: Sequence[str]) -> torch.Tensor:
    """1 where each call's kernel is warp-specialized (``KernelTraits.warp_specialized``),
    else 0, (N,)."""
    return torch.tensor([float(KERNELS[k].warp_specialized) for k in kernels],
                        dtype=torch.float64)


def fp8_converted(b: AttentionBatch, kernels: Sequence[str]) -> torch.Tensor:
    """K/V elements per key block (in units of kv_tile · head_dim) each call's kernel converts
    on the SM, (N,): ``FP8_CONVERTED`` where the KV cache is fp8, else 0."""
    k = torch.tensor([FP8_CONVERTED[x] for x in kernels], dtype=torch.float64)
    return k * (b.kv_bytes == 1).double()


def _closest(value: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, list(options), n=1, cutoff=0.0)
    return close[0] if close else options[0]


@dataclass(frozen=True)
class AttentionCall:
    """One fused attention call: ``batch`` sequences, each with ``q_len`` new query tokens
    attending to ``kv_len`` keys (the new ones included, so ``q_len ≤ kv_len`` when causal;
    without ``causal`` every query sees every key, as cross-attention does).

    ``heads`` query heads share ``kv_heads`` KV heads (GQA; MQA when 1). ``window`` > 0 limits
    each query to the last ``window`` keys up to and including its own position; 0 means none.
    ``kv_dtype`` is the KV cache's storage (fp8 halves its bytes); the products run in ``dtype``.
    ``kernel`` is one of ``KERNELS`` or "auto": what vLLM runs on the device (``vllm_kernel``).
    ``cache_write``: the call first writes its ``q_len`` new tokens' K and V into a paged KV
    cache, as a serving engine's attention layer does (False: PyTorch's SDPA, which writes none).
    ``dropout``: the call drops attention probabilities (a training step's attention dropout);
    FlashAttention 2 then never splits the keys ("SplitKV is not implemented for dropout").
    ``scheduled``: the call's varlen schedule was computed before it, so FlashAttention 3 runs
    no schedule kernel of its own (``varlen_schedule_kernels``): vLLM's metadata builder does
    so once a step (``aot_schedule``: ``get_scheduler_metadata``) and hands the result to every
    layer; the measured calls ran the kernel themselves.
    """

    phase: str
    batch: int
    q_len: int
    kv_len: int
    heads: int
    kv_heads: int
    head_dim: int
    window: int = 0
    causal: bool = True
    dtype: str = "bfloat16"
    kv_dtype: str = "bfloat16"
    kernel: str = "auto"
    cache_write: bool = True
    dropout: bool = False
    scheduled: bool = False

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase {self.phase!r} is not one of {PHASES}; "
                             f"did you mean {_closest(str(self.phase), PHASES)!r}?")
        if self.kernel not in KERNEL_CHOICES:
            raise ValueError(f"kernel {self.kernel!r} is not one of {KERNEL_CHOICES}; "
                             f"did you mean {_closest(str(self.kernel), KERNEL_CHOICES)!r}?")
        for name in ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 0:
            raise ValueError(f"window must be a non-negative integer (0: none), got "
                             f"{self.window!r}")
        for flag in ("cache_write", "dropout", "scheduled"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.causal and self.q_len > self.kv_len:
            raise ValueError(f"q_len {self.q_len} exceeds kv_len {self.kv_len}: the keys include "
                             f"the new tokens, so kv_len must be at least {self.q_len}")
        if self.heads % self.kv_heads:
            lower = max(k for k in range(1, self.kv_heads + 1) if self.heads % k == 0)
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads "
                             f"{self.kv_heads}; the nearest kv_heads that divides it is {lower}")
        for name in ("dtype", "kv_dtype"):
            object.__setattr__(self, name, resolve_dtype(getattr(self, name)).name)


def _col(values: Sequence[float] | torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(values, dtype=torch.float64).reshape(-1).clone()


@dataclass(frozen=True)
class AttentionBatch:
    """N attention calls as float64 tensors of shape (N,), ready for batched physics.

    ``decode``, ``causal``, ``cache_write``, ``dropout`` and ``scheduled`` are 0/1; ``in_bytes``
    is the element size of Q and O, ``kv_bytes`` that of K and V. ``dtype`` (compute dtype) and
    ``kernel`` (a ``KERNELS`` name or "auto") are per call.
    """

    decode: torch.Tensor
    batch: torch.Tensor
    q_len: torch.Tensor
    kv_len: torch.Tensor
    heads: torch.Tensor
    kv_heads: torch.Tensor
    head_dim: torch.Tensor
    window: torch.Tensor
    causal: torch.Tensor
    in_bytes: torch.Tensor
    kv_bytes: torch.Tensor
    cache_write: torch.Tensor
    dropout: torch.Tensor
    scheduled: torch.Tensor
    dtype: tuple[str, ...]
    kernel: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.batch.shape[0])

    @classmethod
    def from_calls(cls, calls: Sequence[AttentionCall]) -> AttentionBatch:
        if not calls:
            raise ValueError("no attention calls given")
        return cls(
            decode=_col([float(c.phase == "decode") for c in calls]),
            batch=_col([c.batch for c in calls]),
            q_len=_col([c.q_len for c in calls]),
            kv_len=_col([c.kv_len for c in calls]),
            heads=_col([c.heads for c in calls]),
            kv_heads=_col([c.kv_heads for c in calls]),
            head_dim=_col([c.head_dim for c in calls]),
            window=_col([c.window for c in calls]),
            causal=_col([float(c.causal) for c in calls]),
            in_bytes=_col([resolve_dtype(c.dtype).in_bytes for c in calls]),
            kv_bytes=_col([resolve_dtype(c.kv_dtype).in_bytes for c in calls]),
            cache_write=_col([float(c.cache_write) for c in calls]),
            dropout=_col([float(c.dropout) for c in calls]),
            scheduled=_col([float(c.scheduled) for c in calls]),
            dtype=tuple(c.dtype for c in calls),
            kernel=tuple(c.kernel for c in calls),
        )

    def select(self, index: torch.Tensor | Sequence[int]) -> AttentionBatch:
        """The calls at ``index`` (a bool mask or integer positions), in that order."""
        idx = torch.as_tensor(index)
        if idx.dtype == torch.bool:
            idx = torch.nonzero(idx).flatten()
        idx = idx.long()
        pos = idx.tolist()
        tensors = {f: getattr(self, f)[idx] for f in self.__dataclass_fields__
                   if f not in ("dtype", "kernel")}
        return AttentionBatch(**tensors, dtype=tuple(self.dtype[i] for i in pos),
                              kernel=tuple(self.kernel[i] for i in pos))

    def resolve_kernels(self, devices: Sequence[DeviceSpec]) -> tuple[str, ...]:
        """Each call's kernel, "auto" replaced by what vLLM runs on its device."""
        out = []
        for i, (k, dev) in enumerate(zip(self.kernel, devices)):
            if k == "auto":
                kv = "float8_e4m3fn" if self.kv_bytes[i] == 1 else self.dtype[i]
                k = vllm_kernel(dev, int(self.head_dim[i]), kv)
            out.append(k)
        return tuple(out)


# ---------------------------------------------------------------- which (query, key) pairs run
def _tri(n: torch.Tensor) -> torch.Tensor:
    """1 + 2 + … + n, zero for n ≤ 0."""
    n = n.clamp(min=0)
    return n * (n + 1) / 2


def attended_pairs(b: AttentionBatch) -> torch.Tensor:
    """Exact unmasked (query, key) pairs per (sequence, query head), shape (N,).

    Summed over positions p = kv − q … kv − 1: Σ hi(p) − Σ lo(p), each in closed form.
    Σ (p + 1) = T(kv) − T(kv − q) with T(n) = n(n + 1)/2; Σ max(0, p − w + 1) = T(kv − w) −
    T(kv − q − w).
    """
    q, kv, w = b.q_len, b.kv_len, b.window
    hi = torch.where(b.causal > 0, _tri(kv) - _tri(kv - q), q * kv)  # (N,)
    lo = torch.where(w > 0, _tri(kv - w) - _tri(kv - q - w), torch.zeros_like(q))  # (N,)
    return hi - lo


def _key_range(q_len: torch.Tensor, kv_len: torch.Tensor, causal: torch.Tensor,
               window: torch.Tensor, first: torch.Tensor, last: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """[lo, hi) keys seen by query rows first … last (0-based, inclusive), shape (N,) each."""
    p_first = kv_len - q_len + first
    p_last = kv_len - q_len + last
    hi = torch.where(causal > 0, p_last + 1, kv_len)
    lo = torch.where(window > 0, (p_first - window + 1).clamp(min=0), torch.zeros_like(hi))
    return lo, hi


def _tiles_over(lo: torch.Tensor, hi: torch.Tensor, kv_tile: torch.Tensor | float
                ) -> torch.Tensor:
    """Key blocks of ``kv_tile`` (aligned at key 0) that intersect [lo, hi)."""
    return (torch.ceil(hi / kv_tile) - torch.floor(lo / kv_tile)).clamp(min=0)


def masked_blocks(q_len: torch.Tensor, kv_len: torch.Tensor, causal: torch.Tensor,
                  window: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
                  kv_tile: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
    """Key blocks of the tile whose query rows are first … last (0-based, inclusive), and of
    them those some row sees only in part, shape (N,) each.

    A block every row of the tile sees whole lies between the last row's first key and the
    first row's last key; every other block the tile runs has scores to mask: the causal
    diagonal, a window's left edge, the ragged end of the keys.
    """
    lo, hi = _key_range(q_len, kv_len, causal, window, first, last)
    blocks = _tiles_over(lo, hi, kv_tile)
    lo_all, _ = _key_range(q_len, kv_len, causal, window, last, last)
    _, hi_all = _key_range(q_len, kv_len, causal, window, first, first)
    whole = (torch.floor(hi_all / kv_tile) - torch.ceil(lo_all / kv_tile)).clamp(min=0)
    return blocks, (blocks - whole).clamp(min=0)


@dataclass(frozen=True)
class AttentionGeometry:
    """How a call's work lands on the GPU: CTAs, key blocks per CTA, split-KV. Shapes (N,)."""

    rows_per_tile: torch.Tensor  # query rows one CTA's MMA tile holds (q_tile or decode_q_tile)
    ctas: torch.Tensor  # CTAs of the main kernel
    splits: torch.Tensor  # key splits per (sequence, KV head, query tile); 1 without split-KV
    tiles_mean: torch.Tensor  # key blocks one CTA runs, mean over CTAs
    tiles_max: torch.Tensor  # … and on the longest CTA (causal prefill: the last query tile)
    masked_mean: torch.Tensor  # … of them, those some row sees only in part (``masked_blocks``)
    masked_max: torch.Tensor  # … and on the longest CTA
    executed_pairs: torch.Tensor  # (query row, key) pairs the MMAs run, per call (padding in)
    requested_kv_bytes: torch.Tensor  # K and V bytes the CTAs load (L2 or DRAM), per call
    packed: torch.Tensor  # 1 where the query heads of a KV head share tiles (GQA packing)
    kv_tile: torch.Tensor  # keys per block
    combines: torch.Tensor  # 1 where a second kernel merges the splits' partial outputs
    persistent: torch.Tensor  # 1 where a persistent CTA prefetches its next tile
    ctas_per_sm: torch.Tensor  # CTAs one SM runs at once (``resident_ctas``)


def split_kv_splits(units: torch.Tensor, key_blocks: torch.Tensor, sm_count: torch.Tensor,
                    max_splits: int = 128, min_blocks: torch.Tensor | float = 2.0
                    ) -> torch.Tensor:
    """FlashAttention 2's ``num_splits_heuristic``, batched, shape (N,).

    ``units`` = sequences × KV heads × query tiles, the CTAs without a split. With at least 0.8
    of an SM each, or fewer than ``min_blocks`` key blocks, there is no split. Otherwise, over
    split counts s ≤ min(max_splits, SMs, key blocks) that change the blocks per split, the
    wave efficiency is n/⌈n⌉ with n = units·s/SMs, and the smallest s within 85% of the best
    wins.
    """
    out = torch.ones_like(units)
    need = (units < 0.8 * sm_count) & (key_blocks >= min_blocks)
    if not bool(need.any()):
        return out
    u, nb, sm = units[need], key_blocks[need], sm_count[need]
    cap = torch.minimum(torch.minimum(torch.full_like(nb, float(max_splits)), sm), nb)  # (M,)
    s = torch.arange(1, max_splits + 1, dtype=torch.float64).unsqueeze(0)  # (1, S)
    nb2 = nb.unsqueeze(1)
    eligible = (s == 1) | (torch.ceil(nb2 / s) != torch.ceil(nb2 / (s - 1).clamp(min=1)))
    eligible &= s <= cap.unsqueeze(1)  # (M, S)
    waves = u.unsqueeze(1) * s / sm.unsqueeze(1)
    eff = torch.where(eligible, waves / torch.ceil(waves), torch.zeros_like(waves))  # (M, S)
    best = eff.max(dim=1, keepdim=True).values
    ok = eligible & (eff >= 0.85 * best)
    first = torch.argmax(ok.to(torch.int8), dim=1).double() + 1.0  # first True; 1 if none
    out[need] = first
    return out


def fill_splits(units: torch.Tensor, key_blocks: torch.Tensor, sm_count: torch.Tensor
                ) -> torch.Tensor:
    """TensorRT-LLM's split of a single query's keys (``computeNumCtas`` in its
    ``fmhaKernels.h``), batched, shape (N,): min(key blocks, max(1, ⌊SMs / units⌋)), the most
    splits one wave of CTAs holds, never more than one per key block."""
    per_sm = torch.floor(sm_count / units).clamp(min=1.0)
    return torch.minimum(key_blocks.clamp(min=1.0), per_sm)


def mha_fwd_splits(b: AttentionBatch, sm_count: torch.Tensor, max_splits: int = 128
                   ) -> torch.Tensor:
    """The split count PyTorch's FlashAttention 2 picks for a multi-token query, (N,).

    Its ``mha_fwd`` (PyTorch's ``flash_api.cpp``, not vLLM's varlen path) calls
    ``set_params_splitkv`` for every call without dropout: ``num_splits_heuristic`` over
    batch · heads · ⌈q_len / 64⌉ query blocks, 2 · SMs slots and ⌈kv_len / block_n⌉ key blocks
    (``fa2_split_tiles``), and a call it splits runs the split-KV kernel. Single-query calls
    get 1 here (their split is ``attention_geometry``'s).
    """
    block_n = torch.tensor([float(fa2_split_tiles(int(d))[1]) for d in b.head_dim.tolist()],
                           dtype=torch.float64)
    units = b.batch * b.heads * torch.ceil(b.q_len / 64.0)
    key_blocks = torch.ceil(b.kv_len / block_n)
    splits = split_kv_splits(units, key_blocks, 2.0 * sm_count, max_splits, 2.0)
    return torch.where(single_query(b) > 0, torch.ones_like(splits), splits)


def single_query(b: AttentionBatch) -> torch.Tensor:
    """1 where a call runs as decode, shape (N,): the decode phase, and prefill of one token
    (vLLM sends a one-token query to its decode kernel)."""
    return ((b.decode > 0) | (b.q_len == 1)).double()


def triton_segmented(b: AttentionBatch, kernels: Sequence[str]) -> torch.Tensor:
    """Key segments a call's keys are split into by a kernel that segments instead of
    splitting by a heuristic (``KernelTraits.segments``), shape (N,): the kernel's segment count
    where it runs its segmented path, else 0.

    vLLM's Triton backend runs its 3D kernel, ``NUM_PAR_SOFTMAX_SEGMENTS`` = 16 segments of the
    keys and a ``reduce_segments`` kernel after, for a single query (``max_seqlen_q`` 1) of at
    most ``seq_threshold_3D`` = ``MIN_LAUNCH_GRID_SIZE_2D`` (128) // kv_heads sequences; every
    other call runs its 2D kernel, one CTA per (query block, KV head), unsplit.
    """
    seg = torch.tensor([float(KERNELS[k].segments) for k in kernels], dtype=torch.float64)
    grid = torch.tensor([float(KERNELS[k].segment_grid) for k in kernels], dtype=torch.float64)
    on = (seg > 0) & (single_query(b) > 0) & (b.batch <= torch.floor(grid / b.kv_heads))
    return torch.where(on, seg, torch.zeros_like(seg))


def gqa_copy_kernels(b: AttentionBatch, kernels: Sequence[str]) -> torch.Tensor:
    """Copy kernels a call runs beside its attention kernel, shape (N,): 2 or 0.

    vLLM's FlashAttention 2 (``mha_varlen_fwd``) runs a single query whose KV heads are shared
    (``seqlenq_ngroups_swapped``: one query token, heads > kv_heads, no window, no dropout, d a
    multiple of 8) with its group as query rows:
    ``q.reshape(b, h_k, g, d).transpose(1, 2).reshape(b·g, h_k, d)``, and the output back the
    same way. ``reshape`` returns a view only where the strides allow one, which a transposed
    tensor's do only when a dimension it merges is 1: with more than one sequence and more than
    one KV head both reshapes copy (``KernelTraits.copies_packed_gqa``), wherever ``pack_gqa``
    packs the group. The measurements show the two copies as a step from batch 1 to 2 in that
    layout alone (``benchmarks/results/attention.md``).
    """
    copies = torch.tensor([KERNELS[k].copies_packed_gqa for k in kernels], dtype=torch.bool)
    swapped = (pack_gqa(b, kernels) > 0) & (b.heads > b.kv_heads)
    return 2.0 * (copies & swapped & (b.batch > 1) & (b.kv_heads > 1)).double()


def varlen_schedule_kernels(b: AttentionBatch, kernels: Sequence[str]) -> torch.Tensor:
    """Scheduling kernels a call runs before its attention kernel, shape (N,): 1 or 0.

    FlashAttention 3's ``mha_fwd`` plans a varlen call's splits dynamically when it has at most
    992 sequences (``use_dynamic_split = is_varlen && b <= 992``: 32 · 31, the most its
    ``prepare_varlen_num_blocks`` kernel handles), and then runs that kernel before the
    attention kernel (``KernelTraits.schedules_varlen``), unless the caller hands it a schedule
    computed ahead (``AttentionCall.scheduled``). vLLM calls its varlen entry.
    """
    plans = torch.tensor([KERNELS[k].schedules_varlen for k in kernels], dtype=torch.bool)
    return (plans & (b.batch <= 992) & (b.scheduled == 0)).double()


def side_kernels(b: AttentionBatch, kernels: Sequence[str]) -> torch.Tensor:
    """Small kernels a call runs beside its attention kernel, split-KV combine aside, shape
    (N,): ``gqa_copy_kernels`` plus ``varlen_schedule_kernels``."""
    return gqa_copy_kernels(b, kernels) + varlen_schedule_kernels(b, kernels)


def pack_gqa(b: AttentionBatch, kernels: Sequence[str]) -> torch.Tensor:
    """1 where the query heads of a KV head share tiles, per ``KERNELS`` traits, shape (N,)."""
    single = single_query(b) > 0
    prefill = torch.tensor([KERNELS[k].packs_prefill for k in kernels], dtype=torch.bool)
    windowed = torch.tensor([KERNELS[k].packs_windowed_decode for k in kernels],
                            dtype=torch.bool)
    decode = windowed | (b.window == 0)
    return torch.where(single, decode, prefill).double()


def attention_geometry(b: AttentionBatch, sm_count: torch.Tensor, packed: torch.Tensor, *,
                       q_tile: torch.Tensor | float = 128, kv_tile: torch.Tensor | float = 128,
                       decode_q_tile: torch.Tensor | float = 16,
                       max_splits: int = 128, min_split_blocks: torch.Tensor | float = 2.0,
                       split_prefill: torch.Tensor | float = 0.0,
                       split_slots_per_sm: torch.Tensor | float = 1.0,
                       split_packed_only: torch.Tensor | float = 0.0,
                       split_fill: torch.Tensor | float = 0.0,
                       combine_kernel: torch.Tensor | float = 1.0,
                       prefetch: torch.Tensor | float = 0.0,
                       ctas_per_sm: torch.Tensor | float = 1.0,
                       segments: torch.Tensor | float = 0.0,
                       exact_tiles: int = 256) -> AttentionGeometry:
    """Grid, key blocks per CTA and split-KV for every call on SMs ``sm_count`` (N,).

    A tile holds ``q_tile`` query rows of one query head, or, where ``packed`` (N,) is 1, of
    the heads / kv_heads query heads that share a KV head, interleaved per position, so one
    tile spans q_tile / group positions and K/V are loaded once for the group; its key blocks
    hold ``kv_tile`` keys. Tile t runs the key blocks between lo of its first position and hi of
    its last. Single-query calls (``single_query``) run ``decode_q_tile`` rows and split the key
    blocks over ``split_kv_splits`` CTAs (never fewer than ``min_split_blocks`` (N,) blocks).
    Where ``split_prefill`` (N,) is 1, multi-token queries split their key blocks too
    (``KernelTraits.splits_prefill``); where ``split_packed_only`` (N,) is 1 a single query
    splits only if it is packed with more than one query head a KV head; the heuristic counts
    ``split_slots_per_sm`` (N,) CTAs an SM. Where ``split_fill`` (N,) is 1 a single query
    splits by ``fill_splits`` instead. ``combine_kernel`` (N,) is 1 where a split call runs a
    second kernel to merge its splits. ``prefetch`` (N,) is 1 where the kernel's persistent
    scheduler prefetches the next tile; it runs unless a single query splits. The three tile
    sizes are numbers or (N,) tensors (``kernel_tiles``); ``ctas_per_sm`` (N,) is the CTAs an
    SM runs at once (``resident_ctas``). Where ``segments`` (N,) is above 0 a call's keys split
    into that many segments instead (``triton_segmented``), and a call of a kernel that segments
    (``min_split_blocks`` infinite there) splits no other way.

    Up to ``exact_tiles`` tiles per call are counted one by one; a call with more is counted on
    ``exact_tiles`` tiles at the midpoints of equal strata, each standing for its stratum (the
    blocks per tile change smoothly with t, so the sum is within about 2% of the exact one).
    """
    single = single_query(b) > 0
    group = b.heads / b.kv_heads
    g = torch.where(packed > 0, group, torch.ones_like(group))  # query heads per tile (N,)
    # a tile's MMA runs its rows in steps of the MMA's M (16): a prefill shorter than a tile
    # runs the steps its rows fill, not the whole tile
    q_tile, kv_tile, decode_q_tile = (torch.as_tensor(t, dtype=torch.float64).expand(len(g))
                                      for t in (q_tile, kv_tile, decode_q_tile))
    steps = torch.ceil(g * b.q_len / MMA_M) * MMA_M
    rows = torch.where(single, decode_q_tile, torch.minimum(steps, q_tile))
    positions = rows / g  # query positions per tile, fractional when a group spills over
    n_t = torch.ceil(g * b.q_len / rows)  # tiles per (sequence, head group)
    units = b.batch * (b.heads / g) * n_t  # CTAs before any split

    sampled = n_t > exact_tiles
    weight = torch.where(sampled, n_t / exact_tiles, torch.ones_like(n_t))
    n_eff = torch.minimum(n_t, torch.full_like(n_t, float(exact_tiles)))
    # calls sorted by tiles to visit, so iteration j works on a prefix of those still live
    order = torch.argsort(n_eff, descending=True)
    q, kv, causal, window = (x[order] for x in (b.q_len, b.kv_len, b.causal, b.window))
    pos_s, w_s, samp_s, n_t_s = positions[order], weight[order], sampled[order], n_t[order]
    kv_tile_s = kv_tile[order]

    def blocks_of(t: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Key blocks of tile t and, of them, the masked ones (``masked_blocks``), (n,) each."""
        first = torch.minimum(torch.floor(t * pos_s[:n]), q[:n] - 1)
        last = torch.minimum(torch.ceil((t + 1) * pos_s[:n]), q[:n]) - 1
        return masked_blocks(q[:n], kv[:n], causal[:n], window[:n], first, last, kv_tile_s[:n])

    blocks_sum = torch.zeros_like(n_t)
    masked_sum = torch.zeros_like(n_t)
    # the last tile sees the most keys if causal
    blocks_max, masked_max = blocks_of(n_t_s - 1, len(n_t_s))
    live = n_eff[order]
    for j in range(int(live.max())):
        n = int((live > j).sum())
        t = torch.where(samp_s[:n], torch.floor((j + 0.5) * w_s[:n]),
                        torch.full((n,), float(j), dtype=torch.float64))
        blocks, masked = blocks_of(t, n)
        blocks_sum[:n] += blocks * w_s[:n]
        masked_sum[:n] += masked * w_s[:n]
        more = blocks > blocks_max[:n]
        blocks_max[:n] = torch.where(more, blocks, blocks_max[:n])
        masked_max[:n] = torch.where(more, masked, masked_max[:n])
    unsort = torch.empty_like(order)
    unsort[order] = torch.arange(len(order))
    blocks_sum, blocks_max = blocks_sum[unsort], blocks_max[unsort]
    masked_sum, masked_max = masked_sum[unsort], masked_max[unsort]

    swapped = (packed > 0) & (group > 1)
    single_ok = single & (swapped | (torch.as_tensor(split_packed_only, dtype=torch.float64) == 0))
    splittable = single_ok | (torch.as_tensor(split_prefill, dtype=torch.float64) > 0)
    splits = split_kv_splits(torch.where(splittable, units, torch.full_like(units, 1e9)),
                             blocks_max, sm_count * split_slots_per_sm, max_splits,
                             min_split_blocks)
    fill = (torch.as_tensor(split_fill, dtype=torch.float64).expand(len(g)) > 0) & single
    splits = torch.where(fill, fill_splits(units, blocks_max, sm_count), splits)
    seg = torch.as_tensor(segments, dtype=torch.float64).expand(len(g))
    splits = torch.where(seg > 0, seg, splits)
    combines = ((splits > 1).double()
                * torch.as_tensor(combine_kernel, dtype=torch.float64).expand(len(g)))
    bytes_per_block = 2.0 * kv_tile * b.head_dim * b.kv_bytes  # K and V of one key block
    return AttentionGeometry(
        rows_per_tile=rows,
        ctas=units * splits,
        splits=splits,
        tiles_mean=blocks_sum / n_t / splits,
        tiles_max=torch.ceil(blocks_max / splits),
        masked_mean=masked_sum / n_t / splits,
        masked_max=torch.minimum(masked_max, torch.ceil(blocks_max / splits)),
        executed_pairs=b.batch * (b.heads / g) * blocks_sum * rows * kv_tile,
        requested_kv_bytes=b.batch * (b.heads / g) * blocks_sum * bytes_per_block,
        packed=(packed > 0).double(),
        kv_tile=kv_tile.clone(),
        combines=combines,
        persistent=(torch.as_tensor(prefetch, dtype=torch.float64).expand(len(g)).clone()
                    * ((splits == 1) & single).double()),
        ctas_per_sm=torch.as_tensor(ctas_per_sm, dtype=torch.float64).expand(len(g)).clone(),
    )


def attention_flops(b: AttentionBatch) -> torch.Tensor:
    """FLOPs the attention needs, (N,): 4·d per unmasked (query, key) pair per query head
    (2·d for QKᵀ, 2·d for PV), summed over sequences and heads."""
    return 4.0 * b.head_dim * b.batch * b.heads * attended_pairs(b)


def attention_bytes(b: AttentionBatch) -> dict[str, torch.Tensor]:
    """Compulsory DRAM traffic per call, (N,) each: Q and K/V read once, O written once.

    K and V are read per KV head, so GQA divides them by heads / kv_heads. Only the keys some
    query can see are read: with a window, decode reads the last ``window`` keys alone.
    The score matrix never leaves the chip.
    """
    q_bytes = b.batch * b.heads * b.q_len * b.head_dim * b.in_bytes
    lo, hi = _key_range(b.q_len, b.kv_len, b.causal, b.window, torch.zeros_like(b.q_len),
                        b.q_len - 1)
    keys = hi - lo  # keys seen by any query row (N,)
    k_bytes = b.batch * b.kv_heads * keys * b.head_dim * b.kv_bytes
    out = {"q_bytes": q_bytes, "k_bytes": k_bytes, "v_bytes": k_bytes.clone(),
           "o_bytes": q_bytes.clone()}
    out["compulsory_bytes"] = q_bytes + 2.0 * k_bytes + q_bytes
    return out


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
              l2_steepness: float, warm_l2: bool) -> torch.Tensor:
    """Share of ``working_set`` bytes (N,) a warm L2 still holds when the call is re-run on the
    same buffers: 1 / (1 + (bytes / (share · L2))^steepness); 0 with a cold L2."""
    if not warm_l2:
        return torch.zeros_like(working_set)
    return 1.0 / (1.0 + (working_set / (l2_share * dev.l2_bytes)) ** l2_steepness)


def attention_time(b: AttentionBatch, geo: AttentionGeometry, dev: DeviceColumns,
                   family: torch.Tensor, constants: Mapping[str, torch.Tensor], *,
                   fp8_elements: torch.Tensor | float = 0.0,
                   side_count: torch.Tensor | float = 0.0,
                   specialized: torch.Tensor | float = 0.0,
                   l2_share: float, l2_steepness: float, warm_l2: bool
                   ) -> dict[str, torch.Tensor]:
    """Time (ms) of every call and its parts, the KV-cache write (``kv_cache_write_s``)
    included where the call makes one, from physical ``constants`` (``PARAMS`` names, physical
    units). ``family`` (N,) indexes ``FAMILIES``; ``fp8_elements`` (N,) is
    ``fp8_converted``; ``side_count`` (N,) is ``side_kernels``; ``specialized`` (N,) is 1 where
    the kernel is warp-specialized (``warp_specialized``). Differentiable in the constants. With ``warm_l2``, a compulsory working set below ``l2_share`` of the L2 stays
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
    # tensor peaks per SM-cycle differ 7.6x (``benchmarks/results/attention.md``)
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
    hit = _warm_hit(compulsory, dev, l2_share, l2_steepness, warm_l2)
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
                               l2_steepness=l2_steepness, warm_l2=warm_l2)
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
                     l2_bw: torch.Tensor, l2_share: float, l2_steepness: float, warm_l2: bool
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
    hit = _warm_hit(cache_bytes, dev, l2_share, l2_steepness, warm_l2)
    dram_bw = c["cache_write_efficiency"] * dev.dram_bw_bytes_per_s
    sm_s = (b.batch * b.q_len * c["cache_token_ns"] * 1e-9
            + (b.kv_bytes == 1).double() * elements * c["cache_fp8_cycles"] / dev.clock_hz)
    seconds = cache_bytes * ((1.0 - hit) / dram_bw + hit / l2_bw) + sm_s / dev.sm_count
    return seconds * b.cache_write


@dataclass(frozen=True)
class AttentionPrediction:
    """Predicted time per call, with the physics that explains it; every tensor is (N,)."""

    time_ms: torch.Tensor
    flops: torch.Tensor  # needed: 4·d per unmasked pair and query head
    executed_flops: torch.Tensor  # run by the MMAs: whole key blocks, padded query tiles
    dram_bytes: torch.Tensor  # compulsory traffic that misses the L2
    compute_ms: torch.Tensor  # tensor cores and softmax of the busiest SM
    memory_ms: torch.Tensor  # DRAM and L2 traffic at their sustained rates
    bound: tuple[str, ...]  # "compute", "memory" or "latency" (fixed per-CTA costs, launch)
    kernel: tuple[str, ...]  # the kernel each call was priced as
    details: Mapping[str, torch.Tensor] = field(default_factory=dict)


def _bound(compute_ms: torch.Tensor, memory_ms: torch.Tensor, latency_ms: torch.Tensor
           ) -> tuple[str, ...]:
    names = ("compute", "memory", "latency")
    which = torch.stack([compute_ms, memory_ms, latency_ms], dim=1).argmax(dim=1)  # (N,)
    return tuple(names[i] for i in which.tolist())


def _batch_of(calls: AttentionBatch | Sequence[AttentionCall]) -> AttentionBatch:
    return calls if isinstance(calls, AttentionBatch) else AttentionBatch.from_calls(calls)


class AttentionRoofline:
    """The pure roofline: max(needed FLOPs / datasheet peak, compulsory bytes / datasheet DRAM
    bandwidth). No fitted parameter, no launch cost: the baseline every fit is scored against."""

    name = "roofline"

    def predict(self, calls: AttentionBatch | Sequence[AttentionCall],
                device: DeviceSpec | str) -> AttentionPrediction:
        b = _batch_of(calls)
        dev = get_device(device)
        return self._predict(b, [dev] * len(b))

    def predict_measured(self, measured: Any) -> torch.Tensor:
        """Time (ms) of every measured row on its own GPU, (N,)."""
        devices = [measured.device(g) for g in measured.gpu]
        return self._predict(measured.calls, devices).time_ms

    @staticmethod
    def _predict(b: AttentionBatch, devices: Sequence[DeviceSpec]) -> AttentionPrediction:
        dev = DeviceColumns.of(devices, b.dtype)
        flops = attention_flops(b)  # (N,)
        traffic = attention_bytes(b)["compulsory_bytes"]  # (N,)
        compute_ms = flops / dev.peak_flops_per_s * 1e3
        memory_ms = traffic / dev.dram_bw_bytes_per_s * 1e3
        return AttentionPrediction(
            time_ms=torch.maximum(compute_ms, memory_ms), flops=flops, executed_flops=flops,
            dram_bytes=traffic, compute_ms=compute_ms, memory_ms=memory_ms,
            bound=_bound(compute_ms, memory_ms, torch.zeros_like(flops)),
            kernel=b.resolve_kernels(devices))


FORMAT = "torch_gemm_cost.attention"
_HYPER = ("q_tile", "kv_tile", "decode_q_tile", "max_splits", "l2_share", "l2_steepness",
          "steps", "lr", "rows_per_group", "seed")


class AttentionPredictor:
    """The fitted fused-attention model (see the module docstring): physical constants shared
    by every GPU, fitted on measured calls.

    Hyperparameters: the tile sizes of kernels whose source is not public (``q_tile`` query
    rows, ``kv_tile`` keys, ``decode_q_tile`` rows of a packed single-query tile; FlashAttention
    2 and 3 run their own, ``kernel_tiles``), FlashAttention 2's ``max_splits``,
    the resident share of the L2 and the steepness of its fall-off for a warm working set, and
    the fit's ``steps``, ``lr``, ``rows_per_group`` (seeded sample per gpu × phase × KV dtype)
    and ``seed``.
    """

    name = "attention"
    version = "8"
    params_: dict[str, torch.Tensor]  # raw (unconstrained) constants, ``PARAMS`` order
    metadata_: dict[str, Any]  # provenance and metrics, saved with the weights

    def __init__(self, *, q_tile: int = 128, kv_tile: int = 128, decode_q_tile: int = 16,
                 max_splits: int = 128, l2_share: float = 0.75, l2_steepness: float = 4.0,
                 steps: int = 500, lr: float = 0.05, rows_per_group: int = 4000,
                 seed: int = 0) -> None:
        self.q_tile = q_tile
        self.kv_tile = kv_tile
        self.decode_q_tile = decode_q_tile
        self.max_splits = max_splits
        self.l2_share = l2_share
        self.l2_steepness = l2_steepness
        self.steps = steps
        self.lr = lr
        self.rows_per_group = rows_per_group
        self.seed = seed
        # held-out residual quantiles (``bounds``); set by training or by the weights file
        self.intervals_: AttentionIntervals | None = None

    def get_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _HYPER}

    # ------------------------------------------------------------ the forward pass
    def _raw_init(self) -> dict[str, torch.Tensor]:
        return {n: torch.tensor(_to_raw(v, kind), dtype=torch.float64)
                for n, (v, kind) in PARAMS.items()}

    @staticmethod
    def _physical(raw: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: _to_physical(raw[n], kind) for n, (_, kind) in PARAMS.items()}

    def _inputs(self, b: AttentionBatch, devices: Sequence[DeviceSpec]
                ) -> tuple[AttentionGeometry, DeviceColumns, torch.Tensor, tuple[str, ...]]:
        kernels = b.resolve_kernels(devices)
        dev = DeviceColumns.of(devices, b.dtype)
        # with dropout no kernel splits the keys (FlashAttention 2's set_params_splitkv)
        min_split = torch.tensor([float(KERNELS[k].min_split_blocks) for k in kernels],
                                 dtype=torch.float64)
        # … and a kernel that segments its keys (vLLM's Triton) splits no other way
        segmenting = torch.tensor([KERNELS[k].segments > 0 for k in kernels])
        min_split = torch.where((b.dropout > 0) | segmenting,
                                torch.full_like(min_split, math.inf), min_split)
        segments = triton_segmented(b, kernels)
        # a multi-token query that PyTorch's FlashAttention 2 splits runs its split-KV kernel
        as_decode = torch.tensor([KERNELS[k].splits_prefill_as_decode for k in kernels])
        split_kernel = torch.zeros(len(kernels), dtype=torch.bool)
        if bool(as_decode.any()):
            split_kernel = (as_decode & (b.dropout == 0)
                            & (mha_fwd_splits(b, dev.sm_count, self.max_splits) > 1))
        q_tile, kv_tile, decode_q_tile, per_sm = self._tiles(b, kernels, devices, split_kernel,
                                                             segments > 0)
        geo = attention_geometry(b, dev.sm_count, pack_gqa(b, kernels), q_tile=q_tile,
                                 kv_tile=kv_tile, decode_q_tile=decode_q_tile,
                                 max_splits=self.max_splits, min_split_blocks=min_split,
                                 split_prefill=torch.tensor(
                                     [float(KERNELS[k].splits_prefill) for k in kernels],
                                     dtype=torch.float64).maximum(split_kernel.double()),
                                 split_slots_per_sm=torch.tensor(
                                     [float(KERNELS[k].split_slots_per_sm) for k in kernels],
                                     dtype=torch.float64),
                                 split_packed_only=torch.tensor(
                                     [float(KERNELS[k].splits_packed_decode_only)
                                      for k in kernels], dtype=torch.float64),
                                 split_fill=torch.tensor(
                                     [float(KERNELS[k].splits_to_fill) for k in kernels],
                                     dtype=torch.float64),
                                 combine_kernel=torch.tensor(
                                     [float(KERNELS[k].combine_kernel) for k in kernels],
                                     dtype=torch.float64),
                                 prefetch=torch.tensor(
                                     [float(KERNELS[k].prefetches_next_tile) for k in kernels],
                                     dtype=torch.float64),
                                 ctas_per_sm=per_sm, segments=segments)
        family = torch.tensor([FAMILIES.index(KERNELS[k].family) for k in kernels],
                              dtype=torch.long)
        return geo, dev, family, kernels

    def _tiles(self, b: AttentionBatch, kernels: Sequence[str], devices: Sequence[DeviceSpec],
               split_kernel: torch.Tensor, segmented: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each call's (q_tile, kv_tile, decode_q_tile) (``kernel_tiles``), the
        hyperparameters where a kernel's source is not public, and the CTAs an SM holds
        (``resident_ctas``), (N,) each. ``split_kernel`` (N,): calls that run their kernel's
        split-KV variant, as a single query does; ``segmented`` (N,): calls that run their
        kernel's segmented path (``triton_segmented``)."""
        default = (self.q_tile, self.kv_tile, self.decode_q_tile)
        single = ((single_query(b) > 0) | split_kernel).tolist()
        sm8x = [d.compute_capability in ("8.6", "8.7", "8.9") for d in devices]
        smem = [d.smem_bytes_per_sm for d in devices]
        # the packed query length sets FlashInfer's tiles only: 0 elsewhere keeps the memo
        # to one entry per kernel and head size
        packed_q = [q if k == "flashinfer" else 0 for k, q in
                    zip(kernels, (b.q_len * b.heads / b.kv_heads).tolist())]
        # … and the group size TensorRT-LLM's generation tiles and vLLM's Triton tiles only
        group = [int(gr) if (k == "trtllm" and one) or k == "triton" else 1 for k, gr, one in
                 zip(kernels, (b.heads / b.kv_heads).tolist(), single)]
        keys = zip(kernels, b.head_dim.tolist(), b.kv_bytes.tolist(), b.causal.tolist(),
                   (b.window > 0).tolist(), single, sm8x, smem, b.in_bytes.tolist(), packed_q,
                   group, segmented.tolist())
        memo: dict[tuple[Any, ...], tuple[int, int, int, int]] = {}
        rows = []
        for key in keys:
            if key not in memo:
                k, d, kv, causal, windowed, one, minor, shared, qb, pq, gr, seg = key
                tiles = kernel_tiles(k, int(d), int(kv), causal=bool(causal),
                                     windowed=bool(windowed), single=bool(one),
                                     default=default, sm8x=minor, smem_bytes_per_sm=shared,
                                     in_bytes=int(qb), packed_q=int(pq), group=gr,
                                     segmented=bool(seg))
                memo[key] = (*tiles, resident_ctas(k, int(d), int(kv), in_bytes=int(qb),
                                                   packed_q=int(pq), smem_bytes_per_sm=shared))
            rows.append(memo[key])
        t = torch.tensor(rows, dtype=torch.float64).reshape(-1, 4)
        return t[:, 0], t[:, 1], t[:, 2], t[:, 3]

    def _check_fitted(self) -> dict[str, torch.Tensor]:
        raw = getattr(self, "params_", None)
        if raw is None:
            raise ValueError("AttentionPredictor is not fitted: call fit(measured) or load() a "
                             "weights file first (the shipped one: AttentionPredictor.shipped())")
        return self._physical(raw)

    def _predict(self, b: AttentionBatch, devices: Sequence[DeviceSpec], warm_l2: bool
                 ) -> AttentionPrediction:
        constants = self._check_fitted()
        geo, dev, family, kernels = self._inputs(b, devices)
        out = attention_time(b, geo, dev, family, constants,
                             fp8_elements=fp8_converted(b, kernels),
                             side_count=side_kernels(b, kernels),
                             specialized=warp_specialized(kernels), l2_share=self.l2_share,
                             l2_steepness=self.l2_steepness, warm_l2=warm_l2)
        details = {k: v for k, v in out.items()
                   if k not in ("time_ms", "compute_ms", "memory_ms", "dram_bytes")}
        details.update(ctas=geo.ctas, splits=geo.splits, packed=geo.packed,
                       key_blocks_per_cta=geo.tiles_mean)
        return AttentionPrediction(
            time_ms=out["time_ms"], flops=attention_flops(b),
            executed_flops=4.0 * b.head_dim * geo.executed_pairs, dram_bytes=out["dram_bytes"],
            compute_ms=out["compute_ms"], memory_ms=out["memory_ms"],
            bound=_bound(out["compute_ms"], out["memory_ms"], out["latency_ms"]),
            kernel=kernels, details=details)

    def predict(self, calls: AttentionBatch | Sequence[AttentionCall],
                device: DeviceSpec | str, *, warm_l2: bool = False) -> AttentionPrediction:
        """Predicted time of every call on ``device``. ``warm_l2``: the call is re-run on the
        same buffers, as in the measurements, so a working set that fits stays in the L2;
        inside a model each layer reads other K/V, so the default is a cold L2."""
        b = _batch_of(calls)
        return self._predict(b, [get_device(device)] * len(b), warm_l2)

    def predict_measured(self, measured: Any) -> torch.Tensor:
        """Time (ms) of every measured row on its own GPU, re-run warm as measured, (N,)."""
        devices = [measured.device(g) for g in measured.gpu]
        return self._predict(measured.calls, devices, warm_l2=True).time_ms

    # ------------------------------------------------------------ fitting
    def fit(self, measured: Any) -> AttentionPredictor:
        """Fit every constant on measured calls (``measured.attention.MeasuredAttention``);
        returns self.

        Each (gpu, phase, KV dtype) group gives at most ``rows_per_group`` seeded-random rows
        and equal total weight; the loss is the mean |log(predicted / measured)|, full-batch
        Adam with a cosine schedule. Runs warm, as the measurements did.
        """
        gen = torch.Generator().manual_seed(self.seed)
        groups: dict[tuple[str, str, str], list[int]] = {}
        for i, key in enumerate(zip(measured.gpu, measured.phase, measured.kv_dtype)):
            groups.setdefault(key, []).append(i)
        if not groups:
            raise ValueError("no measured attention rows to fit")
        chosen: list[int] = []
        weights: list[float] = []
        for key in sorted(groups):
            idx = torch.tensor(groups[key])
            idx = idx[torch.randperm(len(idx), generator=gen)[: self.rows_per_group]]
            chosen += idx.tolist()
            weights += [1.0 / len(idx)] * len(idx)
        sub = measured.select(torch.tensor(chosen))
        w = torch.tensor(weights, dtype=torch.float64)
        w = w / w.sum()
        devices = [get_device(g) for g in sub.gpu]
        geo, dev, family, kernels = self._inputs(sub.calls, devices)
        fp8 = fp8_converted(sub.calls, kernels)
        extra = side_kernels(sub.calls, kernels)
        specialized = warp_specialized(kernels)
        log_y = torch.log(sub.latency_ms)

        t0 = time.perf_counter()
        raw = self._raw_init()
        for t in raw.values():
            t.requires_grad_(True)
        opt = torch.optim.Adam(list(raw.values()), lr=self.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(self.steps, 1))
        history = []
        for step in range(self.steps):
            opt.zero_grad()
            pred = attention_time(sub.calls, geo, dev, family, self._physical(raw),
                                  fp8_elements=fp8, side_count=extra, specialized=specialized,
                                  l2_share=self.l2_share, l2_steepness=self.l2_steepness,
                                  warm_l2=True)["time_ms"]
            loss = (w * (torch.log(pred) - log_y).abs()).sum()
            loss.backward()
            opt.step()
            sched.step()
            if step % 50 == 0 or step == self.steps - 1:
                history.append((step, round(float(loss.detach()), 5)))
        self.params_ = {k: v.detach().clone() for k, v in raw.items()}
        self.loss_history_ = history
        self.n_train_rows_ = len(chosen)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def physical_constants(self) -> dict[str, float]:
        """The fitted constants in their physical units (see ``PARAMS``)."""
        return {k: float(v) for k, v in self._check_fitted().items()}

    def bounds(self, time_ms: torch.Tensor, decode: torch.Tensor, level: float = 0.8
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(lo, hi) at ``level`` of predicted times (N,) of calls whose phase ``decode`` (N,)
        gives (1: decode): the held-out residual quantiles the weights carry
        (``intervals_``, ``predict.intervals.AttentionIntervals``)."""
        cal = self.intervals_
        if cal is None:
            raise ValueError("these attention weights carry no interval calibration (refit: "
                             "python -m torch_gemm_cost.train.attention)")
        return cal.bounds(time_ms, decode, level)

    # ------------------------------------------------------------ persistence (JSON)
    def to_dict(self, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self._check_fitted()
        return {
            "format": FORMAT,
            "version": self.version,
            "hyperparameters": self.get_params(),
            "params": {k: float(v) for k, v in self.params_.items()},
            "physical_constants": self.physical_constants(),
            **({"intervals": self.intervals_.to_dict()}
               if self.intervals_ is not None else {}),
            "metadata": dict(metadata if metadata is not None
                             else getattr(self, "metadata_", {}) or {}),
        }

    def save(self, path: str | Path, metadata: Mapping[str, Any] | None = None) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(metadata), indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> AttentionPredictor:
        if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
            raise ValueError(f"expected format {FORMAT!r}")
        if str(doc.get("version")) != cls.version:
            raise ValueError(f"version {doc.get('version')} weights; this predictor reads "
                             f"version {cls.version} (refit: python -m "
                             "torch_gemm_cost.train.attention)")
        hyper = dict(doc["hyperparameters"])
        unknown = sorted(set(hyper) - set(_HYPER))
        if unknown:
            raise ValueError(f"unknown hyperparameters {unknown}; known: {list(_HYPER)}")
        model = cls(**hyper)
        params = {}
        for name in PARAMS:
            if name not in doc["params"]:
                raise ValueError(f"missing parameter {name!r}")
            value = float(doc["params"][name])
            if not math.isfinite(value):
                raise ValueError(f"parameter {name!r} is not finite")
            params[name] = torch.tensor(value, dtype=torch.float64)
        extra = sorted(set(doc["params"]) - set(PARAMS))
        if extra:
            raise ValueError(f"unknown parameters {extra}")
        model.params_ = params
        model.intervals_ = (AttentionIntervals.from_dict(doc["intervals"])
                            if "intervals" in doc else None)
        model.metadata_ = dict(doc.get("metadata", {}))
        return model

    @classmethod
    def load(cls, path: str | Path) -> AttentionPredictor:
        """Weights written by ``save``; a missing, corrupt or mismatched file raises an error
        that names it."""
        return read_fitted(path, "attention weights file", FORMAT, cls.from_dict)

    @classmethod
    def shipped(cls) -> AttentionPredictor:
        """The weights that ship with the package (``data/attention_weights.json``)."""
        from importlib import resources

        ref = resources.files("torch_gemm_cost").joinpath(WEIGHTS_FILE)
        with resources.as_file(ref) as real:
            return cls.load(real)


WEIGHTS_FILE = "data/attention_weights.json"
