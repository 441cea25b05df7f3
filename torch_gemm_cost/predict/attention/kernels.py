"""Attention kernels as the time model sees them: each kernel's structure (``KernelTraits``),
which kernel a serving engine or PyTorch runs on a device, and the tiles it runs (see the
package docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...hardware.catalog import DeviceSpec
from ...hardware.dtypes import resolve_dtype


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
