"""Fused attention: hand-worked FLOPs and bytes, an explicit-mask oracle, split-KV, the DRAM floor
of decode, the loader's errors, save/load, and the shipped weights against their metadata."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.measured.attention import ATTENTION_COLUMNS, load_attention
from torch_gemm_cost.predict.attention import (
    KERNELS,
    AttentionBatch,
    AttentionCall,
    AttentionPredictor,
    AttentionRoofline,
    DeviceColumns,
    attended_pairs,
    attention_bytes,
    attention_flops,
    attention_geometry,
    attention_time,
    fill_splits,
    fp8_converted,
    gqa_copy_kernels,
    kernel_tiles,
    kv_cache_write_s,
    masked_blocks,
    mha_fwd_splits,
    pack_gqa,
    resident_ctas,
    side_kernels,
    split_kv_splits,
    triton_segmented,
    varlen_schedule_kernels,
    vllm_kernel,
    warp_specialized,
)
from torch_gemm_cost.train.attention import score_attention


def one(call: AttentionCall) -> AttentionBatch:
    return AttentionBatch.from_calls([call])


def priced_inputs(call: AttentionCall, gpu: str) -> tuple[Any, ...]:
    """The shipped model, a one-call batch on ``gpu``, its geometry, device columns, family and
    physical constants as float64 tensors: what ``attention_time`` takes."""
    model = AttentionPredictor.shipped()
    b = one(call)
    geo, cols, family, _ = model._inputs(b, [get_device(gpu)])
    c = {k: torch.tensor(v, dtype=torch.float64) for k, v in model.physical_constants().items()}
    return model, b, geo, cols, family, c


def grid_ms(model: AttentionPredictor, b: AttentionBatch, geo: Any, cols: Any, family: Any,
            c: dict[str, torch.Tensor], *, warm_l2: bool = True,
            specialized: float = 0.0) -> float:
    """The grid's time alone (launch and combine aside), ms."""
    out = attention_time(b.with_warm_l2(warm_l2), geo, cols, family, c,
                         l2_share=model.l2_share, l2_steepness=model.l2_steepness,
                         specialized=specialized)
    return float(out["grid_ms"])


# ---------------------------------------------------------------- hand-worked FLOPs and bytes
def test_causal_prefill_by_hand() -> None:
    b = one(AttentionCall("prefill", batch=2, q_len=4, kv_len=4, heads=2, kv_heads=1,
                          head_dim=8))
    # query p sees keys 0..p: 1 + 2 + 3 + 4 = 10 pairs per (sequence, head)
    assert attended_pairs(b).item() == 10
    # 4·d per pair (2·d for QKᵀ, 2·d for PV) · batch · heads · pairs = 4·8·2·2·10 = 1280
    assert attention_flops(b).item() == 1280
    t = attention_bytes(b)
    # Q = O = batch·heads·q·d·2 B = 2·2·4·8·2 = 256; K = V = batch·kv_heads·kv·d·2 = 2·1·4·8·2
    # = 128 (one KV head serves both query heads); no S×S term
    assert (t["q_bytes"].item(), t["o_bytes"].item()) == (256, 256)
    assert (t["k_bytes"].item(), t["v_bytes"].item()) == (128, 128)
    assert t["compulsory_bytes"].item() == 768


def test_noncausal_prefill_by_hand() -> None:
    b = one(AttentionCall("prefill", batch=2, q_len=4, kv_len=4, heads=2, kv_heads=1,
                          head_dim=8, causal=False))
    # every query sees all 4 keys: 16 pairs; 4·8·2·2·16 = 2048 FLOPs, bytes unchanged (768)
    assert attended_pairs(b).item() == 16
    assert attention_flops(b).item() == 2048
    assert attention_bytes(b)["compulsory_bytes"].item() == 768


def test_causal_tiles_run_whole_key_blocks() -> None:
    b = one(AttentionCall("prefill", batch=2, q_len=4, kv_len=4, heads=2, kv_heads=1,
                          head_dim=8, kernel="fa2"))
    geo = attention_geometry(b, torch.tensor([100.0]), torch.tensor([0.0]), q_tile=2, kv_tile=2)
    # query tile 0 (rows 0-1) needs keys 0-1: 1 block; tile 1 (rows 2-3) keys 0-3: 2 blocks.
    # 3 blocks of 2×2 pairs = 12 executed pairs per (sequence, head), against 10 needed;
    # 2 sequences · 2 heads · 12 = 48, on 2·2·2 = 8 CTAs, the longest running 2 blocks
    assert geo.executed_pairs.item() == 48
    assert geo.ctas.item() == 8
    assert geo.tiles_max.item() == 2 and geo.tiles_mean.item() == 1.5
    # each block loads K and V of 2 keys: 2·2·8·2 B = 64 B; 3 blocks · 4 CTA rows = 768 B
    assert geo.requested_kv_bytes.item() == 2 * 2 * 3 * 64
    # a prefill shorter than a tile runs the 16-row MMA steps its rows fill: 40 rows -> 48
    short = one(AttentionCall("prefill", batch=1, q_len=40, kv_len=40, heads=1, kv_heads=1,
                              head_dim=8))
    geo = attention_geometry(short, torch.tensor([100.0]), torch.tensor([0.0]), q_tile=128,
                             kv_tile=128, decode_q_tile=16)
    assert geo.rows_per_tile.item() == 48 and geo.executed_pairs.item() == 48 * 128


def test_gqa_decode_by_hand() -> None:
    b = one(AttentionCall("decode", batch=4, q_len=1, kv_len=1000, heads=32, kv_heads=8,
                          head_dim=128))
    # 1 query per sequence and head sees all 1000 keys: 4·d·batch·heads·1000 = 65 536 000
    assert attention_flops(b).item() == 4 * 128 * 4 * 32 * 1000
    t = attention_bytes(b)
    # K = V = batch·kv_heads·kv·d·2 = 4·8·1000·128·2 = 8 192 000 B: read once per KV head,
    # not once per query head (that would be 4× more); Q = O = 4·32·1·128·2 = 32 768 B
    assert t["k_bytes"].item() == 8_192_000
    assert t["q_bytes"].item() == 32_768
    assert t["compulsory_bytes"].item() == 2 * 8_192_000 + 2 * 32_768
    fp8 = one(AttentionCall("decode", batch=4, q_len=1, kv_len=1000, heads=32, kv_heads=8,
                            head_dim=128, kv_dtype="fp8"))
    assert attention_bytes(fp8)["k_bytes"].item() == 4_096_000  # one byte per element


def test_decode_split_kv_by_hand() -> None:
    b = one(AttentionCall("decode", batch=4, q_len=1, kv_len=1000, heads=32, kv_heads=8,
                          head_dim=128, kernel="fa3"))
    sm = torch.tensor([132.0])
    geo = attention_geometry(b, sm, pack_gqa(b, ["fa3"]), kv_tile=128, decode_q_tile=16)
    # packed: the 4 query heads of a KV head share one 16-row tile -> 4·8 = 32 units < 0.8·132.
    # ⌈1000/128⌉ = 8 key blocks; split counts that change the blocks per split: 1, 2, 3, 4, 8.
    # Wave efficiency n/⌈n⌉, n = 32·s/132: s=4 -> 0.970, s=8 -> 1.939/2 = 0.970 (best);
    # the first within 85% of it is s = 4: 128 CTAs of 2 blocks each
    assert geo.splits.item() == 4
    assert geo.ctas.item() == 128
    assert geo.tiles_max.item() == 2
    assert split_kv_splits(torch.tensor([132.0]), torch.tensor([8.0]), sm).item() == 1
    # 500 keys = 4 blocks: FA2's heuristic splits them 4 ways (s = 1, 2, 4 eligible; s = 4
    # fills 0.970 of a wave), FA3's never splits 4 blocks or fewer
    short = one(AttentionCall("decode", batch=4, q_len=1, kv_len=500, heads=32, kv_heads=8,
                              head_dim=128))
    for kernel, splits in (("fa2", 4), ("fa3", 1)):
        min_blocks = torch.tensor([float(KERNELS[kernel].min_split_blocks)])
        geo = attention_geometry(short, sm, pack_gqa(short, [kernel]), kv_tile=128,
                                 decode_q_tile=16, min_split_blocks=min_blocks)
        assert geo.splits.item() == splits, kernel


def test_tensorrt_llm_decode_tiles_and_splits_by_hand() -> None:
    # the generation kernels hold a KV head's query heads in one CTA: 8 rows for a group of up
    # to 8, 16 up to 16 (keys on the MMA's M side, 256 keys a step), else the 128-row tile
    assert [kernel_tiles("trtllm", 128, 2, causal=True, windowed=False, single=True, group=g)
            for g in (4, 12, 48)] == [(8, 256, 8), (16, 256, 16), (128, 128, 128)]
    # computeNumCtas: min(key blocks, max(1, ⌊SMs / CTAs⌋)); 8 CTAs on 148 SMs -> ⌊18.5⌋ = 18
    # splits of 32 blocks; 4 blocks cap it at 4; 512 CTAs -> ⌊0.29⌋ -> 1
    got = fill_splits(torch.tensor([8.0, 8.0, 512.0]), torch.tensor([32.0, 4.0, 32.0]),
                      torch.full((3,), 148.0))
    assert got.tolist() == [18.0, 4.0, 1.0]
    # 1 sequence, 32 heads over 8 KV heads (groups of 4), 8192 keys on a B200 (148 SMs): one
    # 8-row CTA per KV head = 8 units, ⌈8192 / 256⌉ = 32 key blocks -> 18 splits, 144 CTAs of
    # ⌈32 / 18⌉ = 2 blocks; the kernel merges the splits itself, so no combine kernel runs,
    # and a split call runs the static scheduler, not the persistent one. At batch 64 there
    # are 512 units, no split: persistent, no combine.
    model = AttentionPredictor.shipped()
    calls = [AttentionCall("decode", batch=n, q_len=1, kv_len=8192, heads=32, kv_heads=8,
                           head_dim=128, kernel="trtllm") for n in (1, 64)]
    b = AttentionBatch.from_calls(calls)
    geo, *_ = model._inputs(b, [get_device("b200")] * 2)
    assert geo.rows_per_tile.tolist() == [8.0, 8.0]
    assert geo.splits.tolist() == [18.0, 1.0]
    assert geo.ctas.tolist() == [144.0, 512.0]
    assert geo.tiles_max.tolist() == [2.0, 32.0]
    assert geo.combines.tolist() == [0.0, 0.0]
    assert geo.persistent.tolist() == [0.0, 1.0]


def test_a_persistent_kernel_pays_its_fixed_chain_once_by_hand() -> None:
    # 2048 sequences × 1 KV head (8 query heads) on a B200's 148 SMs: ⌈2048 / 148⌉ = 14 waves of
    # one-block CTAs. A persistent CTA that prefetches its next tile hides the fixed chain
    # (cta_kcycles + cta_kcycles_specialized thousand cycles at the boost clock: TensorRT-LLM's
    # kernel is warp-specialized) of all but its first tile: the grid is 13 chains shorter
    # than the same grid launched one CTA per tile.
    model, b, geo, cols, family, c = priced_inputs(
        AttentionCall("decode", batch=2048, q_len=1, kv_len=16, heads=8, kv_heads=1,
                      head_dim=128, kernel="trtllm"), "b200")
    dev = get_device("b200")
    assert geo.persistent.item() == 1.0
    chain_s = ((c["cta_kcycles"] + c["cta_kcycles_specialized"]) * 1e3
               / (dev.boost_clock_mhz * 1e6))
    launched = replace(geo, persistent=torch.zeros(1, dtype=torch.float64))
    assert (grid_ms(model, b, launched, cols, family, c, specialized=1.0)
            - grid_ms(model, b, geo, cols, family, c, specialized=1.0)) == pytest.approx(
        13 * float(chain_s) * 1e3, rel=1e-9)


def test_warp_specialized_kernels_overlap_and_set_up_by_their_own_constants_by_hand() -> None:
    # FlashAttention 3 and TensorRT-LLM's Blackwell FMHA run producer and consumer warps over
    # asynchronous MMAs; FlashAttention 2, FlashInfer's sm80 template and the Triton kernels
    # issue mma.sync (or tl.dot) and run their softmax in the same warps.
    assert warp_specialized(["fa3", "trtllm", "fa2", "torch_fa2", "flashinfer", "triton",
                             "aotriton"]).tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    # FlashAttention 3 decode on an H200, 16 sequences × 1 KV head (8 query heads), 16 keys,
    # d = 128: 16 one-block CTAs, one wave on 132 SMs. Constants set by hand: no memory time,
    # no per-block latency, no masking; MMA cycles of a 64 × 128 block
    # 4·128·(64·128) / (flops per SM-cycle · 0.5) and softmax cycles s · 64 · 128 chosen equal.
    model, b, geo, cols, family, c = priced_inputs(
        AttentionCall("decode", batch=16, q_len=1, kv_len=16, heads=8, kv_heads=1,
                      head_dim=128, kernel="fa3"), "h200_sxm_141gb")
    dev = get_device("h200_sxm_141gb")
    clk = dev.boost_clock_mhz * 1e6
    assert (geo.ctas.item(), geo.tiles_max.item(), geo.rows_per_tile.item(),
            geo.kv_tile.item()) == (16.0, 1.0, 64.0, 128.0)
    per_cycle = float(cols.peak_flops_per_s[0]) / (dev.sm_count * clk)  # per SM
    mma = 4 * 128 * 64 * 128 / (per_cycle * 0.5)
    def t(v: float) -> torch.Tensor:
        return torch.tensor(v, dtype=torch.float64)

    big, zero = t(1e30), t(0.0)
    c.update(mma_efficiency=t(0.5), softmax_cycles_flash=t(mma / (64 * 128)),
             mask_cycles=zero, block_latency_ns=zero, l2_bytes_per_cycle_per_sm=big,
             dram_efficiency=t(1.0 - 1e-12), cta_kcycles=t(1.0), cta_kcycles_specialized=t(3.0),
             overlap_p=t(1.0), overlap_p_specialized=t(2.0))
    # the synchronous schedule adds the two (p = 1): 2 · mma; the specialized one
    # (p = 2) takes sqrt(2) · mma; the chains are 1,000 and 1,000 + 3,000 cycles
    sync = grid_ms(model, b, geo, cols, family, c, specialized=0.0)
    spec = grid_ms(model, b, geo, cols, family, c, specialized=1.0)
    assert sync == pytest.approx((1e3 + 2 * mma) / clk * 1e3, rel=1e-6)
    assert spec == pytest.approx((4e3 + 2 ** 0.5 * mma) / clk * 1e3, rel=1e-6)


def test_resident_ctas_follow_flashinfers_shared_memory_by_hand() -> None:
    # FlashInfer sizes its prefill kernel for two CTAs an SM where two of its smallest CTAs fit:
    # d = 128, fp8 cache, 16 packed rows (4 warps along the keys): Q 16·128·2 = 4,096 B, one
    # key MMA 2·128·16·4·1 = 16,384 B; 2 · 20,480 = 40,960 ≤ 102,400 (an L40S) -> 2.
    # d = 256, bf16, 64 rows: Q 32,768 + 2·256·16·1·2 = 16,384; 2 · 49,152 = 98,304 fits in
    # 100 KiB but not in 64 KiB -> 2, then 1. Other kernels count one CTA an SM.
    assert resident_ctas("flashinfer", 128, 1, packed_q=8, smem_bytes_per_sm=102400) == 2
    assert resident_ctas("flashinfer", 256, 2, packed_q=32, smem_bytes_per_sm=102400) == 2
    assert resident_ctas("flashinfer", 256, 2, packed_q=32, smem_bytes_per_sm=65536) == 1
    assert resident_ctas("fa2", 128, 2, smem_bytes_per_sm=102400) == 1


def test_co_resident_ctas_overlap_their_chains_and_share_the_sm_by_hand() -> None:
    # FlashInfer decode on an L40S: 2048 sequences × 1 KV head (8 query heads, 16 packed rows),
    # 16 keys: 2048 one-block CTAs on 142 SMs, two resident an SM (⌈2048 / 142⌉ = 15 ≥ 2), so
    # ⌈2048 / 284⌉ = 8 waves instead of ⌈2048 / 142⌉ = 15.
    model, b, geo, cols, family, c = priced_inputs(
        AttentionCall("decode", batch=2048, q_len=1, kv_len=16, heads=8, kv_heads=1,
                      head_dim=128, kv_dtype="fp8", kernel="flashinfer"), "l40s")
    assert (geo.ctas.item(), geo.ctas_per_sm.item()) == (2048.0, 2.0)
    alone = replace(geo, ctas_per_sm=torch.ones(1, dtype=torch.float64))
    big = torch.tensor(1e30, dtype=torch.float64)
    zero = torch.tensor(0.0, dtype=torch.float64)

    def ratio(**over: torch.Tensor) -> float:  # the grid's time, two CTAs an SM over one
        with_over = {**c, **over}
        return (grid_ms(model, b, geo, cols, family, with_over)
                / grid_ms(model, b, alone, cols, family, with_over))

    # latency only (no compute, bandwidth without limit): a wave costs one chain whether it
    # holds one CTA an SM or two, so the grid is 8 / 15 of the one-CTA grid
    fast = {"mma_efficiency": big, "softmax_cycles_flash": zero, "fp8_kv_cycles": zero,
            "mask_cycles": zero, "l2_bytes_per_cycle_per_sm": big, "dram_efficiency": big}
    assert ratio(**fast) == pytest.approx(8 / 15, rel=1e-9)
    # throughput only (no latency, no fixed cycles, bandwidth without limit): two CTAs share
    # the SM's tensor cores and softmax units, so 8 waves of twice the work: 16 / 15
    work = {"cta_kcycles": zero, "block_latency_ns": zero,
            "l2_bytes_per_cycle_per_sm": big, "dram_efficiency": big}
    assert ratio(**work) == pytest.approx(16 / 15, rel=1e-9)


def test_a_few_running_ctas_share_the_dram_between_them_by_hand() -> None:
    # MHA decode on an L40S (FlashAttention 2 splits no MHA decode): 16 sequences × 2 heads,
    # 16,384 keys, d = 128, bf16: 32 CTAs of ⌈16384 / 128⌉ = 128 key blocks, cold L2. With no
    # compute and no latency a CTA streams its bytes at its share of the DRAM among the 32 that
    # run, ε·B / 32 (below its SM's L2 port), so the grid takes the compulsory bytes over ε·B:
    # K and V 16·2·16384·128·2·2 = 268,435,456 B, Q and O 2 · 16·2·128·2 = 16,384 B.
    # An SM's share (ε·B / 142) would have priced it 142 / 32 = 4.4 times longer.
    model, b, geo, cols, family, c = priced_inputs(
        AttentionCall("decode", batch=16, q_len=1, kv_len=16384, heads=2, kv_heads=2,
                      head_dim=128, kernel="fa2"), "l40s")
    dev = get_device("l40s")
    assert (geo.ctas.item(), geo.splits.item(), geo.tiles_mean.item()) == (32.0, 1.0, 128.0)
    zero = torch.tensor(0.0, dtype=torch.float64)
    c.update(mma_efficiency=torch.tensor(1e30, dtype=torch.float64), softmax_cycles_flash=zero,
             cta_kcycles=zero, block_latency_ns=zero)
    cold_ms = grid_ms(model, b, geo, cols, family, c, warm_l2=False)
    dram_bw = float(c["dram_efficiency"]) * dev.dram_bw_bytes_per_s
    assert cold_ms == pytest.approx(268_451_840 / dram_bw * 1e3, rel=1e-9)


def test_flash_attention_2_splits_decode_only_when_it_swaps_heads_into_rows() -> None:
    # vLLM's FlashAttention 2 calls set_params_splitkv only under seqlenq_ngroups_swapped (one
    # query token, more query heads than KV heads, no window), and its heuristic counts two
    # CTA slots per SM ("128 threads per block"). 4 sequences, 32 heads over 8 KV heads,
    # 1000 keys (8 blocks of 128) on 132 SMs: 4 * 8 = 32 units against 264 slots; split
    # counts that change the blocks per split: 1, 2, 3, 4, 8, filling 32 s / 264 of the slots,
    # best 0.970 at s = 8, the first within 85% of it. Without GQA (32 KV heads) or with a
    # window there is no split.
    sm = torch.tensor([132.0])
    traits = KERNELS["fa2"]

    def splits(kv_heads: int, window: int) -> float:
        b = one(AttentionCall("decode", batch=4, q_len=1, kv_len=1000, heads=32,
                              kv_heads=kv_heads, head_dim=128, window=window, kernel="fa2"))
        geo = attention_geometry(b, sm, pack_gqa(b, ["fa2"]), kv_tile=128, decode_q_tile=64,
                                 min_split_blocks=float(traits.min_split_blocks),
                                 split_slots_per_sm=float(traits.split_slots_per_sm),
                                 split_packed_only=float(traits.splits_packed_decode_only))
        return geo.splits.item()

    assert splits(8, 0) == 8
    assert splits(32, 0) == 1
    assert splits(8, 256) == 1


def test_flash_attention_2_copies_a_packed_group_only_when_torch_cannot_view_it() -> None:
    # mha_varlen_fwd packs a decode's GQA group: q.reshape(b, h_k, g, d).transpose(1, 2)
    # .reshape(b·g, h_k, d), and the output back. The last reshape is a view only when a
    # merged dimension is 1: b = 1, or h_k = 1 (then g sits beside a size-1 dimension).
    # Without packing (heads = kv_heads, a window) there is no reshape at all.
    def copies(batch: int, heads: int, kv_heads: int, window: int = 0, kernel: str = "fa2",
               phase: str = "decode", q_len: int = 1) -> float:
        b = one(AttentionCall(phase, batch=batch, q_len=q_len, kv_len=1000, heads=heads,
                              kv_heads=kv_heads, head_dim=128, window=window, kernel=kernel))
        return gqa_copy_kernels(b, [kernel]).item()

    assert copies(2, 32, 8) == 2.0  # (2·4, 8, d) from a transposed (2, 8, 4, d): q in, O out
    assert copies(1, 32, 8) == 0.0  # batch 1: a view
    assert copies(64, 32, 1) == 0.0  # one KV head: a view
    assert copies(64, 32, 32) == 0.0  # MHA: not packed
    assert copies(64, 32, 8, window=128) == 0.0  # a window turns packing off
    assert copies(64, 32, 8, kernel="fa3") == 0.0  # FlashAttention 3 packs inside its kernel
    assert copies(64, 32, 8, phase="prefill", q_len=16) == 0.0  # multi-token: not packed


def test_flash_attention_3_plans_a_varlen_call_of_at_most_992_sequences() -> None:
    # mha_fwd: use_dynamic_split = is_varlen && b <= 992 (32 · 31, the most
    # prepare_varlen_num_blocks handles), and then that kernel runs before the attention kernel
    def side(batch: int, kernel: str, phase: str = "decode", q_len: int = 1) -> tuple[float, ...]:
        b = one(AttentionCall(phase, batch=batch, q_len=q_len, kv_len=512, heads=32,
                              kv_heads=8, head_dim=128, kernel=kernel))
        return (varlen_schedule_kernels(b, [kernel]).item(), side_kernels(b, [kernel]).item())

    assert side(992, "fa3") == (1.0, 1.0)
    assert side(993, "fa3") == (0.0, 0.0)
    assert side(4, "fa3", phase="prefill", q_len=256) == (1.0, 1.0)
    # FlashAttention 2 plans on the host, but copies a packed group: two side kernels
    assert side(4, "fa2") == (0.0, 2.0)
    assert side(4, "trtllm") == (0.0, 0.0)
    # a schedule computed ahead (vLLM's aot_schedule) leaves the call none of its own
    ahead = one(AttentionCall("decode", batch=4, q_len=1, kv_len=512, heads=32, kv_heads=8,
                              head_dim=128, kernel="fa3", scheduled=True))
    assert varlen_schedule_kernels(ahead, ["fa3"]).item() == 0.0


def test_a_small_extra_kernel_costs_sm_clocks_by_hand() -> None:
    # Each extra kernel (split-KV combine, GQA copy) adds extra_kernel_kcycles thousand SM
    # clocks: two copies on an A100 (1410 MHz boost) add 2 · k · 1000 / 1.41e9 s, the same
    # count of clocks on an L40S (2520 MHz) 1410 / 2520 of that time.
    call = AttentionCall("decode", batch=8, q_len=1, kv_len=512, heads=32, kv_heads=8,
                         head_dim=128, kernel="fa2")
    added = {}
    for gpu in ("a100_sxm4_80gb", "l40s"):
        model, b, geo, cols, family, c = priced_inputs(call, gpu)
        t = [float(attention_time(b.with_warm_l2(), geo, cols, family, c, side_count=n,
                                  l2_share=model.l2_share,
                                  l2_steepness=model.l2_steepness)["time_ms"])
             for n in (0.0, 2.0)]
        added[gpu] = t[1] - t[0]
        clock_hz = get_device(gpu).boost_clock_mhz * 1e6
        expect_ms = 2 * float(c["extra_kernel_kcycles"]) * 1e3 / clock_hz * 1e3
        assert added[gpu] == pytest.approx(expect_ms, rel=1e-9)
    assert added["l40s"] / added["a100_sxm4_80gb"] == pytest.approx(1410 / 2520, rel=1e-9)
    # … and the shipped predictor counts them where gqa_copy_kernels says
    pred = AttentionPredictor.shipped()
    dev = get_device("a100_sxm4_80gb")
    one_seq, two_seq = (pred.predict(one(replace(call, batch=n, kv_len=16)), dev).time_ms.item()
                        for n in (1, 2))
    assert two_seq - one_seq > 0.9 * added["a100_sxm4_80gb"]


def test_triton_pairs_cost_sm_cycles_not_the_tensor_peak() -> None:
    # vLLM's Triton kernel is priced per (row, key) pair in SM-cycles alone, so neither the
    # tensor peak nor the MMA efficiency moves its time; FlashAttention 2's compute-bound
    # prefill moves with both
    def times(kernel: str) -> list[float]:
        call = AttentionCall("prefill", batch=4, q_len=4096, kv_len=4096, heads=32,
                             kv_heads=8, head_dim=128, kernel=kernel)
        model, b, geo, cols, family, c = priced_inputs(call, "l40s")
        slower = dict(c, mma_efficiency=c["mma_efficiency"] / 2)
        fewer_flops = replace(cols, peak_flops_per_s=cols.peak_flops_per_s / 8)
        return [float(attention_time(b.with_warm_l2(), geo, cl, family, cc,
                                     l2_share=model.l2_share,
                                     l2_steepness=model.l2_steepness)["time_ms"])
                for cl, cc in ((cols, c), (cols, slower), (fewer_flops, c))]

    base, slower, fewer = times("triton")
    assert base == slower == fewer
    base, slower, fewer = times("fa2")
    assert slower > 1.2 * base and fewer > 2 * base


def test_masked_blocks_by_hand() -> None:
    # 128-key blocks. Causal prefill of 256 tokens: rows 0-63 see keys [0, 64), one block, seen
    # in part by every row (the diagonal); rows 128-191 see [0, 192), two blocks, of which
    # block 0 every row sees whole and block 1 holds the diagonal. With a 128-key window those
    # rows see [1, 192): the last row's first key is 64, so no block is whole and both are
    # masked. A decode over 200 keys runs two blocks, the second ragged; over 256, none masked.
    def mb(q: float, kv: float, window: float, first: float, last: float) -> list[float]:
        t = [torch.tensor([v], dtype=torch.float64) for v in (q, kv, 1.0, window, first, last)]
        blocks, masked = masked_blocks(*t, kv_tile=128.0)
        return [blocks.item(), masked.item()]

    assert mb(256, 256, 0, 0, 63) == [1.0, 1.0]
    assert mb(256, 256, 0, 128, 191) == [2.0, 1.0]
    assert mb(256, 256, 128, 128, 191) == [2.0, 2.0]
    assert mb(1, 200, 0, 0, 0) == [2.0, 1.0]
    assert mb(1, 256, 0, 0, 0) == [2.0, 0.0]
    # in a call: FlashAttention 2's 64 x 128 tiles over 256 tokens, a 128-key window: tiles
    # 0-63 and 64-127 run block 0 (masked), 128-191 and 192-255 blocks 0-1 and 0-1 of [1, 192)
    # and [65, 256), all masked: 1.5 blocks a CTA, all masked, the longest CTA two, both masked
    call = AttentionCall("prefill", batch=1, q_len=256, kv_len=256, heads=1, kv_heads=1,
                         head_dim=128, window=128, kernel="fa2")
    _, _, geo, _, _, _ = priced_inputs(call, "l40s")
    assert (geo.tiles_mean.item(), geo.masked_mean.item(), geo.tiles_max.item(),
            geo.masked_max.item()) == (1.5, 1.5, 2.0, 2.0)


def test_o_store_is_paid_in_the_last_wave_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # a CTA retires once its O store is issued: dropping the O bytes shortens a grid of 32
    # waves and one of 249 by the same time, one CTA's store (FlashAttention 3 on an H200: 128
    # packed rows, 32 positions a tile, 512 tiles x 8 KV heads a sequence on 132 SMs)
    import torch_gemm_cost.predict.attention.physics as att

    full = att.attention_bytes

    def no_o(b: AttentionBatch) -> dict[str, torch.Tensor]:
        out = full(b)
        out["o_bytes"] = torch.zeros_like(out["o_bytes"])
        return out

    saved = []
    for batch in (1, 8):
        call = AttentionCall("prefill", batch=batch, q_len=16384, kv_len=16384, heads=32,
                             kv_heads=8, head_dim=128)
        model, b, geo, cols, family, c = priced_inputs(call, "h200_sxm_141gb")
        with_o = grid_ms(model, b, geo, cols, family, c, warm_l2=False)
        with monkeypatch.context() as m:
            m.setattr(att, "attention_bytes", no_o)
            without = grid_ms(model, b, geo, cols, family, c, warm_l2=False)
        waves = float(torch.ceil(geo.ctas / (geo.ctas_per_sm * cols.sm_count)))
        saved.append((waves, with_o - without))
    assert saved[0][0] == 32.0 and saved[1][0] == 249.0
    assert saved[1][1] == pytest.approx(saved[0][1], rel=1e-9) and saved[0][1] > 0


def test_prefill_split_kv_by_hand() -> None:
    # one sequence of 4096 tokens, one head, d = 128, on 132 SMs: FA3's 128 x 128 tiles give
    # 4096/128 = 32 query tiles, 32 < 0.8 * 132 CTAs; the last tile sees 32 key blocks. As in
    # decode, s = 4 is the first split count within 85% of the best wave efficiency
    # (32 * 4 / 132 = 0.970), so FA3 (get_num_splits runs for every call) splits each tile's
    # blocks 4 ways: 128 CTAs, the longest of 8 blocks. vLLM's FlashAttention 2 and
    # TensorRT-LLM's prefill do not split a multi-token query.
    b = one(AttentionCall("prefill", batch=1, q_len=4096, kv_len=4096, heads=1, kv_heads=1,
                          head_dim=128))
    sm = torch.tensor([132.0])
    for kernel, splits in (("fa3", 4), ("flashinfer", 4), ("fa2", 1), ("trtllm", 1)):
        traits = KERNELS[kernel]
        geo = attention_geometry(b, sm, pack_gqa(b, [kernel]), q_tile=128, kv_tile=128,
                                 min_split_blocks=float(traits.min_split_blocks),
                                 split_prefill=float(traits.splits_prefill))
        assert geo.splits.item() == splits, kernel
        assert geo.tiles_max.item() == 32 / splits, kernel
        assert geo.ctas.item() == 32 * splits, kernel
    # the fitted model takes the split: FA3 on an H200 runs this call faster than the same
    # structure without the split would (its time is set by the longest CTA's 8 blocks)
    pred = AttentionPredictor.shipped()
    split = pred.predict(one(AttentionCall("prefill", batch=1, q_len=4096, kv_len=4096, heads=1,
                                           kv_heads=1, head_dim=128, kernel="fa3")),
                         "h200_sxm_141gb").details["splits"].item()
    assert split == 4


def test_pytorch_flash_attention_2_splits_a_short_prefill_by_hand() -> None:
    # PyTorch's mha_fwd runs num_splits_heuristic for every call. A100: 108 SMs, 216 slots.
    # 8 heads x 256 tokens, d = 128: 8 * ceil(256 / 64) = 32 query blocks, ceil(256 / 128) = 2
    # key blocks; s = 1 fills 32 / 216 = 0.148 of a wave, s = 2 fills 0.296, and 0.148 is under
    # 85% of it: 2 splits, on the split-KV kernel's 64-row tiles: 8 * 4 * 2 = 64 CTAs.
    # 16 heads x 512 tokens, d = 64: 16 * 8 = 128 query blocks, 2 key blocks of 256; s = 1 fills
    # 0.593 and s = 2 fills 1.185 / 2 = 0.593: no split, the regular 128-row tiles, 16 * 4 = 64.
    a100 = get_device("a100_sxm4_80gb")
    calls = [AttentionCall("prefill", batch=1, q_len=256, kv_len=256, heads=8, kv_heads=8,
                           head_dim=128, kernel="torch_fa2"),
             AttentionCall("prefill", batch=1, q_len=512, kv_len=512, heads=16, kv_heads=16,
                           head_dim=64, kernel="torch_fa2")]
    batch = AttentionBatch.from_calls(calls)
    sm = torch.full((2,), float(a100.sm_count), dtype=torch.float64)
    assert mha_fwd_splits(batch, sm).tolist() == [2.0, 1.0]
    out = AttentionPredictor.shipped().predict(batch, "a100_sxm4_80gb")
    assert out.details["splits"].tolist() == [2.0, 1.0]
    assert out.details["ctas"].tolist() == [64.0, 64.0]
    # vLLM's FlashAttention 2 (the varlen path) does not split the first call, and no kernel
    # splits a call that drops probabilities: the first call on its regular 128-row tiles,
    # 8 * 2 = 16 CTAs, and a decode of one query over 8 heads and 4096 keys unsplit too
    fa2 = AttentionPredictor.shipped().predict(one(replace(calls[0], kernel="fa2")),
                                               "a100_sxm4_80gb")
    assert fa2.details["splits"].item() == 1.0
    dropped = [replace(calls[0], dropout=True),
               AttentionCall("decode", batch=1, q_len=1, kv_len=4096, heads=8, kv_heads=8,
                             head_dim=128, kernel="torch_fa2", dropout=True)]
    out = AttentionPredictor.shipped().predict(AttentionBatch.from_calls(dropped),
                                               "a100_sxm4_80gb")
    assert out.details["splits"].tolist() == [1.0, 1.0]
    assert out.details["ctas"].tolist() == [16.0, 8.0]
    with pytest.raises(TypeError, match="dropout must be True or False"):
        replace(calls[0], dropout=0.1)


def test_kv_cache_write_by_hand() -> None:
    # 2 sequences x 1024 new tokens x 8 KV heads x d = 128, K and V: 4,194,304 elements;
    # bf16 in, bf16 cache: 4 bytes each, 16,777,216 B at 0.5 x 1 TB/s = 33.554 us; one CTA
    # per token, 2048 x 50 ns of SM-time over 100 SMs = 1.024 us: 34.578 us in all.
    # Into an fp8 cache: 3 bytes each, 25.166 us, plus 0.5 cycles per element at 1 GHz,
    # 2.097 ms of SM-time over 100 SMs = 20.972 us: 47.162 us. cache_write=False: nothing.
    dev = DeviceColumns(sm_count=torch.tensor([100.0] * 3), clock_hz=torch.tensor([1e9] * 3),
                        peak_flops_per_s=torch.tensor([1e14] * 3),
                        dram_bw_bytes_per_s=torch.tensor([1e12] * 3),
                        l2_bytes=torch.tensor([4e7] * 3))
    base = AttentionCall("prefill", batch=2, q_len=1024, kv_len=1024, heads=32, kv_heads=8,
                         head_dim=128)
    b = AttentionBatch.from_calls([base, replace(base, kv_dtype="float8_e4m3fn"),
                                   replace(base, cache_write=False)])
    c = {"cache_write_efficiency": torch.tensor(0.5), "cache_token_ns": torch.tensor(50.0),
         "cache_fp8_cycles": torch.tensor(0.5)}
    got = kv_cache_write_s(b, dev, c, l2_bw=torch.tensor([1e13] * 3), l2_share=0.75,
                           l2_steepness=4.0) * 1e6
    assert got.tolist() == pytest.approx([34.578, 47.162, 0.0], abs=1e-3)
    # the predictor adds it to the kernel, and reports it
    pred = AttentionPredictor.shipped()
    with_write, without = (pred.predict(one(x), "h200_sxm_141gb")
                           for x in (base, replace(base, cache_write=False)))
    assert with_write.details["cache_write_ms"].item() > 0
    assert without.details["cache_write_ms"].item() == 0
    assert (with_write.time_ms - without.time_ms).item() == pytest.approx(
        with_write.details["cache_write_ms"].item())


def test_sliding_window_by_hand() -> None:
    pre = one(AttentionCall("prefill", batch=1, q_len=6, kv_len=6, heads=1, kv_heads=1,
                            head_dim=4, window=3))
    # query p sees min(p + 1, 3) keys: 1 + 2 + 3 + 3 + 3 + 3 = 15 (21 without the window)
    assert attended_pairs(pre).item() == 15
    dec = one(AttentionCall("decode", batch=2, q_len=1, kv_len=1000, heads=8, kv_heads=2,
                            head_dim=64, window=128))
    # the new token sees the last 128 keys, so decode reads only those:
    # K = batch·kv_heads·128·d·2 = 2·2·128·64·2 = 65 536 B; FLOPs 4·64·2·8·128 = 524 288
    assert attended_pairs(dec).item() == 128
    assert attention_bytes(dec)["k_bytes"].item() == 65_536
    assert attention_flops(dec).item() == 524_288


# ---------------------------------------------------------------- oracle: an explicit mask
def explicit_mask(q_len: int, kv_len: int, window: int, causal: bool) -> torch.Tensor:
    """(q_len, kv_len) bool: query i (position kv_len − q_len + i) may see key j."""
    pos = torch.arange(kv_len - q_len, kv_len).unsqueeze(1)  # (q, 1)
    key = torch.arange(kv_len).unsqueeze(0)  # (1, kv)
    mask = key <= pos if causal else torch.ones(q_len, kv_len, dtype=torch.bool)
    if window:
        mask &= key > pos - window
    return mask


CASES = [(q, kv, w, c) for q, kv in ((1, 1), (1, 37), (5, 5), (37, 37), (16, 100), (100, 100),
                                     (64, 300))
         for w in (0, 1, 7, 64) for c in (True, False)]


def test_attended_pairs_match_an_explicit_mask() -> None:
    calls = [AttentionCall("prefill", batch=1, q_len=q, kv_len=kv, heads=1, kv_heads=1,
                           head_dim=8, window=w, causal=c) for q, kv, w, c in CASES]
    got = attended_pairs(AttentionBatch.from_calls(calls)).tolist()
    want = [int(explicit_mask(q, kv, w, c).sum()) for q, kv, w, c in CASES]
    assert got == want


@pytest.mark.parametrize("q_tile,kv_tile", [(16, 16), (8, 32), (32, 8)])
def test_executed_blocks_match_the_tiles_an_explicit_mask_touches(q_tile: int,
                                                                   kv_tile: int) -> None:
    calls = [AttentionCall("prefill", batch=1, q_len=q, kv_len=kv, heads=1, kv_heads=1,
                           head_dim=8, window=w, causal=c) for q, kv, w, c in CASES if q > 1]
    b = AttentionBatch.from_calls(calls)
    geo = attention_geometry(b, torch.full((len(b),), 100.0), torch.zeros(len(b)),
                             q_tile=q_tile, kv_tile=kv_tile)
    got = (geo.executed_pairs / (geo.rows_per_tile * kv_tile)).tolist()
    want = []
    for c in calls:
        mask = explicit_mask(c.q_len, c.kv_len, c.window, c.causal)
        blocks = 0
        for i in range(0, c.q_len, q_tile):  # a kernel runs every block its tile's mask touches
            rows = mask[i:i + q_tile]
            blocks += sum(bool(rows[:, j:j + kv_tile].any()) for j in range(0, c.kv_len, kv_tile))
        want.append(blocks)
    assert got == want


# ---------------------------------------------------------------- the time model's floors
def test_cold_prediction_never_beats_the_roofline() -> None:
    model = AttentionPredictor.shipped()
    calls = [AttentionCall(phase, batch=b, q_len=1 if phase == "decode" else s, kv_len=s,
                           heads=32, kv_heads=kvh, head_dim=d, window=w)
             for phase in ("prefill", "decode") for b in (1, 16) for s in (128, 4096)
             for kvh in (8, 32) for d in (64, 128) for w in (0, 1024)]
    for dev in ("a100_sxm4_80gb", "h200_sxm_141gb", "l40s", "h100_sxm5_80gb"):
        pred = model.predict(AttentionBatch.from_calls(calls), dev).time_ms
        roof = AttentionRoofline().predict(AttentionBatch.from_calls(calls), dev).time_ms
        assert bool((pred >= roof).all()), dev


@pytest.mark.parametrize("device", ["a100_sxm4_80gb", "h200_sxm_141gb", "b200", "l40s"])
def test_large_kv_decode_takes_at_least_its_kv_bytes_over_dram(device: str) -> None:
    call = AttentionCall("decode", batch=64, q_len=1, kv_len=32768, heads=32, kv_heads=8,
                         head_dim=128)
    # K and V: 2·64·8·32768·128·2 B = 8.6 GB, far past any L2
    kv_bytes = 2 * 64 * 8 * 32768 * 128 * 2
    floor_ms = kv_bytes / get_device(device).dram_bw_bytes_per_s * 1e3
    pred = AttentionPredictor.shipped().predict(one(call), device)
    assert pred.time_ms.item() >= floor_ms
    assert pred.bound == ("memory",)
    warm = AttentionPredictor.shipped().predict(AttentionBatch.from_calls([call], warm_l2=True),
                                                device)
    assert warm.time_ms.item() >= floor_ms  # a warm L2 cannot hold it either


def test_vllm_kernel_follows_the_architecture() -> None:
    assert vllm_kernel(get_device("a100_sxm4_80gb"), 128, "bfloat16") == "fa2"
    assert vllm_kernel(get_device("l40s"), 128, "fp8") == "flashinfer"
    assert vllm_kernel(get_device("l40s"), 192, "fp8") == "triton"
    assert vllm_kernel(get_device("h200_sxm_141gb"), 192, "fp8") == "fa3"
    assert vllm_kernel(get_device("b200"), 128, "fp8") == "trtllm"


def test_kernel_tiles_follow_the_kernels_sources() -> None:
    def tiles(kernel: str, d: int, kv_bytes: int = 2, causal: bool = True,
              windowed: bool = False, single: bool = False) -> tuple[int, int, int]:
        return kernel_tiles(kernel, d, kv_bytes, causal=causal, windowed=windowed,
                            single=single)

    # FlashAttention 2's split-KV kernel: 64 rows; 256 keys to d = 64, 128 to 128, 64 beyond;
    # a one-token query still runs all 64 rows
    assert [tiles("fa2", d) for d in (64, 128, 256)] == [(64, 256, 64), (64, 128, 64),
                                                         (64, 64, 64)]
    assert tiles("fa2", 128, single=True)[2] == 64
    # FlashAttention 3, paged KV without TMA: 16-bit 192 x 128 (causal) / 160 at d = 64,
    # 128 x 128 at 128, 128 x 96 at 192, 128 x 80 at 256 (64 with a window); fp8 128 x 160 at
    # 128; decode of up to 64 packed rows runs one warpgroup: 64 x 128 (16-bit), 64 x 96 (fp8)
    assert tiles("fa3", 64)[:2] == (192, 128)
    assert tiles("fa3", 64, causal=False)[:2] == (192, 160)
    assert tiles("fa3", 128) == (128, 128, 128)
    assert tiles("fa3", 192)[:2] == (128, 96)
    assert tiles("fa3", 256)[:2] == (128, 80)
    assert tiles("fa3", 256, windowed=True)[:2] == (128, 64)
    assert tiles("fa3", 128, kv_bytes=1)[:2] == (128, 160)
    assert tiles("fa3", 128, single=True) == (64, 128, 64)
    assert tiles("fa3", 128, kv_bytes=1, single=True) == (64, 96, 64)
    # PyTorch's own FlashAttention 2 (no paged cache): 128 x 64 at d = 128 on an A100, 128 x 32
    # (64 x 64 causal) on sm86/sm89; 128 x 64 at 256 with 128-192 KiB of shared memory per SM,
    # 64 x 64 on an H100's 228 KiB; a one-token query takes the split-KV kernel's tiles
    assert tiles("torch_fa2", 128) == (128, 64, 128)
    assert kernel_tiles("torch_fa2", 128, 2, causal=False, windowed=False, single=False,
                        sm8x=True) == (128, 32, 128)
    assert kernel_tiles("torch_fa2", 128, 2, causal=True, windowed=False, single=False,
                        sm8x=True) == (64, 64, 64)
    assert kernel_tiles("torch_fa2", 256, 2, causal=True, windowed=False, single=False,
                        smem_bytes_per_sm=164 * 1024) == (128, 64, 128)
    assert kernel_tiles("torch_fa2", 256, 2, causal=True, windowed=False, single=False,
                        smem_bytes_per_sm=228 * 1024) == (64, 64, 64)
    assert tiles("torch_fa2", 128, single=True) == (64, 128, 64)
    # FlashInfer's prefill on an L40S (100 KiB of shared memory per SM), fp8 cache, 16-bit Q:
    # a packed query over 64 rows takes 128-row tiles, 4 warps along the rows, 2 row MMAs per
    # warp so at most 8/2 = 4 key MMAs; two CTAs of 32 KiB of Q + 4 KiB per key MMA fit in
    # 100 KiB, so each has 51,200 B: (51,200 - 32,768) / 4,096 = 4 -> 4 x 16 = 64 keys.
    # 17-64 packed rows: 64-row tiles, 1 row MMA, (51,200 - 16,384) / 4,096 = 8 -> 128 keys.
    # Up to 16: 16 rows, 4 warps along the keys: (51,200 - 4,096) / 16,384 = 2 -> 2 x 4 x 16.
    # d = 256 never takes 128 rows: 64 x 32. vLLM's decode runs the same kernel with the
    # group packed into the rows: 4 heads -> 16 x 128, 32 -> 64 x 128.
    def fi(d: int, packed_q: int) -> tuple[int, int, int]:
        return kernel_tiles("flashinfer", d, 1, causal=True, windowed=False, single=False,
                            smem_bytes_per_sm=100 * 1024, in_bytes=2, packed_q=packed_q)

    assert [fi(128, q) for q in (8, 32, 4096)] == [(16, 128, 16), (64, 128, 64),
                                                   (128, 64, 128)]
    assert fi(256, 4096) == (64, 32, 64)
    assert [kernel_tiles("flashinfer", 128, 1, causal=True, windowed=False, single=True,
                         smem_bytes_per_sm=100 * 1024, packed_q=q) for q in (4, 32)] == [
        (16, 128, 16), (64, 128, 64)]
    # a kernel whose source is not public takes the predictor's tiles
    assert tiles("trtllm", 128) == (128, 128, 16)
    assert kernel_tiles("aotriton", 64, 2, causal=True, windowed=False, single=True,
                        default=(32, 64, 8)) == (32, 64, 8)


def test_vllm_triton_tiles_and_segments_by_hand() -> None:
    # BLOCK_M: 16 rows up to a group of 16 query heads a KV head, else the group's next power
    # of two (a group of 20 -> 32); TILE_SIZE: 32 keys in the 2D kernel, 16 in the 3D one for a
    # 16-bit query, 32 for an 8-bit one
    def tri(group: int, segmented: bool = False, in_bytes: int = 2) -> tuple[int, int, int]:
        return kernel_tiles("triton", 192, 1, causal=True, windowed=False, single=segmented,
                            group=group, segmented=segmented, in_bytes=in_bytes)

    assert [tri(g) for g in (1, 4, 16, 20)] == [(16, 32, 16), (16, 32, 16), (16, 32, 16),
                                                 (32, 32, 32)]
    assert tri(4, segmented=True) == (16, 16, 16)
    assert tri(4, segmented=True, in_bytes=1) == (16, 32, 16)
    # the 3D kernel: a single query of at most 128 // kv_heads sequences (8 KV heads: 16)
    calls = [AttentionCall("decode", batch=n, q_len=1, kv_len=4096, heads=32, kv_heads=8,
                           head_dim=192, kv_dtype="fp8") for n in (16, 17)]
    calls.append(AttentionCall("prefill", batch=1, q_len=64, kv_len=64, heads=32, kv_heads=8,
                               head_dim=192, kv_dtype="fp8"))
    b = AttentionBatch.from_calls(calls)
    assert triton_segmented(b, ["triton"] * 3).tolist() == [16.0, 0.0, 0.0]
    assert triton_segmented(b, ["fa3"] * 3).tolist() == [0.0, 0.0, 0.0]
    # one sequence, 2 KV heads (a group of 16), 16384 keys: 1 x 2 x 16 segments = 32 CTAs,
    # each over 16384 / 16 keys / 16 segments = 64 tiles of 16 keys, merged by one more kernel
    call = AttentionCall("decode", batch=1, q_len=1, kv_len=16384, heads=32, kv_heads=2,
                         head_dim=192, kv_dtype="fp8", kernel="triton")
    _, _, geo, _, _, _ = priced_inputs(call, "b200")
    assert (geo.ctas.item(), geo.splits.item(), geo.tiles_mean.item(),
            geo.combines.item(), geo.ctas_per_sm.item()) == (32.0, 16.0, 64.0, 1.0, 2.0)
    # 2D above the threshold: 128 sequences x 2 KV heads, unsplit, 16384 / 32 = 512 tiles
    _, _, geo, _, _, _ = priced_inputs(replace(call, batch=128), "b200")
    assert (geo.ctas.item(), geo.splits.item(), geo.tiles_mean.item()) == (256.0, 1.0, 512.0)


def test_fp8_kv_conversion_by_kernel() -> None:
    calls = [AttentionCall("decode", batch=1, q_len=1, kv_len=4096, heads=8, kv_heads=8,
                           head_dim=128, kv_dtype=kv) for kv in ("fp8", "fp8", "fp8", "bf16")]
    b = AttentionBatch.from_calls(calls)
    # FlashInfer dequantizes K and V, FlashAttention 3 transposes V alone, TensorRT-LLM reads
    # fp8 as it is; a 16-bit cache converts nothing
    got = fp8_converted(b, ["flashinfer", "fa3", "trtllm", "flashinfer"]).tolist()
    assert got == [2.0, 1.0, 0.0, 0.0]
    # on the SM side of a block: 2 · kv_tile · d elements at fp8_kv_cycles each, so a decode
    # over a long fp8 cache takes longer with FlashInfer's conversion than without it
    pred = AttentionPredictor.shipped()
    dev = get_device("l40s")
    flashinfer, trtllm = (pred.predict(one(replace(calls[0], kernel=k)), dev).time_ms.item()
                          for k in ("flashinfer", "trtllm"))
    assert flashinfer > trtllm


def test_bad_calls_name_the_value_and_a_good_one() -> None:
    with pytest.raises(ValueError, match=r"^unknown phase 'prefil'; did you mean 'prefill'\?$"):
        AttentionCall("prefil", batch=1, q_len=1, kv_len=1, heads=1, kv_heads=1, head_dim=8)
    with pytest.raises(ValueError, match="nearest kv_heads that divides it is 4"):
        AttentionCall("decode", batch=1, q_len=1, kv_len=8, heads=12, kv_heads=5, head_dim=8)
    with pytest.raises(ValueError, match="kv_len must be at least 9"):
        AttentionCall("prefill", batch=1, q_len=9, kv_len=8, heads=1, kv_heads=1, head_dim=8)
    with pytest.raises(ValueError, match=r"^unknown kernel 'fa22'; did you mean 'fa2'\?$"):
        AttentionCall("decode", batch=1, q_len=1, kv_len=8, heads=1, kv_heads=1, head_dim=8,
                      kernel="fa22")
    with pytest.raises(TypeError, match="cache_write must be True or False, got 'no'"):
        AttentionCall("decode", batch=1, q_len=1, kv_len=8, heads=1, kv_heads=1, head_dim=8,
                      cache_write="no")  # type: ignore[arg-type]


# ---------------------------------------------------------------- the loader
HEADER = ",".join(ATTENTION_COLUMNS) + "\n"
GOOD = ("a100_sxm4_80gb,NVIDIA A100-SXM4-80GB,aiconfigurator,decode,vllm_flash_attn,1,1,1024,"
        "12,4,128,0,bfloat16,bfloat16,0.0194933\n")


def write_csv(tmp_path: Path, body: str, header: str = HEADER) -> Path:
    path = tmp_path / "attention.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(header + body)
    return path


def test_loader_reads_good_rows(tmp_path: Path) -> None:
    m = load_attention(write_csv(tmp_path, GOOD * 3))
    assert len(m) == 3 and m.gpu == ("a100_sxm4_80gb",) * 3
    assert m.calls.kernel == ("fa2",) * 3 and m.kernel == ("vllm_flash_attn",) * 3
    assert m.calls.heads.tolist() == [12.0] * 3 and m.latency_ms[0].item() == 0.0194933


@pytest.mark.parametrize("column,value,message", [
    ("gpu", "a100_sxm4_80g", "unknown device 'a100_sxm4_80g'.*a100_sxm4_80gb"),
    ("phase", "decod", r"unknown phase 'decod'; did you mean 'decode'\?"),
    ("kernel", "vllm_flash_atn", (r"unknown kernel 'vllm_flash_atn'; did you mean "
                                  r"'vllm_flash_attn', 'vllm_flash_attn_fa4', 'vllm_flash_attn_fa3'\?")),
    ("batch", "2.5", "expected an integer, got '2.5'"),
    ("kv_len", "0", "expected an integer ≥ 1, got 0"),
    ("kv_heads", "5", "5 does not divide heads 12"),
    ("kv_dtype", "fp9", "unknown dtype 'fp9'"),
    ("latency_ms", "-1", "expected a positive time"),
])
def test_loader_errors_name_file_line_and_column(tmp_path: Path, column: str, value: str,
                                                 message: str) -> None:
    fields = GOOD.strip().split(",")
    fields[ATTENTION_COLUMNS.index(column)] = value
    path = write_csv(tmp_path, GOOD + ",".join(fields) + "\n")
    with pytest.raises(ValueError, match=f"{path}: line 3: column '{column}': {message}"):
        load_attention(path)


def test_loader_names_missing_columns_and_files(tmp_path: Path) -> None:
    header = HEADER.replace(",latency_ms", "")
    with pytest.raises(ValueError, match=r"line 1: missing column\(s\) latency_ms; the attention"):
        load_attention(write_csv(tmp_path, GOOD.rsplit(",", 1)[0] + "\n", header))
    with pytest.raises(FileNotFoundError, match="attention data not found"):
        load_attention(tmp_path / "nowhere")


# ---------------------------------------------------------------- fit, save, load
def small_measured(tmp_path: Path):
    rows = []
    for gpu, name in (("a100_sxm4_80gb", "NVIDIA A100-SXM4-80GB"), ("l40s", "NVIDIA L40S")):
        for s in (256, 2048):
            for b in (1, 8):
                ms_p = 2e-12 * 4 * 128 * 32 * b * s * s / 2 + 0.012  # a made-up, smooth law
                rows.append(f"{gpu},{name},x,prefill,vllm_flash_attn,{b},{s},{s},32,8,128,0,"
                            f"bfloat16,bfloat16,{ms_p:.6f}\n")
                ms_d = 8 * b * s * 128 * 4 / 1.5e12 * 1e3 + 0.01
                rows.append(f"{gpu},{name},x,decode,vllm_flash_attn,{b},1,{s},32,8,128,0,"
                            f"bfloat16,bfloat16,{ms_d:.6f}\n")
    return load_attention(write_csv(tmp_path, "".join(rows)))


def test_fit_save_load_round_trip(tmp_path: Path) -> None:
    measured = small_measured(tmp_path)
    model = AttentionPredictor(steps=40, seed=3).fit(measured)
    assert model.n_train_rows_ == len(measured)
    before = model.predict_measured(measured)
    path = model.save(tmp_path / "w.json", metadata={"note": "test"})
    loaded = AttentionPredictor.load(path)
    assert torch.equal(loaded.predict_measured(measured), before)
    assert loaded.get_params() == model.get_params()
    assert loaded.metadata_ == {"note": "test"}
    again = AttentionPredictor(steps=40, seed=3).fit(measured)  # seeded: the same fit
    assert torch.equal(again.predict_measured(measured), before)


def test_load_rejects_bad_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        AttentionPredictor.load(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        AttentionPredictor.load(bad)
    doc = AttentionPredictor.shipped().to_dict()
    del doc["params"]["launch_us"]
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="missing parameter 'launch_us'"):
        AttentionPredictor.load(bad)
    with pytest.raises(ValueError, match="not fitted"):
        AttentionPredictor().predict(one(AttentionCall("decode", 1, 1, 8, 1, 1, 8)), "l40s")


# ---------------------------------------------------------------- the shipped weights
@pytest.fixture(scope="module")
def attention_data(data_dir: Path) -> Path:
    path = data_dir / "attention" / "aiconfigurator.csv.gz"
    if not path.is_file():
        pytest.skip(f"attention data not found at {path.resolve()} (set TORCH_GEMM_COST_DATA)")
    return path


@pytest.mark.data
def test_shipped_weights_reproduce_their_recorded_in_sample_scores(attention_data: Path
                                                                   ) -> None:
    model = AttentionPredictor.shipped()
    recorded = model.metadata_["metrics"]
    assert {d["source"] for d in model.metadata_["data_sources"]} == {"aiconfigurator"}
    measured = load_attention(attention_data)
    scores = score_attention(measured, model.predict_measured(measured),
                             min_ms=recorded["min_ms"])
    got = {(s.gpu, s.phase, s.kv_dtype): s for s in scores}
    assert len(got) == len(recorded["groups"])
    for want in recorded["groups"]:
        s = got[(want["gpu"], want["phase"], want["kv_dtype"])]
        assert s.rows == want["rows"]
        assert s.mape == pytest.approx(want["mape"], abs=1e-4)
        assert s.median_ratio == pytest.approx(want["median_ratio"], abs=1e-4)
    overall = sum(s.mape for s in scores) / len(scores)
    assert overall == pytest.approx(recorded["overall_group_mape"], abs=1e-4)
