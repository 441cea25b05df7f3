"""How an attention call's work lands on the GPU: the (query, key) pairs it runs, its tiles,
masked blocks, split-KV and side kernels, its FLOPs and compulsory bytes (see the package
docstring). Pure batched tensor functions, shapes (N,)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .calls import AttentionBatch
from .kernels import FP8_CONVERTED, KERNELS, MMA_M, fa2_split_tiles


def fp8_converted(b: AttentionBatch, kernels: Sequence[str]) -> torch.Tensor:
    """K/V elements per key block (in units of kv_tile · head_dim) each call's kernel converts
    on the SM, (N,): ``FP8_CONVERTED`` where the KV cache is fp8, else 0."""
    k = torch.tensor([FP8_CONVERTED[x] for x in kernels], dtype=torch.float64)
    return k * (b.kv_bytes == 1).double()

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
    packs the group. The measured calls show the two copies as a step from batch 1 to 2 in that
    layout alone.
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
