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

**Time.** Per CTA: a fixed chain in SM-cycles (prologue, epilogue), its Q load, and per key block
the larger (soft max) of its compute (tensor cores ⊕ softmax, and with an fp8 KV cache the
conversion its kernel does on the SM: ``fp8_converted``) and its traffic plus a per-block latency.
How far the MMAs and the softmax overlap, and how long a CTA's setup is, follow the kernel's
schedule (``KernelTraits.warp_specialized``): FlashAttention 3 and TensorRT-LLM run producer and
consumer warps over asynchronous MMAs and overlap one tile's softmax with another's MMAs, while
FlashAttention 2, FlashInfer's sm80 template and the Triton kernels issue ``mma.sync`` and run the
softmax in the same warps, so the two add up. Each schedule has its own overlap exponent and setup
cycles: the synchronous exponent sits near 1 (about a sum), the specialized one between 2 and 3
(closer to a max). The chain is counted in SM-cycles, not µs: a unit of work takes 4.7 µs on the
L40S as on the A100, though the L40S does half the A100's bf16 MMA work per SM-cycle, so a chain in
µs cannot serve both. A key block that some row of the tile sees only in part (the causal diagonal,
a window's left edge, the ragged end of the keys) has its scores masked element by element on the
SM: SM-cycles per pair of such a block (``masked_blocks``). A CTA retires once its O store is
issued, so the store holds an SM in the grid's last wave alone. Both weigh most where a tile runs
few key blocks, all of them masked: a windowed prefill of more than 128 tokens runs two or three a
tile. A CTA's traffic runs at its SM's L2 port (shared by the CTAs resident on the SM), and what
comes from DRAM at the CTA's share of the chip's DRAM bandwidth among the CTAs that run at once, no
faster than the port: a grid that fills the SMs gets an SM's share each, but a decode of a few long
MHA sequences (vLLM's FlashAttention 2 splits no MHA decode) streams each CTA's keys faster. On an
L40S, 32 CTAs streaming 268 MB run at 743 GB/s, where an SM's share of the DRAM (1/142) would give
them 190 GB/s. The grid takes max(⌈CTAs / SMs⌉ · mean CTA, longest CTA); the kernel takes the soft
max of the grid and the chip-wide DRAM and L2 roofs; a launch floor comes on top, and each small
kernel the call runs beside its main one (a split-KV combine, FlashAttention 2's GQA copies and
FlashAttention 3's schedule: ``side_kernels``) costs a count of SM clocks, as the GEMM model's
kernel floor does: the two copies add about 8,600-9,000 SM clocks on the A100 and the L40S, about
4,600-5,000 clocks each. Where a kernel's launch sizes it to run r CTAs an SM at once
(``resident_ctas``: FlashInfer's prefill kernel, two where two fit in an SM's shared memory), the r
CTAs of the busiest SM (at most ⌈CTAs / SMs⌉) share its tensor cores, softmax units and bandwidth
but overlap their latency chains: a wave of r · SMs CTAs takes one fixed chain and one per-block
latency, and r times each CTA's compute and traffic.

**The KV-cache write.** A serving engine's attention layer first writes the new tokens' K and V into
its paged cache, then runs the kernel: vLLM's ``reshape_and_cache_flash``, one CTA per token, reads
q_len · kv_heads · d · 2 elements in the compute dtype and writes them in the cache dtype
(quantizing them when the cache is fp8). The measured calls time the layer's ``forward``, write
included (aiconfigurator's ``collector/vllm/collect_attn.py`` calls ``impl.forward`` with the new K
and V), and it is what a prefill pays on top of its kernel: at a fixed count of query heads the
measured prefill grows with the KV heads, whose K/V blocks the kernel reads from the L2 either way.
The write runs at a fitted share of DRAM bandwidth (or the L2's when it fits, warm), with a fitted
SM-time per token and, into an fp8 cache, per element (``kv_cache_write_s``).
``AttentionCall.cache_write`` switches it off where no paged cache is written (PyTorch's SDPA).

Every fitted constant is physical and shared by all GPUs: device facts come from
``devices.get_device``.

NB: what a kernel does beyond its structure in ``KERNELS`` is not modelled: FlashAttention 3 runs a
persistent scheduler too, but its producer loads a tile's V only after the previous tile's epilogue
has freed the shared memory V shares with O (``barrier_O`` in
``hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp``), so the model credits it no prefetch; its decode
spends about twice the per-(sequence, KV head) SM-time of TensorRT-LLM's (4 µs against 2 µs);
TensorRT-LLM's context kernels run persistent as well, but prefill tiles run many key blocks each,
over which a prefetch hides little, so they are priced launched one CTA per tile. FlashAttention 3's
fp8-KV path on the H200 reaches 0.49 of DRAM bandwidth in decode against 0.81 in bf16, and the
fastest event-timed call differs by GPU and kernel (6-11 µs) where the model has one launch floor. A
decode split 64 ways or more runs slower than priced: the cost of merging many splits, by a combine
kernel (FlashAttention) or in the kernel itself (TensorRT-LLM), is not modelled, nor is FlashInfer's
planner's split (PrefillSplitQOKVIndptr). Calls with more than ``exact_tiles`` query tiles have
their key blocks summed on a sample of tiles (within about 2%).

Every function here is a pure batched tensor function; shapes are (N,) unless marked. The
package's modules, one job each: ``kernels`` (each kernel's traits, which kernel runs, its
tiles), ``calls`` (the call and batch records), ``geometry`` (pairs, tiles, splits, masked
blocks, FLOPs and bytes), ``physics`` (the time of a call) and ``model`` (the fitted predictor
and its roofline, with save and load).
"""

from __future__ import annotations

from .calls import PHASES, AttentionBatch, AttentionCall
from .geometry import (
    AttentionGeometry,
    attended_pairs,
    attention_bytes,
    attention_flops,
    attention_geometry,
    fill_splits,
    fp8_converted,
    gqa_copy_kernels,
    masked_blocks,
    mha_fwd_splits,
    pack_gqa,
    side_kernels,
    single_query,
    split_kv_splits,
    triton_segmented,
    varlen_schedule_kernels,
)
from .kernels import (
    KERNELS,
    KernelTraits,
    fa2_split_tiles,
    kernel_tiles,
    resident_ctas,
    sdpa_kernel,
    vllm_kernel,
    warp_specialized,
)
from .model import AttentionPredictor, AttentionRoofline
from .physics import DeviceColumns, attention_time, kv_cache_write_s

__all__ = [
    "KERNELS",
    "PHASES",
    "AttentionBatch",
    "AttentionCall",
    "AttentionGeometry",
    "AttentionPredictor",
    "AttentionRoofline",
    "DeviceColumns",
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
    "kv_cache_write_s",
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
