"""GEMMs whose weight is stored narrower than its activations (int4/int8 with group scales,
dequantized in the main loop), and the activation cast of an fp8 Linear: the records carry the
weight's element size apart from the compute dtype's, and the hybrid reads it."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.predict import default_predictor
from torch_gemm_cost.predict.gemm.intensity import tile_traffic
from torch_gemm_cost.predict.gemm.tiles import candidate_table, tile_grid
from torch_gemm_cost.records.types import GemmBatch

INT4_G128 = 0.5 + 2 / 128  # 4 bits a weight and one bf16 scale per 128 weights


def with_fields(g: GemmBatch, **changed: torch.Tensor | None) -> GemmBatch:
    return GemmBatch(**{**{f.name: getattr(g, f.name) for f in fields(g)}, **changed})


def int4(g: GemmBatch) -> GemmBatch:
    """``g`` with its weights stored as int4 in groups of 128 (compulsory bytes recounted)."""
    return with_fields(g, b_bytes=torch.full_like(g.m, INT4_G128), dram_bytes=None)


def test_compulsory_bytes_read_the_weight_at_its_stored_size() -> None:
    g = GemmBatch.from_dims(m=[1, 2048], n=4096, k=4096, dtype="bf16", op="linear")
    assert g.b_bytes.tolist() == [2.0, 2.0]  # the compute dtype's when not given
    q = int4(g)
    # m = 1: A 1·4096·2 = 8192 B, B 4096·4096·(0.5 + 2/128) = 8650752 B, C 1·4096·2 = 8192 B
    # m = 2048: A and C 2048·4096·2 = 16777216 B each, B as above
    assert q.compulsory_bytes.tolist() == [8192 + 8650752 + 8192, 2 * 16777216 + 8650752]
    # the weight alone: a quarter of bf16's bytes, plus its scales (2 B per 128 weights)
    b_bf16 = 4096 * 4096 * 2
    assert (q.compulsory_bytes[0] - 2 * 8192) / b_bf16 == pytest.approx(0.25 + 1 / 128)


def test_tile_traffic_reads_a_b_panel_at_the_weight_size() -> None:
    t = lambda v: torch.tensor([float(v)])
    grid = tile_grid(t(1), t(1), t(4096), t(4096), torch.tensor([1]), t(108), t(262144.0),
                     candidate_table())
    two = torch.tensor([2.0])
    base = tile_traffic(grid, two, two, t(16), t(16), t(16))
    q = tile_traffic(grid, two, two, t(16), t(16), t(16), torch.tensor([INT4_G128]))
    # per candidate: the B panel is tile_n·k_slice elements; int4 moves 0.515625 B of each
    # where bf16 moves 2, so the traffic drops by tile_n·k_slice·1.484375 and A, C stay
    drop = grid.tile_n * grid.k_slice * (2 - INT4_G128)
    assert torch.allclose(base.mem_bytes - q.mem_bytes, drop)
    assert torch.allclose(base.read_inst - q.read_inst, drop / 16)
    # the compute dtype's size when no weight size is given: the same tensors exactly
    same = tile_traffic(grid, two, two, t(16), t(16), t(16), two)
    assert torch.equal(same.mem_bytes, base.mem_bytes)


@pytest.mark.parametrize("device", ["h100_sxm5_80gb", "a100_sxm4_80gb", "l4"])
def test_int4_decode_reads_the_small_weights_and_prefill_stays_compute_bound(device: str
                                                                             ) -> None:
    p, spec = default_predictor(), get_device(device)
    g = GemmBatch.from_dims(m=[1, 16, 4096], n=28672, k=4096, dtype="bf16", op="linear")
    quantized = p.predict(int4(g), spec)
    bf16, q = p.predict(g, spec).time_ms, quantized.time_ms
    floor_ms = int4(g).compulsory_bytes / spec.dram_bw_bytes_per_s * 1e3
    assert bool((q >= floor_ms).all())
    # decode (m ≤ 16) reads a quarter of the bytes: Marlin's near-ideal ~4x; at m = 4096 the
    # GEMM is compute-bound and the weights' size changes little (the shipped weights: 1.06x
    # on the A100, whose bounding tile for the mixed-input kernel is a smaller one; 1.00x on
    # the H100 and the L4)
    assert float(q[0] / bf16[0]) < 0.3 and float(q[1] / bf16[1]) < 0.3
    d = quantized.details
    assert float(d["compute_ms"][2]) > float(d["memory_ms"][2])
    assert float(q[2] / bf16[2]) == pytest.approx(1.0, abs=0.1)


def test_a_weight_at_the_compute_dtype_size_predicts_bit_identically() -> None:
    p = default_predictor()
    g = GemmBatch.from_dims(m=[1, 33, 2048], n=[4096, 50257, 11008], k=[4096, 768, 4095],
                            dtype="bf16", op="linear")
    explicit = with_fields(g, b_bytes=g.in_bytes.clone())
    assert torch.equal(p.predict(g, "h100_sxm5_80gb").time_ms,
                       p.predict(explicit, "h100_sxm5_80gb").time_ms)


def test_an_fp8_linear_pays_its_activation_cast() -> None:
    p, spec = default_predictor(), get_device("h100_sxm5_80gb")
    g = GemmBatch.from_dims(m=[1, 2048], n=4096, k=4096, dtype="fp8", op="linear")
    cast = with_fields(g, quantized_elements=g.m * g.k)
    extra = p.predict(cast, spec).time_ms - p.predict(g, spec).time_ms
    # a cast kernel of its own: reads 2 and writes 1 byte an element, at most the DRAM
    # bandwidth (m = 2048: 3·2048·4096 B / 3.35 TB/s = 7.5 µs), and one launch more
    assert bool((extra >= 3 * g.m * g.k / spec.dram_bw_bytes_per_s * 1e3).all())
    assert torch.equal(p.predict(with_fields(g, quantized_elements=torch.zeros_like(g.m)),
                                 spec).time_ms, p.predict(g, spec).time_ms)
